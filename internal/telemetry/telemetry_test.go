package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestMetricsExposedOnHandler records one of each instrument and checks the
// Prometheus exposition carries the series with their labels.
func TestMetricsExposedOnHandler(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, "gpugov-test")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	m := tel.Metrics
	m.SetWaiting(map[WaitingKey]int64{{Queue: "standard", Reason: "capacity_busy"}: 7})
	m.RecordJobWait(ctx, "standard", "standard", 42*time.Second)
	m.RecordCycle(ctx, 3*time.Millisecond)
	m.RecordPlacement(ctx, "alibaba", "standard")

	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`gpugov_waiting_jobs{`, `reason="capacity_busy"`, `} 7`,
		`gpugov_job_wait_seconds_bucket{`, `tier="standard"`,
		`gpugov_scheduling_cycle_duration_seconds_count`,
		`gpugov_placements_total{`, `pool="alibaba"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics output lacks %q:\n%s", want, text)
		}
	}
}

// TestNilMetricsRecordNothing keeps the nil receiver contract callers rely on.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.SetWaiting(map[WaitingKey]int64{{Queue: "q", Reason: "held"}: 1})
	m.RecordJobWait(context.Background(), "q", "standard", time.Second)
	m.RecordCycle(context.Background(), time.Second)
	m.RecordPlacement(context.Background(), "p", "standard")
}
