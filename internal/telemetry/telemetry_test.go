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
		// the runtime's and the process's, read by `gpugov load` (load.ReadHeap)
		"\ngo_gc_heap_live_bytes ", "\ngo_memstats_heap_inuse_bytes ", "\nprocess_resident_memory_bytes ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics output lacks %q:\n%s", want, text)
		}
	}
}

// TestNilMetricsRecordNothing keeps the nil receiver contract callers rely on:
// every recording method of a nil *Metrics returns without panicking, and
// nothing reaches the installed meter provider's exposition.
func TestNilMetricsRecordNothing(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, "gpugov-test")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	exposition := func() string {
		rec := httptest.NewRecorder()
		tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	before := exposition()

	var m *Metrics
	for name, call := range map[string]func(){
		"SetWaiting":         func() { m.SetWaiting(map[WaitingKey]int64{{Queue: "q", Reason: "held"}: 1}) },
		"RecordJobWait":      func() { m.RecordJobWait(ctx, "q", "standard", time.Second) },
		"RecordCycle":        func() { m.RecordCycle(ctx, time.Second) },
		"RecordPlacement":    func() { m.RecordPlacement(ctx, "p", "standard") },
		"SetQueueGauges":     func() { m.SetQueueGauges(map[string]QueueGauge{"q": {}}) },
		"AddWaitTransitions": func() { m.AddWaitTransitions(ctx, map[string]int64{"held": 1}) },
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s on a nil *Metrics panicked: %v", name, r)
				}
			}()
			call()
		}()
	}
	after := exposition()
	for _, series := range []string{`queue="q"`, `pool="p"`, `reason="held"`} {
		if !strings.Contains(before, series) && strings.Contains(after, series) {
			t.Errorf("a nil *Metrics recorded %s:\n%s", series, after)
		}
	}
}
