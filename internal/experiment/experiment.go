// Package experiment is the pure core of gpugov's policy experiments
// (docs/design.md §4, "Experiments"): the experiment spec and its
// validation, the metric catalogue, measuring a window of records on the
// queue report's definitions plus the governance metrics, checking the
// rollback conditions, and the verdict with its comparison table. The live
// ExperimentWorkflow (through its activities) and `gpugov simulate --vs`
// call the same functions, so a what-if and a live experiment are judged
// alike. It imports neither Temporal nor pgx.
//
// The types and signatures of this file are the contract between the
// experiment's work streams (the live workflow, the API and CLI, the
// what-if); the implementations are in the package's other files.
package experiment

import (
	"io"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Spec is one experiment as submitted: the body of POST /v1/experiments and
// the content of `gpugov experiment create -f experiment.yaml` (YAML with the
// same field names; the CLI turns `candidate.file` into `candidate.policy`).
type Spec struct {
	Name       string    `json:"name"`
	Hypothesis string    `json:"hypothesis"`
	Candidate  Candidate `json:"candidate"`
	Scope      Scope     `json:"scope"`
	// Start is when the candidate is switched in; nil means now.
	Start *time.Time `json:"start,omitempty"`
	// WindowSeconds is the observation window, in seconds; at least one
	// scheduling cycle interval.
	WindowSeconds float64 `json:"window_s"`
	// Baseline is the window the baseline is measured over; zero means an
	// equally long window ending at Start.
	Baseline BaselineWindow `json:"baseline"`
	// CheckIntervalSeconds is how often the rollback conditions are
	// evaluated during the window, in seconds; 0 means DefaultChecks per
	// window (at least one cycle interval apart).
	CheckIntervalSeconds float64     `json:"check_interval_s,omitempty"`
	Expected             Expectation `json:"expected"`
	Rollback             []Condition `json:"rollback"`
	// MinSample is the fewest jobs the expected result's group must have in
	// each window (baseline and candidate) for a verdict other than
	// inconclusive; 0 means DefaultMinSample.
	MinSample int `json:"min_sample,omitempty"`
	// Override, when set, lets a candidate differ from the baseline in more
	// than one variable group (admin only; audited with its reason).
	Override *Override `json:"override,omitempty"`
}

// DefaultChecks is how many times the rollback conditions are checked per
// window when Spec.CheckIntervalSeconds is 0.
const DefaultChecks = 12

// DefaultMinSample is the minimum sample when Spec.MinSample is 0.
const DefaultMinSample = 5

// Candidate is the policy tried: a stored version's hash, or the text of a
// gpugov.policy/v1 file (stored as a version when the experiment is created).
// Exactly one is set.
type Candidate struct {
	Hash   string `json:"hash,omitempty"`
	Policy string `json:"policy,omitempty"`
	// File is the path of a policy file, in a spec file only: ParseSpecFile
	// reads it (relative to the spec file's folder) into Policy and clears
	// it. Validate refuses a spec that still has it (the server cannot read
	// the submitter's files).
	File string `json:"file,omitempty"`
}

// Scope is where the experiment applies: the pools whose jobs are measured
// (and which no other experiment may hold meanwhile) and the queues whose
// metrics are watched (empty: every queue).
type Scope struct {
	Pools  []string `json:"pools"`
	Queues []string `json:"queues,omitempty"`
}

// BaselineWindow is a stated past window for the baseline; both nil means
// the default (an equally long window right before the start).
type BaselineWindow struct {
	From *time.Time `json:"from,omitempty"`
	To   *time.Time `json:"to,omitempty"`
}

// Target names the group a metric is read on: a tier, a queue, or (neither)
// the scope's total. Governance metrics are read on the total only.
type Target struct {
	Tier  string `json:"tier,omitempty"`
	Queue string `json:"queue,omitempty"`
}

// Direction is which way an expected result moves a metric.
type Direction string

// The directions.
const (
	Decrease Direction = "decrease"
	Increase Direction = "increase"
)

// Expectation is the expected result: Metric on Target moves in Direction by
// at least Change (a fraction of the baseline: 0.30 = 30 %).
type Expectation struct {
	Metric    string    `json:"metric"`
	Target              // tier / queue, inline
	Direction Direction `json:"direction"`
	Change    float64   `json:"change"`
}

// Condition is one rollback condition, a predicate over a metric of the
// window so far: breached when the value is above Above, below Below, above
// AboveBaselineFactor × the baseline's value, or below BelowBaselineFactor ×
// the baseline's value (exactly one of the four is set). A metric with no
// value (no job measured) breaches nothing.
type Condition struct {
	Name                string   `json:"name,omitempty"` // a label for the timeline; default: a rendering of the predicate
	Metric              string   `json:"metric"`
	Target                       // tier / queue, inline
	Above               *float64 `json:"above,omitempty"`
	Below               *float64 `json:"below,omitempty"`
	AboveBaselineFactor *float64 `json:"above_baseline_factor,omitempty"`
	BelowBaselineFactor *float64 `json:"below_baseline_factor,omitempty"`
}

// Override is an admin's reason to accept a candidate that changes more than
// one variable group.
type Override struct {
	Reason string `json:"reason"`
}

// FieldError is one problem with a spec: the field (JSON path, e.g.
// `rollback[1].metric`) and what is wrong. The API answers 400 naming it.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// Validate checks a spec on its own (names, metrics, targets, windows, one
// predicate per condition): cycleInterval is the scheduler's cycle interval,
// the shortest window allowed. It does not load the candidate (the caller
// does, and reports `candidate` on failure). It returns every problem, in
// field order; nil means valid. A cycleInterval of 0 or less checks
// everything but the minimum window and check interval (what ParseSpec
// does, not knowing the service's cycle).
func (s *Spec) Validate(cycleInterval time.Duration) []FieldError {
	return s.validate(cycleInterval, false)
}

// CheckOneVariable returns the variable groups in which candidate differs
// from baseline (policy.Diff) and, when there are more than one and the spec
// has no Override, a FieldError on `candidate` listing them. A candidate
// that differs in no group (the baseline itself) is a FieldError on
// `candidate` too, override or not: it tries nothing.
func CheckOneVariable(s *Spec, baseline, candidate *policy.Policy) ([]vocab.PolicyGroup, *FieldError) {
	groups := policy.Groups(policy.Diff(baseline, candidate))
	return groups, oneVariable(s, groups)
}

// MetricInfo describes one metric an experiment can name.
type MetricInfo struct {
	Name        string `json:"name"`
	Unit        string `json:"unit"`       // "s", "jobs", "ratio", "GPU-s", "count"
	Governance  bool   `json:"governance"` // read on the scope's total only
	Description string `json:"description"`
}

// Metrics lists every metric: the queue report's group metrics (the names
// `report --compare` prints: wait_p95_s, longest_wait_s, starving_jobs, …)
// then the governance metrics (preemptions, effective_run_loss_gpu_s,
// recompute_gpu_s, resume_success_rate, reclaims, false_reclaims,
// start_success_rate, gpu_release_time_s, cancel_rate,
// service_share_delivered). The slice is the caller's.
func Metrics() []MetricInfo { return slices.Clone(catalogue) }

// Governance is what the governance actions cost and delivered in a window,
// over the scope's pools. A nil rate or time means nothing was measured
// (no resume, no start …), never zero.
type Governance struct {
	Preemptions                int      `json:"preemptions"`              // preemptions started in the window
	EffectiveRunLossGPUSeconds float64  `json:"effective_run_loss_gpu_s"` // accounting.EffectiveRunLoss summed, GPU-s
	RecomputeGPUSeconds        float64  `json:"recompute_gpu_s"`          // the recompute part of that loss, GPU-s
	ResumesVerified            int      `json:"resumes_verified"`         // victims whose next run resumed correctly
	ResumesFailed              int      `json:"resumes_failed"`           // victims whose resume failed or downgraded
	ResumeSuccessRate          *float64 `json:"resume_success_rate"`      // verified ÷ (verified + failed)
	Reclaims                   int      `json:"reclaims"`                 // allocations released by reclaim
	FalseReclaims              int      `json:"false_reclaims"`           // reclaims found wrong (disputed/confirmed false)
	Starts                     int      `json:"starts"`                   // runs started in the window
	StartFailures              int      `json:"start_failures"`           // runs that failed before reaching running
	StartSuccessRate           *float64 `json:"start_success_rate"`       // 1 − failures ÷ (starts + failures)
	GPUReleaseTimeSeconds      *float64 `json:"gpu_release_time_s"`       // median seconds from a preemption's notice to its GPUs released
	CancelRate                 *float64 `json:"cancel_rate"`              // jobs cancelled ÷ jobs submitted in the window
	ServiceShareDelivered      *float64 `json:"service_share_delivered"`  // GPU-s delivered to the watched queues ÷ all GPU-s delivered in the scope
	Measured                   []string `json:"measured,omitempty"`       // which of the above the source measures; simulate leaves out what it does not model
}

// Measurement is one window measured on the queue report's definitions
// (queuereport.Compute over the scope's records) plus the governance metrics.
type Measurement struct {
	Window     queuereport.Window  `json:"window"`
	Total      queuereport.Group   `json:"total"`
	ByTier     []queuereport.Group `json:"by_tier"`
	ByQueue    []queuereport.Group `json:"by_queue"`
	Governance Governance          `json:"governance"`
}

// Measure computes a Measurement from in (the records of at least w, as the
// store's LoadReportInput or the simulator's History.Records give them),
// keeping only jobs of scope.Pools (all when empty) and, for the queue
// metrics, of scope.Queues; now is the instant the records were read. The
// same call serves live and simulated experiments. The reports use the
// options `gpugov report` uses (ReportOptions). Total is every job of the
// scope's pools; ByQueue holds the watched queues' groups and ByTier the
// groups of the tiers their jobs have (every queue and tier when
// scope.Queues is empty), each computed over the whole scope so that shares
// are of the scope's GPU-seconds. gov is copied as given. Errors: those of
// queuereport.Compute (a bad window, now before it, records that
// contradict each other), wrapped.
func Measure(in queuereport.Input, scope Scope, w queuereport.Window, now time.Time, gov Governance) (Measurement, error) {
	return measure(in, scope, w, now, gov)
}

// Value reads metric on t: its value (nil when undefined) and the group's
// job count (the sample). Errors: an unknown metric, or a governance metric
// asked on a tier or queue, a target with both a tier and a queue. A group
// the measurement lacks (no job of it in the window) reads nil with a
// sample of 0; a governance metric reads the total's job count as its
// sample, and nil when Governance.Measured is non-empty and leaves it out.
func (m *Measurement) Value(metric string, t Target) (*float64, int, error) {
	return m.value(metric, t)
}

// ConditionResult is one rollback condition checked: the value now, the
// baseline's value, the threshold it was compared with, and whether it was
// breached, with a sentence giving the numbers ("production wait_p95_s
// 412 s > 1.2 × baseline 300 s = 360 s").
type ConditionResult struct {
	Condition Condition `json:"condition"`
	Value     *float64  `json:"value"`
	Baseline  *float64  `json:"baseline"`
	Threshold *float64  `json:"threshold"`
	Breached  bool      `json:"breached"`
	Text      string    `json:"text"`
}

// Check evaluates every rollback condition of s on current against
// baseline, in the spec's order. Each result's Condition has its Name set
// (the predicate's rendering, Condition.Label, when the spec gave none). A
// value, or for a factor the baseline's value, that is nil breaches
// nothing; baseline may be nil (then no factor can breach).
func Check(s *Spec, baseline, current *Measurement) []ConditionResult {
	return check(s, baseline, current)
}

// Row is one line of the comparison table: a metric on a target before
// (baseline) and after (candidate), with after − before and after ÷ before.
type Row struct {
	Metric string   `json:"metric"`
	Target          // inline
	Before *float64 `json:"before"`
	After  *float64 `json:"after"`
	Delta  *float64 `json:"delta"`
	Ratio  *float64 `json:"ratio"`
}

// ExpectedResult is the expected result measured.
type ExpectedResult struct {
	Expectation
	Before       *float64 `json:"before"`
	After        *float64 `json:"after"`
	Change       *float64 `json:"observed_change"` // (after − before) ÷ before, signed
	Met          bool     `json:"met"`
	SampleBefore int      `json:"sample_before"`
	SampleAfter  int      `json:"sample_after"`
}

// Outcome is an experiment's verdict with its evidence.
type Outcome struct {
	Verdict  vocab.ExperimentVerdict `json:"verdict"`
	Reason   string                  `json:"reason"` // one sentence with the numbers
	Expected ExpectedResult          `json:"expected"`
	Breaches []ConditionResult       `json:"breaches"` // the breached conditions (rolled back), else empty
	Checks   []ConditionResult       `json:"checks"`   // every condition on the full window
	Rows     []Row                   `json:"rows"`     // the comparison: total, each watched tier and queue, governance
}

// Decide gives the verdict of an experiment whose window is over (or that
// was rolled back: breaches non-empty): rolled_back when breaches is not
// empty; else inconclusive when the expected result's group has fewer than
// MinSample jobs in either window; else kept when the expected result is
// met, not_met otherwise.
//
// A condition breached on the full window (Outcome.Checks, Check of
// candidate against baseline) is a breach too: the verdict is then
// rolled_back and Breaches lists it after the given ones, so a verdict never
// says kept next to a breached check (the caller restores the baseline for
// every verdict but kept). The expected result is inconclusive as well when
// its value is undefined in either window (no sample of it, e.g. no job
// started). From a baseline value of 0 (no relative change) an increase
// is met by any positive value and a decrease never.
func Decide(s *Spec, baseline, candidate *Measurement, breaches []ConditionResult) Outcome {
	return decide(s, baseline, candidate, breaches)
}

// WriteText writes the outcome as the CLI prints it: the verdict and its
// reason, the expected result, the checks, and the comparison table (with
// each metric's unit; "-" where a value is undefined). The output depends
// on the outcome only.
func (o *Outcome) WriteText(w io.Writer) error { return o.writeText(w) }
