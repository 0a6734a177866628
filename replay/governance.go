package replay

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// preemptionReadLimit bounds the preemption records the final read asks for.
const preemptionReadLimit = 1000

// Governance is what the service's governance did to the replayed jobs, read
// from its own records at the end of the replay: the pool's automation
// stage, the aging credits of the jobs' last evaluations, the waits behind
// reservations, and the preemption records of the replayed jobs.
type Governance struct {
	Pool  string `json:"pool"`
	Stage string `json:"stage"` // the pool's automation stage (GET /v1/inventory)
	// Aging counts, per tier, the jobs whose last evaluation (the
	// explanation GET /v1/jobs returns: a started job's is the cycle that
	// placed it) carried an aging credit, with the largest credit in points.
	Aging []AgingRow `json:"aging"`
	// Reservations: the replayed jobs that waited with
	// reserved_for_higher_priority (matching GPUs free but held for a
	// higher-ranked blocked job), their seconds, and the holders named by
	// those waits (blocking_job_id), most-waited-behind first.
	ReservedJobs     int              `json:"reserved_jobs"`
	ReservedSeconds  float64          `json:"reserved_s"`
	ReservationHolds []ReservationRow `json:"reservation_holders"`
	// Preemptions are the preemption records (GET /v1/preemptions) whose
	// trigger or victim is a replayed job, oldest first.
	Preemptions []api.Preemption `json:"preemptions"`
}

// AgingRow is one tier's aging credits at the jobs' last evaluations.
type AgingRow struct {
	Tier        string  `json:"tier"`
	Jobs        int     `json:"jobs"`        // replayed jobs of the tier with an explanation
	WithCredit  int     `json:"with_credit"` // of those, with aging_credit > 0
	Capped      int     `json:"capped"`      // of those, at their aging bound
	MaxPoints   float64 `json:"max_points"`
	MaxPointsOf string  `json:"max_points_of,omitempty"` // the pod with the largest credit
}

// ReservationRow is one reservation holder: the job the waits named and the
// seconds other replayed jobs waited behind it.
type ReservationRow struct {
	JobID   string  `json:"job_id"`
	Pod     string  `json:"pod,omitempty"` // when the holder is a replayed job
	Tier    string  `json:"tier,omitempty"`
	GPUs    int     `json:"gpus,omitempty"`
	Waiters int     `json:"waiters"`
	Seconds float64 `json:"seconds"`
}

// readPreemptions returns the preemption records (GET /v1/preemptions) whose
// trigger or victim is one of recs, oldest first. It does not filter by
// pool: a record whose victim ended before the notice names none.
func readPreemptions(ctx context.Context, c *apiclient.Client, recs []*jobRecord) ([]api.Preemption, error) {
	ours := make(map[string]bool, len(recs))
	for _, rec := range recs {
		ours[rec.job.ID] = true
	}
	list, err := c.Preemptions(ctx, apiclient.PreemptionOptions{Kind: "preemption", Limit: preemptionReadLimit})
	if err != nil {
		return nil, fmt.Errorf("read the preemptions: %w", err)
	}
	var out []api.Preemption
	for _, p := range list.Preemptions {
		if ours[p.ForJobID] || ours[p.VictimJobID] {
			out = append(out, p)
		}
	}
	slices.Reverse(out) // the API lists newest first
	return out, nil
}

// buildGovernance builds the Governance of the replayed jobs from their
// records, the inventory and their preemption records (readPreemptions).
func buildGovernance(recs []*jobRecord, inv *api.Inventory, pool string, preemptions []api.Preemption) *Governance {
	g := &Governance{Pool: pool, Preemptions: preemptions}
	for _, p := range inv.Pools {
		if p.Name == pool {
			g.Stage = p.Stage
		}
	}
	byID := make(map[string]*jobRecord, len(recs))
	aging := map[string]*AgingRow{}
	holders := map[string]*ReservationRow{}
	for _, rec := range recs {
		byID[rec.job.ID] = rec
		if e := rec.job.Explanation; e != nil {
			row := aging[rec.job.Tier]
			if row == nil {
				row = &AgingRow{Tier: rec.job.Tier}
				aging[rec.job.Tier] = row
			}
			row.Jobs++
			if credit := e.Priority.AgingCredit; credit > 0 {
				row.WithCredit++
				if e.Priority.AgingCapped {
					row.Capped++
				}
				if credit > row.MaxPoints {
					row.MaxPoints, row.MaxPointsOf = credit, rec.tj.sub.Key
				}
			}
		}
		reserved := false
		behind := map[string]bool{} // holders this job waited behind
		for _, ev := range rec.events {
			if vocab.WaitReason(ev.Reason) != vocab.ReasonReservedForHigherPriority {
				continue
			}
			reserved = true
			g.ReservedSeconds += ev.DurationSeconds
			if ev.BlockingJobID == "" {
				continue
			}
			h := holders[ev.BlockingJobID]
			if h == nil {
				h = &ReservationRow{JobID: ev.BlockingJobID}
				holders[ev.BlockingJobID] = h
			}
			h.Seconds += ev.DurationSeconds
			if !behind[h.JobID] {
				behind[h.JobID] = true
				h.Waiters++
			}
		}
		if reserved {
			g.ReservedJobs++
		}
	}
	for _, t := range vocab.Tiers {
		if row := aging[t.String()]; row != nil {
			g.Aging = append(g.Aging, *row)
		}
	}
	for _, h := range holders {
		if rec := byID[h.JobID]; rec != nil {
			h.Pod, h.Tier, h.GPUs = rec.tj.sub.Key, rec.job.Tier, rec.job.Resources.GPUs
		}
		g.ReservationHolds = append(g.ReservationHolds, *h)
	}
	sort.Slice(g.ReservationHolds, func(i, j int) bool {
		a, b := g.ReservationHolds[i], g.ReservationHolds[j]
		return a.Seconds > b.Seconds || (a.Seconds == b.Seconds && a.JobID < b.JobID)
	})
	return g
}

// podOf names a job by its pod when it is a replayed one.
func (res *Result) podOf(jobID string) string {
	for pod, id := range res.JobIDs {
		if id == jobID {
			return pod
		}
	}
	return jobID
}

// renderGovernance writes the governance section: aging, reservations,
// preemptions with their effective run loss and the Temporal UI queries of
// their workflows, and the starvation signals of the report (or why none
// fired). temporalUI is the UI's base URL ("" leaves the links out).
func (res *Result) renderGovernance(ew *errWriter, temporalUI string) {
	g := res.Governance
	if g == nil {
		return
	}
	ew.printf("\nGovernance at work (from the service's records: job explanations, wait events, preemption records)\n")
	ew.printf("  pool %s, automation stage %s\n", g.Pool, g.Stage)

	ew.printf("\n  Aging credits at each job's last evaluation (points; the queue's tier base + credit + fair share rank it):\n")
	if len(g.Aging) == 0 {
		ew.printf("    (no job was evaluated)\n")
	}
	for _, a := range g.Aging {
		line := fmt.Sprintf("    %-12s %d of %d jobs carried a credit", a.Tier, a.WithCredit, a.Jobs)
		if a.WithCredit > 0 {
			line += fmt.Sprintf(", up to %g points (%s), %d at their bound", a.MaxPoints, a.MaxPointsOf, a.Capped)
		}
		ew.printf("%s\n", line)
	}

	ew.printf("\n  Reservations: ")
	if g.ReservedJobs == 0 {
		ew.printf("no replayed job waited with reserved_for_higher_priority (GPUs free but held for a higher-ranked blocked job)\n")
	} else {
		ew.printf("%s waited %s in all with reserved_for_higher_priority; GPUs were held for:\n",
			plural.Count(g.ReservedJobs, "job", "jobs"), formatSeconds(g.ReservedSeconds))
		for i, h := range g.ReservationHolds {
			if i == 5 {
				ew.printf("    … and %s more\n", plural.Count(len(g.ReservationHolds)-5, "holder", "holders"))
				break
			}
			ew.printf("    %s (%s, %s, job %s): %s waited %s behind it\n", h.Pod, h.Tier, plural.Count(h.GPUs, "GPU", "GPUs"), h.JobID,
				plural.Count(h.Waiters, "job", "jobs"), formatSeconds(h.Seconds))
		}
	}

	res.renderPreemptions(ew, temporalUI)
	res.renderStarvation(ew)
}

// renderPreemptions writes the preemption records and where to find their
// workflows in the Temporal UI.
func (res *Result) renderPreemptions(ew *errWriter, temporalUI string) {
	g := res.Governance
	outcomes := map[string]int{}
	var lossGPUs float64
	for _, p := range g.Preemptions {
		outcomes[cmp.Or(p.Outcome, p.State)]++
		if p.EffectiveLossGPUSeconds != nil {
			lossGPUs += *p.EffectiveLossGPUSeconds
		}
	}
	ew.printf("\n  Preemptions: %s of replayed jobs", plural.Count(len(g.Preemptions), "preemption", "preemptions"))
	if len(g.Preemptions) == 0 {
		switch g.Stage {
		case string(vocab.StageObserve):
			ew.printf(" (the pool's stage is observe: decisions are recorded, no job is touched)\n")
		default:
			ew.printf(" (no blocked job found a checkpointable victim the policy allows)\n")
		}
		return
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(outcomes)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, outcomes[k]))
	}
	ew.printf(" (%s); effective run loss %.1f GPU-s in all (lost work since the last checkpoint + save/restore + recompute, × GPUs)\n",
		strings.Join(parts, ", "), lossGPUs)
	for i, p := range g.Preemptions {
		if i == 8 {
			ew.printf("    … and %d more (gpugov preemptions)\n", len(g.Preemptions)-8)
			break
		}
		ew.printf("    %s  %s (%s) for %s (%s), %s: %s\n", p.ID, res.podOf(p.VictimJobID), p.VictimQueue,
			res.podOf(p.ForJobID), p.ForQueue, gpuWords(p.GPUs), cmp.Or(p.Outcome, p.State))
		loss := "effective loss not measured yet"
		if why := p.NoLossReason(); why != "" {
			loss = "no loss: " + why
		} else if p.EffectiveLossGPUSeconds != nil {
			loss = fmt.Sprintf("effective loss %.1f GPU-s = lost %s + save/restore %s + recompute %s", *p.EffectiveLossGPUSeconds,
				optSecs(p.LostSeconds), optSecs(p.SaveRestoreSeconds), optSecs(p.RecomputeSeconds))
		}
		ckpt := "no checkpoint saved in the grace"
		if p.SavedCheckpoint != nil {
			ckpt = fmt.Sprintf("checkpoint saved at step %d", p.SavedCheckpoint.Step)
		}
		resume := "resume not verified"
		if p.ResumeVerified != nil && *p.ResumeVerified {
			resume = "resume verified"
			if p.ResumedFromStep != nil {
				resume = fmt.Sprintf("resumed from step %d, verified", *p.ResumedFromStep)
			}
		}
		ew.printf("      %s; %s; %s; workflow %s\n", ckpt, resume, loss, p.WorkflowID)
	}
	if temporalUI != "" {
		base := strings.TrimRight(temporalUI, "/") + "/namespaces/default/workflows?query="
		ew.printf("  Temporal UI: every preemption workflow: %s%s\n", base, url.QueryEscape(`WorkflowType="PreemptionWorkflow"`))
		ew.printf("    the first one (its history shows notify, checkpoint, release, reschedule, verify-resume): %s%s\n", base,
			url.QueryEscape(fmt.Sprintf(`WorkflowId="%s"`, g.Preemptions[0].WorkflowID)))
	}
}

// renderStarvation writes the report's starvation signals over the replayed
// jobs, or why none fired.
func (res *Result) renderStarvation(ew *errWriter) {
	t, o := res.Report.Total, res.Report.Options
	ew.printf("\n  Starvation (internal/queuereport over the replayed jobs; a wait counts once it lasts max(its queue's max_wait_s, %s)):\n",
		formatSeconds(o.StarvationMinWaitS))
	ew.printf("    %s waited past their queue's objective; %d starving: %d overtaken (≥ %d later jobs that fit the same GPUs started), "+
		"%d release-starved (≥ %d releases of matching GPUs), %d tier-starved (≥ %d higher-tier arrivals); %d stuck needing action\n",
		plural.Count(t.JobsOverObjective, "job", "jobs"), t.StarvingJobs, t.OvertakenJobs, o.OvertakenThreshold, t.ReleaseStarvedJobs, o.StarvationReleases,
		t.TierStarvedJobs, o.TierArrivalThreshold, t.StuckJobs)
	if t.StarvingJobs == 0 {
		longest := "no job waited"
		if t.LongestWaitS != nil {
			longest = fmt.Sprintf("the longest wait was %s (%s)", formatSeconds(*t.LongestWaitS), res.podOf(t.LongestWaitJobID))
		}
		ew.printf("    no starvation signal: %s, and no wait that lasted past its floor saw a signal's threshold reached\n", longest)
	}
	for i, s := range res.Report.Starving {
		if i == 5 {
			ew.printf("    … and %d more\n", t.StarvingJobs-5)
			break
		}
		state := "started"
		if s.WaitOngoing {
			state = "still waiting"
		}
		ew.printf("    %s (%s) waited %s, %s, last reason %s; signals %s (overtaken %d, releases %d, higher-tier arrivals %d)\n",
			res.podOf(s.JobID), s.Tier, formatSeconds(s.WaitS), state, s.LastReason, strings.Join(s.Signals, ", "),
			s.Overtaken, s.Releases, s.HigherTierArrivals)
	}
}

func optSecs(v *float64) string {
	if v == nil {
		return "-"
	}
	return formatSeconds(*v)
}

// starvingOptions is the report options of a replay at speed: the starvation
// floor is queuereport's default divided by the speed, like every wait of
// the replay (real seconds of compressed trace time).
func starvingOptions(o queuereport.Options, speed float64) queuereport.Options {
	o.StarvationMinWaitS = queuereport.DefaultStarvationMinWait.Seconds() / speed
	return o
}

// gpuWords is a number of GPUs, whole or not, with its noun: "1 GPU",
// "0.5 GPU", "2 GPUs".
func gpuWords(g float64) string {
	if g == 1 || (g > 0 && g < 1) {
		return fmt.Sprintf("%g GPU", g)
	}
	return fmt.Sprintf("%g GPUs", g)
}
