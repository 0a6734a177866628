package telemetry

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// LossBuckets are the effective-run-loss histogram bounds in GPU-seconds:
// from a second on one GPU to a day on eight.
var LossBuckets = []float64{1, 10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 691200}

// GovernanceMetrics are the preemption and reclaim instruments. Prometheus
// names: gpugov_preemptions_total{pool,outcome},
// gpugov_preemption_effective_loss_gpu_seconds{pool} (histogram),
// gpugov_preemption_resumes_total{pool,result} (result verified or
// wrong_step; the resume success rate is verified / all),
// gpugov_reclaims_total{pool,class,mode,state},
// gpugov_reclaim_gpus_released_total{pool,class} and
// gpugov_false_reclaims_total{pool,class} (disputes). A nil
// *GovernanceMetrics records nothing.
type GovernanceMetrics struct {
	preemptions   metric.Int64Counter
	loss          metric.Float64Histogram
	resumes       metric.Int64Counter
	reclaims      metric.Int64Counter
	gpusReleased  metric.Float64Counter
	falseReclaims metric.Int64Counter
}

// NewGovernanceMetrics creates the instruments on meter (serve passes the
// meter of the provider telemetry.Setup installed: otel.Meter). It returns
// an error naming the instrument that could not be created.
func NewGovernanceMetrics(meter metric.Meter) (*GovernanceMetrics, error) {
	m := &GovernanceMetrics{}
	var err error
	if m.preemptions, err = meter.Int64Counter("gpugov_preemptions",
		metric.WithDescription("Preemptions that reached a final outcome, by pool and outcome (completed, resume_failed, resume_not_observed, aborted_*, victim_ended)")); err != nil {
		return nil, fmt.Errorf("telemetry: preemptions counter: %w", err)
	}
	if m.loss, err = meter.Float64Histogram("gpugov_preemption_effective_loss_gpu_seconds",
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
		metric.WithDescription("Reclaims the owner disputed (kept the allocation), by pool and class")); err != nil {
		return nil, fmt.Errorf("telemetry: false reclaims counter: %w", err)
	}
	return m, nil
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
// and whether the owner disputed it.
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
