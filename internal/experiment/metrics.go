package experiment

import (
	"fmt"
	"slices"

	"github.com/gpugov/gpugov/internal/queuereport"
)

// govDef reads one governance metric; nil means undefined.
type govDef struct {
	info MetricInfo
	get  func(*Governance) *float64
}

func govCount(name, desc string, f func(*Governance) int) govDef {
	return govDef{MetricInfo{Name: name, Unit: queuereport.UnitCount, Governance: true, Description: desc},
		func(g *Governance) *float64 { v := float64(f(g)); return &v }}
}

func govPtr(name, unit, desc string, f func(*Governance) *float64) govDef {
	return govDef{MetricInfo{Name: name, Unit: unit, Governance: true, Description: desc}, f}
}

// governanceMetrics lists the governance metrics in Governance's field
// order, by their JSON names.
var governanceMetrics = []govDef{
	govCount("preemptions", "preemptions started in the window", func(g *Governance) int { return g.Preemptions }),
	govPtr("effective_run_loss_gpu_s", queuereport.UnitGPUSeconds, "effective run loss of the preempted runs (accounting.EffectiveRunLoss), summed",
		func(g *Governance) *float64 { return &g.EffectiveRunLossGPUSeconds }),
	govPtr("recompute_gpu_s", queuereport.UnitGPUSeconds, "the recompute part of that loss: work redone since the last checkpoint",
		func(g *Governance) *float64 { return &g.RecomputeGPUSeconds }),
	govCount("resumes_verified", "preemption victims whose next run resumed correctly", func(g *Governance) int { return g.ResumesVerified }),
	govCount("resumes_failed", "preemption victims whose resume failed or was downgraded", func(g *Governance) int { return g.ResumesFailed }),
	govPtr("resume_success_rate", queuereport.UnitRatio, "resumes_verified ÷ (resumes_verified + resumes_failed)",
		func(g *Governance) *float64 { return g.ResumeSuccessRate }),
	govCount("reclaims", "allocations released by reclaim", func(g *Governance) int { return g.Reclaims }),
	govCount("false_reclaims", "reclaims found wrong (disputed, or confirmed false)", func(g *Governance) int { return g.FalseReclaims }),
	govCount("starts", "runs started in the window", func(g *Governance) int { return g.Starts }),
	govCount("start_failures", "runs that failed before reaching running", func(g *Governance) int { return g.StartFailures }),
	govPtr("start_success_rate", queuereport.UnitRatio, "1 − start_failures ÷ (starts + start_failures)",
		func(g *Governance) *float64 { return g.StartSuccessRate }),
	govPtr("gpu_release_time_s", queuereport.UnitSeconds, "median seconds from a preemption's notice to its GPUs released",
		func(g *Governance) *float64 { return g.GPUReleaseTimeSeconds }),
	govPtr("cancel_rate", queuereport.UnitRatio, "jobs cancelled ÷ jobs submitted in the window",
		func(g *Governance) *float64 { return g.CancelRate }),
	govPtr("service_share_delivered", queuereport.UnitRatio, "GPU-seconds delivered to the watched queues ÷ all GPU-seconds delivered in the scope",
		func(g *Governance) *float64 { return g.ServiceShareDelivered }),
}

// catalogue is Metrics' list: the queue report's group metrics, then the
// governance metrics.
var catalogue = func() []MetricInfo {
	var out []MetricInfo
	for _, d := range queuereport.GroupMetricDefs() {
		out = append(out, MetricInfo{Name: d.Name, Unit: d.Unit, Description: d.Description})
	}
	for _, d := range governanceMetrics {
		out = append(out, d.info)
	}
	return out
}()

// byName indexes catalogue.
var byName = func() map[string]MetricInfo {
	m := make(map[string]MetricInfo, len(catalogue))
	for _, mi := range catalogue {
		m[mi.Name] = mi
	}
	return m
}()

// LookupMetric returns the metric called name, and whether there is one.
func LookupMetric(name string) (MetricInfo, bool) {
	mi, ok := byName[name]
	return mi, ok
}

// CoreMetrics are the group metrics every comparison shows on the total and
// on each watched tier and queue, besides those the spec names.
var CoreMetrics = []string{"jobs", "started", "wait_p50_s", "wait_p95_s", "longest_wait_s",
	"jobs_over_objective", "starving_jobs", "cancellation_rate", "service_share"}

// measures reports whether the source measured the governance metric name
// (an empty Measured means every one).
func (g *Governance) measures(name string) bool {
	return len(g.Measured) == 0 || slices.Contains(g.Measured, name)
}

// governanceValue reads the governance metric name; nil when undefined or
// not measured.
func (g *Governance) value(name string) *float64 {
	for _, d := range governanceMetrics {
		if d.info.Name == name {
			if !g.measures(name) {
				return nil
			}
			return d.get(g)
		}
	}
	return nil
}

// group returns the group t names: the total, a tier of ByTier or a queue
// of ByQueue; nil when the measurement has no such group.
func (m *Measurement) group(t Target) *queuereport.Group {
	switch {
	case t.Tier != "":
		return findGroup(m.ByTier, queuereport.KeyTier, t.Tier)
	case t.Queue != "":
		return findGroup(m.ByQueue, queuereport.KeyQueue, t.Queue)
	}
	return &m.Total
}

func findGroup(gs []queuereport.Group, key, value string) *queuereport.Group {
	for i := range gs {
		if gs[i].Key[key] == value {
			return &gs[i]
		}
	}
	return nil
}

func (m *Measurement) value(metric string, t Target) (*float64, int, error) {
	mi, ok := LookupMetric(metric)
	switch {
	case !ok:
		return nil, 0, fmt.Errorf("unknown metric %q", metric)
	case t.Tier != "" && t.Queue != "":
		return nil, 0, fmt.Errorf("metric %s: a target names a tier or a queue, not both (tier %q, queue %q)", metric, t.Tier, t.Queue)
	case mi.Governance && (t.Tier != "" || t.Queue != ""):
		return nil, 0, fmt.Errorf("governance metric %s is read on the scope's total only, not on %s", metric, t.label())
	case mi.Governance:
		return m.Governance.value(metric), m.Total.Jobs, nil
	}
	g := m.group(t)
	if g == nil {
		return nil, 0, nil
	}
	v, _ := queuereport.GroupMetric(g, metric)
	return v, g.Jobs, nil
}

// label names a target in sentences: "experiment tier", "queue batch",
// "total".
func (t Target) label() string {
	switch {
	case t.Tier != "" && t.Queue != "":
		return fmt.Sprintf("%s tier and queue %s", t.Tier, t.Queue)
	case t.Tier != "":
		return t.Tier + " tier"
	case t.Queue != "":
		return "queue " + t.Queue
	}
	return "total"
}
