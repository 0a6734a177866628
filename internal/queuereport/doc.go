// Package queuereport computes gpugov's queue service report (docs/design.md §6) from
// job, run, wait-event and GPU-release records, and compares two reports. It is
// pure: no I/O, no clock (the window and "now" are inputs) and deterministic
// output ordering, so the service (records loaded from PostgreSQL) and the trace
// simulator (records from the simulation) always agree on the definitions.
//
// # Time
//
// A report covers the half-open interval [Window.From, end) where
// end = min(Window.To, Now): nothing after Now has been observed. A timestamped
// event (submit, start, cancellation, release) belongs to the window when it
// falls in that interval. An interval (run, wait, wait event) without an end
// runs to end.
//
// # Waits
//
// A job's waits are derived from the job and its runs, not from wait events:
//
//   - the initial wait runs from SubmitTime to FirstStart; a job that never
//     started waits until End (cancelled or otherwise removed) or is still waiting;
//   - a requeue wait runs from the End of one run to the Start of the next run;
//     after the last run the job waits again when it has no End (requeued, not yet
//     restarted), or until End when End is later than that run's End.
//
// Runs must therefore hold every run of every job given, not only those that
// overlap the window, and FirstStart must equal the earliest run's Start.
//
// # Metrics per group
//
//   - jobs: jobs submitted before end and not ended before Window.From.
//   - submitted: jobs whose SubmitTime is in the window; cancelled: cancelled
//     jobs whose End is in the window.
//   - started, wait_p50_s … wait_max_s: initial waits that ended with a start in
//     the window (Kueue's admission wait time is likewise observed at admission).
//     requeue_starts and requeue_wait_* are the same for requeue waits.
//   - Percentiles are nearest-rank (see NearestRank).
//   - longest_wait_s: the longest wait that overlaps the window, measured from its
//     start (which may be before the window) to its end or, for a wait still open
//     at the end of the window, to end. Waits are never measured past end.
//   - still_waiting: jobs with a wait open at end.
//   - jobs_over_objective: jobs with a wait overlapping the window that, measured
//     as for longest_wait_s, is longer than their queue's MaxWait (queues with a
//     zero MaxWait have no objective).
//   - cancellation_rate: cancelled_while_waiting / waits_ended, where
//     waits_ended counts waits that ended in the window with a start or a
//     cancellation and cancelled_while_waiting those that ended with a
//     cancellation (the abandonment rate of queueing theory: abandoned /
//     (abandoned + served)). Waits still open are not in the denominator because
//     their outcome is unknown.
//   - gpu_seconds: Σ run length clipped to the window × GPUMilli / 1000.
//     service_share: gpu_seconds / gpu_seconds of the whole report, or of the
//     group's pool when the report is grouped by pool (service shares are per
//     pool). target_share: the queue's ServiceShare / Σ ServiceShare of all
//     targets (Slurm's normalised shares), reported when the report is grouped
//     by queue. share_vs_target: the whole queue's delivered share in the same
//     scope (its GPU-seconds over the same denominator) / target_share; it
//     equals service_share / target_share unless job_type or project splits
//     the queue into several rows, which then all show the queue's comparison.
//   - pool_share (grouped by queue): the whole queue's gpu_seconds in the
//     group's scope (its pool when grouped by pool, else every pool of
//     Input.Capacity) over the scope's usable GPUs (Input.Capacity: healthy
//     GPUs on schedulable nodes, taken as constant over the window) × the
//     seconds from Window.From to end: the time-averaged share of the
//     pools' GPUs the queue held, to compare with min_share and max_share
//     (the queue's QueueTarget.MinShare and MaxShare, reported when set).
//     A pool without capacity gives no pool_share. Compute and Assemble
//     derive it from the finished groups alike.
//   - project_share and project_target_share (grouped by project): the
//     whole project's gpu_seconds over the report's (fair share counts
//     usage across pools), and its fair-share entitlement: its weight in
//     Input.ProjectWeights (1 when not listed) over the weights of the
//     projects with a group in the report (the policy's normalisation,
//     policy.ApplyProjectWeights, over the projects present).
//   - wait_reason_seconds: wait-event intervals clipped to the window, summed per
//     reason (an event still open runs to end).
//
// # Reason shares
//
// Report.ReasonShares gives, per pool whatever the grouping, the time
// waited in each reason — the same wait events clipped to the window as
// wait_reason_seconds, an event still open at the report end counting up to
// it — in job-seconds (each waiting job weighs 1) and in GPU-seconds (each
// weighs its request's demand, Request.DemandMilli / 1000: two GPUs weigh
// 2, a 500 milli-GPU share 0.5). Reasons add up by their reason group
// (vocab.ReasonInfo.Group): capacity (capacity_busy,
// preemption_in_progress), fragmentation and spec (fragmented,
// no_matching_capacity), queue order (reserved_for_higher_priority), quota
// (quota_exhausted), environment and operator (environment_not_ready, held,
// pool_unavailable). The shares of these five groups and of their reasons
// are of the pool's time in them, so they add up to 1 when the pool waited.
// not_yet_evaluated — from a submit or requeue to the first cycle that
// evaluates the job — is the service's own latency, not a problem of the
// pool: it is reported apart (the service-latency group, its shares of
// all the pool's waiting, itself included) and is in no other share.
//
// The verdict names the pool's main problem: the group with the most
// GPU-seconds, with its share and its reasons' shares. GPU-seconds weigh
// what the waiting costs (a 4-GPU job waiting an hour holds up four times
// a 1-GPU job's GPU-hour); when no waiting job requested a GPU the verdict
// weighs job-seconds instead and says so. Sums are exact (integer
// nanoseconds), so a tie is an exact equality: every group tied at the top
// is named, in the order above, each with the common share. A pool with a
// job counted in the window (as jobs) that waited in none of the five
// groups reads "no waiting in window" (noting any service latency); a pool
// with neither jobs nor waiting is not listed. A wait event whose reason
// the catalogue lacks is an error: its time would belong to no group.
//
// # Starvation signals
//
// Signals are evaluated on each wait of a job that requests GPUs, over the part
// [lo, hi) of the wait inside the window, strictly after the instant the wait
// began (when a job is requeued its own GPUs are released and its preemptor
// starts at that instant). A job carries a signal when the largest count over
// its waits reaches the threshold in Options. Only waits that have lasted
// at least the starvation floor, max(the queue's MaxWait,
// Options.StarvationMinWaitS), measured as for longest_wait_s, are counted:
// a shorter wait carries no signal however many events fall in it (the
// reasons are on Options.StarvationMinWaitS).
//
//   - overtaken: run starts in [lo, hi) of other GPU jobs of the same pool that
//     were submitted after this job's SubmitTime and fit the same GPUs: their allowed
//     models are the same as or a subset of this job's (an empty set means any
//     model) and their demand in milli-GPU (GPUs × milli per GPU) is at most this
//     job's. A start at hi is not counted: both started in the same cycle.
//     The overtaking job's tier is not looked at (the definition does not);
//     higher_tier_arrivals shows the pressure of higher tiers on its own.
//   - releases: Release events in [lo, hi) in the job's pool that freed a GPU of
//     a model the job accepts (a release without models matches every job).
//     The freed amount is not compared with the request: fragments add up.
//   - higher_tier_arrivals: jobs of a higher tier submitted to the same pool in
//     [lo, hi).
//
// A job whose last wait is open at the report end while the reason of its
// latest wait event earns no aging (held, environment_not_ready,
// pool_unavailable, no_matching_capacity: vocab.ReasonInfo.EarnsAging) is
// stuck, needing action: waiting will not end its wait, so it carries no
// starvation signal; each group counts its stuck jobs and Report.Stuck lists
// them (the same order and limit as the starving jobs) with the owner (the
// project), the reason and its next action.
//
// Every group counts its starving jobs exactly; Report.Starving lists the
// first Options.StarvingLimit of them (longest wait first, then job ID), each
// with its signals, its largest counts, its longest wait in the window and the
// reason of its latest wait event.
//
// # Cost
//
// For J jobs, R runs, E wait events and W waits, Compute is linear in J, R and
// E apart from sorting the run starts of each pool (a radix sort) and, per
// pool, one sweep over its run starts for each distinct (models, demand)
// request shape of its waiting jobs. Runs and wait events that come grouped
// by job and in the order of Jobs (as a loader ordering both by job gives
// them) are matched to their job without building an ID map.
//
// # Summaries
//
// Summarize computes a Summary of one segment of a window: what the report
// needs from it in a form that adds up (counts, wait samples, GPU-seconds
// and seconds per reason clipped to it, the jobs alive at its start, the
// waits open at its end) plus, one by one, the waits that can be over an
// objective or carry a signal (open, or at least as long as its MinWait)
// with their starvation counts inside it. Merge joins consecutive summaries
// and Assemble turns summaries covering a window into the report, equal to
// Compute's on the same records (TestAssembleEqualsCompute checks this on
// random records, windows and cuts). The store keeps summaries of past hours
// and days so that a month's report reads a few dozen summaries instead of
// millions of records.
//
// # Shared fixture
//
// testdata/fixture.json holds a small hand-computed case: {"input": Input,
// "options": Options, "expected": Report}. Decoding it with encoding/json into
// those three types and calling Compute must give the expected report (floats
// equal within 1e-9). The PostgreSQL-backed report endpoint test loads the same
// file, stores the input, and checks its answer against the same expectation.
package queuereport
