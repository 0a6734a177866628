package telemetry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// LossBuckets are the effective-run-loss histogram bounds in GPU-seconds:
// from a second on one GPU to a day on eight.
var LossBuckets = []float64{1, 10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 691200}

// Prometheus names of the governance instruments (as queries use them; the
// OTel exporter adds _total to counters).
const (
	MetricPreemptions           = "gpugov_preemptions_total"                     // counter {pool, outcome}
	MetricPreemptionLoss        = "gpugov_preemption_effective_loss_gpu_seconds" // histogram {pool}
	MetricPreemptionResumes     = "gpugov_preemption_resumes_total"              // counter {pool, result}: verified, wrong_step
	MetricReclaims              = "gpugov_reclaims_total"                        // counter {pool, class, mode, state}
	MetricReclaimGPUsReleased   = "gpugov_reclaim_gpus_released_total"           // counter {pool, class}
	MetricFalseReclaims         = "gpugov_false_reclaims_total"                  // counter {pool, class}: disputes
	MetricFalseReclaimsRejected = "gpugov_false_reclaims_rejected_total"         // counter {pool, class}: disputes an operator rejected
	MetricExperimentRollbacks   = "gpugov_experiment_rollbacks_total"            // counter: experiments rolled back
	MetricPoolReady             = "gpugov_pool_ready"                            // gauge {pool}: 1 ready, 0 not
	MetricPoolReadinessCheck    = "gpugov_pool_readiness_check"                  // gauge {pool, check}: 1 passes, 0 fails
)

// PoolReadiness is one pool's readiness (GET /v1/pools/{pool}/readiness):
// whether it passes, and each check by name with whether it passes.
type PoolReadiness struct {
	Ready  bool
	Checks map[string]bool
}

// GovernanceMetrics are the preemption, reclaim, experiment and readiness
// instruments. Prometheus names: gpugov_preemptions_total{pool,outcome},
// gpugov_preemption_effective_loss_gpu_seconds{pool} (histogram),
// gpugov_preemption_resumes_total{pool,result} (result verified or
// wrong_step; the resume failure rate is wrong_step / all),
// gpugov_reclaims_total{pool,class,mode,state},
// gpugov_reclaim_gpus_released_total{pool,class},
// gpugov_false_reclaims_total{pool,class} (disputes: keeps and disputes after
// a release), gpugov_false_reclaims_rejected_total{pool,class} (disputes an
// operator rejected; false reclaims = the first minus the second),
// gpugov_experiment_rollbacks_total, gpugov_pool_ready{pool} and
// gpugov_pool_readiness_check{pool,check}. A nil *GovernanceMetrics records
// nothing.
type GovernanceMetrics struct {
	preemptions   metric.Int64Counter
	loss          metric.Float64Histogram
	resumes       metric.Int64Counter
	reclaims      metric.Int64Counter
	gpusReleased  metric.Float64Counter
	falseReclaims metric.Int64Counter
	rejected      metric.Int64Counter
	rollbacks     metric.Int64Counter
	ready         metric.Int64ObservableGauge
	checks        metric.Int64ObservableGauge

	mu        sync.Mutex
	readiness map[string]PoolReadiness
}

// NewGovernanceMetrics creates the instruments on meter (serve passes the
// meter of the provider telemetry.Setup installed: otel.Meter). It returns
// an error naming the instrument that could not be created.
func NewGovernanceMetrics(meter metric.Meter) (*GovernanceMetrics, error) {
	m := &GovernanceMetrics{readiness: map[string]PoolReadiness{}}
	var err error
	if m.preemptions, err = meter.Int64Counter("gpugov_preemptions",
		metric.WithDescription("Preemptions that reached a final outcome, by pool and outcome (completed, resume_failed, resume_not_observed, aborted_*, victim_ended)")); err != nil {
		return nil, fmt.Errorf("telemetry: preemptions counter: %w", err)
	}
	if m.loss, err = meter.Float64Histogram(MetricPreemptionLoss,
		metric.WithDescription("Effective run loss of a preemption: GPUs × (lost work + save/restore + recompute), by pool"),
		metric.WithExplicitBucketBoundaries(LossBuckets...)); err != nil {
		return nil, fmt.Errorf("telemetry: loss histogram: %w", err)
	}
	if m.resumes, err = meter.Int64Counter("gpugov_preemption_resumes",
		metric.WithDescription("Resumes checked after a preemption, by pool and result (verified, wrong_step)")); err != nil {
		return nil, fmt.Errorf("telemetry: resumes counter: %w", err)
	}
	if m.reclaims, err = meter.Int64Counter("gpugov_reclaims",
		metric.WithDescription("Reclaims that reached a final state, by pool, class, mode and state")); err != nil {
		return nil, fmt.Errorf("telemetry: reclaims counter: %w", err)
	}
	if m.gpusReleased, err = meter.Float64Counter("gpugov_reclaim_gpus_released",
		metric.WithDescription("GPUs (milli-GPU / 1000) released by reclaims, by pool and class")); err != nil {
		return nil, fmt.Errorf("telemetry: GPUs released counter: %w", err)
	}
	if m.falseReclaims, err = meter.Int64Counter("gpugov_false_reclaims",
		metric.WithDescription("Reclaims the owner disputed (kept the allocation, or disputed its release within the window), by pool and class")); err != nil {
		return nil, fmt.Errorf("telemetry: false reclaims counter: %w", err)
	}
	if m.rejected, err = meter.Int64Counter("gpugov_false_reclaims_rejected",
		metric.WithDescription("Reclaim disputes an operator rejected (the reclaim was right), by pool and class")); err != nil {
		return nil, fmt.Errorf("telemetry: rejected disputes counter: %w", err)
	}
	if m.rollbacks, err = meter.Int64Counter("gpugov_experiment_rollbacks",
		metric.WithDescription("Policy experiments rolled back by their checks")); err != nil {
		return nil, fmt.Errorf("telemetry: experiment rollbacks counter: %w", err)
	}
	if m.ready, err = meter.Int64ObservableGauge(MetricPoolReady,
		metric.WithDescription("Whether the pool's readiness for wider automation passes (1) or not (0), by pool")); err != nil {
		return nil, fmt.Errorf("telemetry: pool ready gauge: %w", err)
	}
	if m.checks, err = meter.Int64ObservableGauge(MetricPoolReadinessCheck,
		metric.WithDescription("Whether each readiness check of the pool passes (1) or fails (0), by pool and check")); err != nil {
		return nil, fmt.Errorf("telemetry: readiness check gauge: %w", err)
	}
	if _, err = meter.RegisterCallback(m.observe, m.ready, m.checks); err != nil {
		return nil, fmt.Errorf("telemetry: readiness gauges callback: %w", err)
	}
	// Exported at 0 from the start, so that the first rollback is an
	// increase Prometheus sees.
	m.rollbacks.Add(context.Background(), 0)
	return m, nil
}

// ReclaimClasses and ResumeResults are the label values PrimePools exports
// at 0 for every pool (vocab.ReclaimClasses' names, and the resume results
// RecordPreemption counts).
var (
	ReclaimClasses = []string{"failed", "idle", "completed"}
	ResumeResults  = []string{"verified", "wrong_step"}
)

// PrimePools exports the alerting rules' counters at 0 for each pool — the
// resume results (gpugov_preemption_resumes_total) and the false reclaims
// and their rejections by class — so that a series exists before its first
// event and Prometheus' increase() counts that event (a counter first seen
// at 1 shows no increase). Adding 0 changes no count, so calling it again
// (serve does, as pools appear) is harmless.
func (m *GovernanceMetrics) PrimePools(ctx context.Context, pools []string) {
	if m == nil {
		return
	}
	for _, pool := range pools {
		p := attribute.String("pool", pool)
		for _, r := range ResumeResults {
			m.resumes.Add(ctx, 0, metric.WithAttributes(p, attribute.String("result", r)))
		}
		for _, c := range ReclaimClasses {
			cl := attribute.String("class", c)
			m.falseReclaims.Add(ctx, 0, metric.WithAttributes(p, cl))
			m.rejected.Add(ctx, 0, metric.WithAttributes(p, cl))
		}
	}
}

// observe reports the latest readiness, in pool and check order.
func (m *GovernanceMetrics) observe(_ context.Context, o metric.Observer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	pools := slices.Sorted(maps.Keys(m.readiness))
	for _, p := range pools {
		r := m.readiness[p]
		o.ObserveInt64(m.ready, b2i(r.Ready), metric.WithAttributes(attribute.String("pool", p)))
		names := slices.Sorted(maps.Keys(r.Checks))
		for _, c := range names {
			o.ObserveInt64(m.checks, b2i(r.Checks[c]), metric.WithAttributes(attribute.String("pool", p), attribute.String("check", c)))
		}
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// SetPoolReadiness replaces the exported readiness with pools (pool name →
// its readiness); pools absent from it disappear from the export. serve's
// report loop calls it every report interval with every pool's readiness
// under the policy in force (store.PoolsReadiness: the evaluation GET
// /v1/pools/{pool}/readiness answers with), so that gpugov_pool_ready and
// gpugov_pool_readiness_check follow it.
func (m *GovernanceMetrics) SetPoolReadiness(pools map[string]PoolReadiness) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readiness = make(map[string]PoolReadiness, len(pools))
	for p, r := range pools {
		checks := make(map[string]bool, len(r.Checks))
		for c, ok := range r.Checks {
			checks[c] = ok
		}
		m.readiness[p] = PoolReadiness{Ready: r.Ready, Checks: checks}
	}
}

// RecordExperimentRollback counts one policy experiment rolled back by its
// checks (gpugov_experiment_rollbacks_total); the experiment workflow's
// rollback step calls it once per rollback.
func (m *GovernanceMetrics) RecordExperimentRollback(ctx context.Context) {
	if m == nil {
		return
	}
	m.rollbacks.Add(ctx, 1)
}

// RecordPreemption counts a preemption's final outcome; loss (GPU-seconds)
// is recorded when measured, and the resume check when one was made.
func (m *GovernanceMetrics) RecordPreemption(ctx context.Context, pool, outcome string, loss *float64, resumedCorrectly *bool) {
	if m == nil {
		return
	}
	p := attribute.String("pool", pool)
	m.preemptions.Add(ctx, 1, metric.WithAttributes(p, attribute.String("outcome", outcome)))
	if loss != nil {
		m.loss.Record(ctx, *loss, metric.WithAttributes(p))
	}
	if resumedCorrectly != nil {
		result := "verified"
		if !*resumedCorrectly {
			result = "wrong_step"
		}
		m.resumes.Add(ctx, 1, metric.WithAttributes(p, attribute.String("result", result)))
	}
}

// RecordReclaim counts a reclaim's final state with the GPUs it released
// and whether the owner disputed it (kept the allocation: a false reclaim).
func (m *GovernanceMetrics) RecordReclaim(ctx context.Context, pool, class, mode, state string, gpusReleased float64, disputed bool) {
	if m == nil {
		return
	}
	p, c := attribute.String("pool", pool), attribute.String("class", class)
	m.reclaims.Add(ctx, 1, metric.WithAttributes(p, c, attribute.String("mode", mode), attribute.String("state", state)))
	if gpusReleased > 0 {
		m.gpusReleased.Add(ctx, gpusReleased, metric.WithAttributes(p, c))
	}
	if disputed {
		m.falseReclaims.Add(ctx, 1, metric.WithAttributes(p, c))
	}
}

// RecordDispute counts a dispute of a released reclaim (a false reclaim
// until an operator rejects it) in gpugov_false_reclaims_total; the API's
// dispute route calls it once per dispute recorded (api.DisputeRecorder).
func (m *GovernanceMetrics) RecordDispute(ctx context.Context, pool, class string) {
	if m == nil {
		return
	}
	m.falseReclaims.Add(ctx, 1, metric.WithAttributes(attribute.String("pool", pool), attribute.String("class", class)))
}

// RecordDisputeRejected counts an operator's rejection of a dispute in
// gpugov_false_reclaims_rejected_total (api.DisputeRecorder).
func (m *GovernanceMetrics) RecordDisputeRejected(ctx context.Context, pool, class string) {
	if m == nil {
		return
	}
	m.rejected.Add(ctx, 1, metric.WithAttributes(attribute.String("pool", pool), attribute.String("class", class)))
}
