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
	var none *GovernanceMetrics
	none.RecordPreemption(ctx, "p", "x", nil, nil) // a nil receiver records nothing

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sums[mt.Name] += float64(p.Value)
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
		"gpugov_preemption_resumes": 2, "gpugov_reclaims": 2, "gpugov_reclaim_gpus_released": 2, "gpugov_false_reclaims": 1}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, sums[k], v, sums)
		}
	}
}
