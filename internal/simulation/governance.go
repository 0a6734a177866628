package simulation

import (
	"slices"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/queuereport"
)

// GovernanceMeasured lists the experiment.Governance fields (by their JSON
// names, the experiment metric names) a simulation measures: what the
// simulator models. It leaves out what it does not: resumes (every
// simulated resume starts from its checkpoint, by construction), reclaims
// (no utilisation is simulated), start failures (every placement starts)
// and the GPU release time (a simulated preemption releases at its notice).
var GovernanceMeasured = []string{
	"preemptions", "effective_run_loss_gpu_s", "recompute_gpu_s", "cancel_rate", "service_share_delivered",
}

// Governance returns the governance metrics of the run over w for scope,
// with the store's definitions (store.GovernanceMetrics) applied to the
// simulation's own records:
//
//   - Preemptions, EffectiveRunLossGPUSeconds and RecomputeGPUSeconds are the
//     report's totals (Preemptions): every preemption of the run, so w must
//     cover the whole run (History.Window does).
//   - CancelRate: of the jobs of scope.Pools submitted in w, those cancelled
//     (pods the trace never scheduled, deleted by their owner) before w.To ÷
//     all of them; nil when none was submitted.
//   - ServiceShareDelivered: GPU-seconds of the runs of scope.Queues' jobs
//     (every queue when empty) clipped to w ÷ those of every run of the
//     scope's pools; nil when none was delivered.
//
// Measured is GovernanceMeasured; the fields it leaves out stay zero or nil.
func (r *Report) Governance(w queuereport.Window, scope experiment.Scope) experiment.Governance {
	g := experiment.Governance{
		Preemptions:                r.Preemptions.Count,
		EffectiveRunLossGPUSeconds: r.Preemptions.LossGPUSeconds,
		RecomputeGPUSeconds:        r.Preemptions.RecomputeGPUSeconds,
		Measured:                   slices.Clone(GovernanceMeasured),
	}
	if r.History == nil {
		return g
	}
	in := &r.History.Records
	inPools := func(pool string) bool { return len(scope.Pools) == 0 || slices.Contains(scope.Pools, pool) }
	watched := func(queue string) bool { return len(scope.Queues) == 0 || slices.Contains(scope.Queues, queue) }
	queueOf := make(map[string]string, len(in.Jobs))
	var submitted, cancelled int
	for _, j := range in.Jobs {
		if !inPools(j.Pool) {
			continue
		}
		queueOf[j.ID] = j.Queue
		if j.SubmitTime.Before(w.From) || !j.SubmitTime.Before(w.To) {
			continue
		}
		submitted++
		if j.Cancelled && j.End != nil && j.End.Before(w.To) {
			cancelled++
		}
	}
	if submitted > 0 {
		v := float64(cancelled) / float64(submitted)
		g.CancelRate = &v
	}
	var all, mine float64
	for _, run := range in.Runs {
		q, ok := queueOf[run.JobID]
		if !ok {
			continue
		}
		end := w.To
		if run.End != nil && run.End.Before(end) {
			end = *run.End
		}
		start := run.Start
		if start.Before(w.From) {
			start = w.From
		}
		if !end.After(start) {
			continue
		}
		gs := float64(run.GPUMilli) / 1000 * end.Sub(start).Seconds()
		all += gs
		if watched(q) {
			mine += gs
		}
	}
	if all > 0 {
		v := mine / all
		g.ServiceShareDelivered = &v
	}
	return g
}

// CoveringWindow returns the smallest window holding both runs' report
// windows (History.Window): the window a what-if measures both runs over,
// so that neither run's events fall outside it. Reports without a History
// are skipped; none gives the zero window.
func CoveringWindow(reports ...*Report) queuereport.Window {
	var w queuereport.Window
	for _, r := range reports {
		if r == nil || r.History == nil {
			continue
		}
		h := r.History.Window
		if w.From.IsZero() || h.From.Before(w.From) {
			w.From = h.From
		}
		if h.To.After(w.To) {
			w.To = h.To
		}
	}
	return w
}
