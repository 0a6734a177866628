package telemetry

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestGovernanceMetricsRecord(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := NewGovernanceMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	loss, yes, no := 120.5, true, false
	m.RecordPreemption(ctx, "p1", "completed", &loss, &yes)
	m.RecordPreemption(ctx, "p1", "resume_failed", nil, &no)
	m.RecordReclaim(ctx, "p1", "idle", "notify", "kept", 0, true)
	m.RecordReclaim(ctx, "p1", "failed", "auto", "released", 2, false)
	m.RecordDispute(ctx, "p1", "idle")
	m.RecordDisputeRejected(ctx, "p1", "idle")
	m.RecordExperimentRollback(ctx)
	m.PrimePools(ctx, []string{"p1", "p2"}) // adds series at 0, changes no count
	var none *GovernanceMetrics             // a nil receiver records nothing
	none.RecordPreemption(ctx, "p", "x", nil, nil)
	none.RecordDispute(ctx, "p", "idle")
	none.RecordDisputeRejected(ctx, "p", "idle")
	none.RecordExperimentRollback(ctx)
	none.SetPoolReadiness(map[string]PoolReadiness{"p": {Ready: true}})
	none.PrimePools(ctx, []string{"p"})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	series := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sums[mt.Name] += float64(p.Value)
					series[mt.Name]++
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					sums[mt.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sums[mt.Name] += p.Sum
				}
			}
		}
	}
	want := map[string]float64{"gpugov_preemptions": 2, "gpugov_preemption_effective_loss_gpu_seconds": 120.5,
		"gpugov_preemption_resumes": 2, "gpugov_reclaims": 2, "gpugov_reclaim_gpus_released": 2, "gpugov_false_reclaims": 2,
		"gpugov_false_reclaims_rejected": 1, "gpugov_experiment_rollbacks": 1}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, sums[k], v, sums)
		}
	}
	// Primed: every pool × class (false reclaims, rejections) and pool ×
	// result (resumes) is a series; the rollback counter exists at once.
	for name, n := range map[string]int{"gpugov_false_reclaims": 6, "gpugov_false_reclaims_rejected": 6, "gpugov_preemption_resumes": 4,
		"gpugov_experiment_rollbacks": 1} {
		if series[name] != n {
			t.Errorf("%s: %d series, want %d", name, series[name], n)
		}
	}
}
