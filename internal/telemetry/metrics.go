package telemetry

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// WaitBuckets are the wait-time histogram bounds in seconds: from a second to a
// day, roughly ×2.5 apart, so P50/P95/P99 of interactive and batch queues both
// resolve (the trace's waits run from 0 s to ~14,000 s).
var WaitBuckets = []float64{1, 5, 15, 30, 60, 150, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400}

// CycleBuckets are the scheduling-cycle duration bounds in seconds (1 ms to 5 s).
var CycleBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// WaitingKey identifies one series of the waiting-jobs gauge.
type WaitingKey struct {
	Queue  string
	Reason string
}

// Metrics are gpugov's scheduling instruments. Their Prometheus names are
// gpugov_waiting_jobs{queue,reason}, gpugov_job_wait_seconds{queue,tier}
// (histogram), gpugov_scheduling_cycle_duration_seconds (histogram) and
// gpugov_placements_total{pool,tier}. A nil *Metrics records nothing, so code
// paths that run without telemetry (tests, the simulator) need no checks.
type Metrics struct {
	jobWait   metric.Float64Histogram
	cycle     metric.Float64Histogram
	placement metric.Int64Counter
	waitingG  metric.Int64ObservableGauge

	mu      sync.Mutex
	waiting map[WaitingKey]int64

	report *reportMetrics // queue service gauges and transitions (report_metrics.go)
}

// NewMetrics creates the instruments on meter. It returns an error when an
// instrument or the gauge callback cannot be registered.
func NewMetrics(meter metric.Meter) (*Metrics, error) {
	m := &Metrics{waiting: map[WaitingKey]int64{}}
	var err error
	if m.jobWait, err = meter.Float64Histogram("gpugov_job_wait_seconds",
		metric.WithDescription("Wait of a job from submit (or requeue) to the start of its run, by queue and tier"),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(WaitBuckets...)); err != nil {
		return nil, fmt.Errorf("telemetry: job wait histogram: %w", err)
	}
	if m.cycle, err = meter.Float64Histogram("gpugov_scheduling_cycle_duration_seconds",
		metric.WithDescription("Duration of one scheduling cycle: snapshot load, plan and persist"),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(CycleBuckets...)); err != nil {
		return nil, fmt.Errorf("telemetry: cycle histogram: %w", err)
	}
	if m.placement, err = meter.Int64Counter("gpugov_placements",
		metric.WithDescription("Jobs placed on GPUs by the scheduler, by pool and tier")); err != nil {
		return nil, fmt.Errorf("telemetry: placements counter: %w", err)
	}
	m.waitingG, err = meter.Int64ObservableGauge("gpugov_waiting_jobs",
		metric.WithDescription("Pending jobs of every shard by queue and stored wait reason (not_yet_evaluated before their first cycle), read from the database"))
	if err != nil {
		return nil, fmt.Errorf("telemetry: waiting gauge: %w", err)
	}
	if _, err = meter.RegisterCallback(m.observeWaiting, m.waitingG); err != nil {
		return nil, fmt.Errorf("telemetry: waiting gauge callback: %w", err)
	}
	if m.report, err = newReportMetrics(meter); err != nil {
		return nil, err
	}
	return m, nil
}

// observeWaiting reports the counts SetWaiting set last, in a stable order.
func (m *Metrics) observeWaiting(_ context.Context, o metric.Observer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]WaitingKey, 0, len(m.waiting))
	for k := range m.waiting {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Queue != keys[j].Queue {
			return keys[i].Queue < keys[j].Queue
		}
		return keys[i].Reason < keys[j].Reason
	})
	for _, k := range keys {
		o.ObserveInt64(m.waitingG, m.waiting[k], metric.WithAttributes(
			attribute.String("queue", k.Queue), attribute.String("reason", k.Reason)))
	}
	return nil
}

// SetWaiting replaces the waiting-jobs counts (serve: store.WaitingCounts,
// after each cycle and on a period); series absent from counts drop to zero
// by disappearing.
func (m *Metrics) SetWaiting(counts map[WaitingKey]int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waiting = make(map[WaitingKey]int64, len(counts))
	for k, v := range counts {
		m.waiting[k] = v
	}
}

// RecordJobWait records one wait (submit or requeue → run start).
func (m *Metrics) RecordJobWait(ctx context.Context, queue, tier string, wait time.Duration) {
	if m == nil {
		return
	}
	m.jobWait.Record(ctx, wait.Seconds(), metric.WithAttributes(
		attribute.String("queue", queue), attribute.String("tier", tier)))
}

// RecordCycle records one scheduling cycle's duration.
func (m *Metrics) RecordCycle(ctx context.Context, d time.Duration) {
	if m == nil {
		return
	}
	m.cycle.Record(ctx, d.Seconds())
}

// RecordPlacement counts one placement.
func (m *Metrics) RecordPlacement(ctx context.Context, pool, tier string) {
	if m == nil {
		return
	}
	m.placement.Add(ctx, 1, metric.WithAttributes(attribute.String("pool", pool), attribute.String("tier", tier)))
}
