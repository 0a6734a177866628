package telemetry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
)

// Prometheus names of the queue service instruments (docs/design.md §6).
const (
	MetricQueueLongestWait     = "gpugov_queue_longest_wait_seconds"    // gauge {queue}
	MetricQueueStarvingJobs    = "gpugov_queue_starving_jobs"           // gauge {queue}
	MetricQueueWaitObjective   = "gpugov_queue_wait_objective_seconds"  // gauge {queue, tier}: the queue's max_wait_s
	MetricWaitReasonTransition = "gpugov_wait_reason_transitions_total" // counter {reason}
	waitReasonTransitionsName  = "gpugov_wait_reason_transitions"       // the OTel name; the exporter adds _total
)

// MetricNames lists the Prometheus metric families gpugov exports, by the
// names queries use: the scheduling and queue instruments (Metrics) and the
// governance ones (GovernanceMetrics); histograms (gpugov_job_wait_seconds,
// gpugov_scheduling_cycle_duration_seconds,
// gpugov_preemption_effective_loss_gpu_seconds) are queried through their
// _bucket, _sum and _count series. A test checks the list against the
// exporter's output, and deploy's tests check that the Grafana dashboards
// and the Prometheus alerting rules use nothing else.
var MetricNames = []string{
	"gpugov_waiting_jobs",
	"gpugov_job_wait_seconds",
	"gpugov_scheduling_cycle_duration_seconds",
	"gpugov_placements_total",
	MetricQueueLongestWait,
	MetricQueueStarvingJobs,
	MetricQueueWaitObjective,
	MetricWaitReasonTransition,
	MetricPreemptions,
	MetricPreemptionLoss,
	MetricPreemptionResumes,
	MetricReclaims,
	MetricReclaimGPUsReleased,
	MetricFalseReclaims,
	MetricFalseReclaimsRejected,
	MetricExperimentRollbacks,
	MetricPoolReady,
	MetricPoolReadinessCheck,
}

// QueueGauge is one queue's current service state for the queue gauges.
type QueueGauge struct {
	// LongestWaitSeconds is the longest current continuous wait of a job
	// waiting in the queue (now − its WaitingSince), in seconds; 0 when none waits.
	LongestWaitSeconds float64
	// StarvingJobs counts the queue's jobs that are waiting now and carry a
	// starvation signal (queuereport's overtaken, releases or
	// higher_tier_arrivals) in their current wait.
	StarvingJobs int64
	// Tier is the queue's tier name and WaitObjectiveSeconds its wait
	// objective (max_wait_s; 0: none, and no objective gauge is exported).
	Tier                 string
	WaitObjectiveSeconds float64
}

// reportMetrics holds the queue service instruments and the gauges' values.
type reportMetrics struct {
	longestWait metric.Float64ObservableGauge
	starving    metric.Int64ObservableGauge
	objective   metric.Float64ObservableGauge
	transitions metric.Int64Counter

	mu     sync.Mutex
	queues map[string]QueueGauge
}

// newReportMetrics creates the queue service instruments on meter. It
// returns an error when an instrument or the gauge callback cannot be
// registered.
func newReportMetrics(meter metric.Meter) (*reportMetrics, error) {
	r := &reportMetrics{queues: map[string]QueueGauge{}}
	var err error
	if r.longestWait, err = meter.Float64ObservableGauge(MetricQueueLongestWait,
		metric.WithDescription("Longest current continuous wait of a job waiting in the queue"),
		metric.WithUnit("s")); err != nil {
		return nil, fmt.Errorf("telemetry: longest wait gauge: %w", err)
	}
	if r.starving, err = meter.Int64ObservableGauge(MetricQueueStarvingJobs,
		metric.WithDescription("Jobs waiting in the queue that carry a starvation signal (overtaken, releases, higher-tier arrivals)")); err != nil {
		return nil, fmt.Errorf("telemetry: starving jobs gauge: %w", err)
	}
	if r.objective, err = meter.Float64ObservableGauge(MetricQueueWaitObjective,
		metric.WithDescription("The queue's wait objective (max_wait_s), by queue and tier; queues without one are not exported"),
		metric.WithUnit("s")); err != nil {
		return nil, fmt.Errorf("telemetry: wait objective gauge: %w", err)
	}
	if r.transitions, err = meter.Int64Counter(waitReasonTransitionsName,
		metric.WithDescription("Wait-reason transitions (wait events opened), by the new reason")); err != nil {
		return nil, fmt.Errorf("telemetry: wait reason transitions counter: %w", err)
	}
	if _, err = meter.RegisterCallback(r.observe, r.longestWait, r.starving, r.objective); err != nil {
		return nil, fmt.Errorf("telemetry: queue gauges callback: %w", err)
	}
	return r, nil
}

// observe reports the latest queue values, in queue order.
func (r *reportMetrics) observe(_ context.Context, o metric.Observer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := slices.Sorted(maps.Keys(r.queues))
	for _, q := range names {
		attrs := metric.WithAttributes(attribute.String("queue", q))
		o.ObserveFloat64(r.longestWait, r.queues[q].LongestWaitSeconds, attrs)
		o.ObserveInt64(r.starving, r.queues[q].StarvingJobs, attrs)
		if g := r.queues[q]; g.WaitObjectiveSeconds > 0 {
			o.ObserveFloat64(r.objective, g.WaitObjectiveSeconds, metric.WithAttributes(attribute.String("queue", q), attribute.String("tier", g.Tier)))
		}
	}
	return nil
}

// SetQueueGauges replaces the per-queue gauges (longest current wait,
// starving jobs) with gauges; queues absent from it disappear from the
// export. QueueGauges builds the map from a scheduling snapshot and a report.
func (m *Metrics) SetQueueGauges(gauges map[string]QueueGauge) {
	if m == nil || m.report == nil {
		return
	}
	r := m.report
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queues = make(map[string]QueueGauge, len(gauges))
	for q, g := range gauges {
		r.queues[q] = g
	}
}

// AddWaitTransitions adds one scheduling cycle's wait-reason transitions (wait
// events opened) to the counter, by the reason each transition went to.
func (m *Metrics) AddWaitTransitions(ctx context.Context, byReason map[string]int64) {
	if m == nil || m.report == nil {
		return
	}
	for reason, n := range byReason {
		if n > 0 {
			m.report.transitions.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
		}
	}
}

// QueueGauges computes the queue gauges at now: every queue of queues gets
// an entry (zero when nothing waits), the longest current wait from the
// snapshot's pending jobs (now − WaitingSince: the wait since submission or
// the last requeue), and the starving jobs from report, a queue service
// report whose window ends at now and that lists every starving job
// (Options.StarvingLimit queuereport.NoStarvingLimit): those still waiting
// at its end. A nil report leaves the starving counts at zero. Each entry
// carries the queue's tier and wait objective.
func QueueGauges(queues []scheduling.Queue, pending []scheduling.PendingJob, report *queuereport.Report, now time.Time) map[string]QueueGauge {
	out := make(map[string]QueueGauge, len(queues))
	for _, q := range queues {
		out[q.Name] = QueueGauge{Tier: q.Tier.String(), WaitObjectiveSeconds: q.MaxWait.Seconds()}
	}
	for _, j := range pending {
		g := out[j.Queue]
		g.LongestWaitSeconds = max(g.LongestWaitSeconds, now.Sub(j.WaitingSince).Seconds())
		out[j.Queue] = g
	}
	if report != nil {
		for _, s := range report.Starving {
			if s.WaitOngoing {
				g := out[s.Queue]
				g.StarvingJobs++
				out[s.Queue] = g
			}
		}
	}
	return out
}
