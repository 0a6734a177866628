package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestQueueGaugesAndTransitionsExposed sets the queue gauges and adds
// transitions, and checks the Prometheus exposition: the series with their
// labels and values, replaced gauges disappearing, and that the metric
// families exported are exactly MetricNames.
func TestQueueGaugesAndTransitionsExposed(t *testing.T) {
	ctx := context.Background()
	tel, err := Setup(ctx, "gpugov-test")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	m := tel.Metrics
	m.SetQueueGauges(map[string]QueueGauge{"gone": {LongestWaitSeconds: 1}})
	m.SetQueueGauges(map[string]QueueGauge{
		"standard":   {LongestWaitSeconds: 5400.5, StarvingJobs: 3, Tier: "standard", WaitObjectiveSeconds: 3600},
		"production": {Tier: "production"},
	})
	m.AddWaitTransitions(ctx, map[string]int64{"capacity_busy": 4, "held": 1, "fragmented": 0})
	m.AddWaitTransitions(ctx, map[string]int64{"capacity_busy": 2})
	// One of each older instrument, so that every family is exported.
	m.SetWaiting(map[WaitingKey]int64{{Queue: "standard", Reason: "capacity_busy"}: 7})
	m.RecordJobWait(ctx, "standard", "standard", time.Minute)
	m.RecordCycle(ctx, time.Millisecond)
	m.RecordPlacement(ctx, "p", "standard")
	// And every governance instrument, on the provider Setup installed.
	gm, err := NewGovernanceMetrics(otel.Meter("github.com/gpugov/gpugov"))
	if err != nil {
		t.Fatal(err)
	}
	loss, yes := 90.0, true
	gm.RecordPreemption(ctx, "p", "completed", &loss, &yes)
	gm.RecordReclaim(ctx, "p", "idle", "notify", "kept", 1, true)
	gm.RecordDispute(ctx, "p", "idle")
	gm.RecordDisputeRejected(ctx, "p", "idle")
	gm.RecordExperimentRollback(ctx)
	gm.SetPoolReadiness(map[string]PoolReadiness{"old": {Ready: true}})
	gm.SetPoolReadiness(map[string]PoolReadiness{"p": {Ready: false, Checks: map[string]bool{"save_restore_proven": false, "wait_reasons_recorded": true}}})

	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^gpugov_queue_longest_wait_seconds\{[^}]*queue="standard"[^}]*\} 5400\.5$`),
		regexp.MustCompile(`(?m)^gpugov_queue_longest_wait_seconds\{[^}]*queue="production"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^gpugov_queue_starving_jobs\{[^}]*queue="standard"[^}]*\} 3$`),
		regexp.MustCompile(`(?m)^gpugov_wait_reason_transitions_total\{[^}]*reason="capacity_busy"[^}]*\} 6$`),
		regexp.MustCompile(`(?m)^gpugov_wait_reason_transitions_total\{[^}]*reason="held"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^gpugov_queue_wait_objective_seconds\{[^}]*queue="standard"[^}]*tier="standard"[^}]*\} 3600$`),
		regexp.MustCompile(`(?m)^gpugov_false_reclaims_total\{[^}]*class="idle"[^}]*pool="p"[^}]*\} 2$`),
		regexp.MustCompile(`(?m)^gpugov_false_reclaims_rejected_total\{[^}]*pool="p"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^gpugov_experiment_rollbacks_total(\{[^}]*\})? 1$`),
		regexp.MustCompile(`(?m)^gpugov_pool_ready\{[^}]*pool="p"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^gpugov_pool_readiness_check\{[^}]*check="save_restore_proven"[^}]*pool="p"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^gpugov_pool_readiness_check\{[^}]*check="wait_reasons_recorded"[^}]*pool="p"[^}]*\} 1$`),
	} {
		if !want.MatchString(text) {
			t.Errorf("metrics lack %s:\n%s", want, text)
		}
	}
	if strings.Contains(text, `queue="gone"`) || strings.Contains(text, `reason="fragmented"`) || strings.Contains(text, `pool="old"`) ||
		regexp.MustCompile(`(?m)^gpugov_queue_wait_objective_seconds\{[^}]*queue="production"`).MatchString(text) {
		t.Errorf("a replaced queue or a zero transition count is exported:\n%s", text)
	}
	families := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (gpugov_\S+) (\S+)$`).FindAllStringSubmatch(text, -1) {
		families[m[1]] = true
	}
	for _, name := range MetricNames {
		if !families[name] {
			t.Errorf("MetricNames lists %s, which is not exported", name)
		}
		delete(families, name)
	}
	for name := range families {
		t.Errorf("%s is exported but not in MetricNames", name)
	}
}

// TestQueueGauges checks the gauges computed from a snapshot and a report.
func TestQueueGauges(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	queues := []scheduling.Queue{{Name: "standard", Tier: vocab.TierStandard, MaxWait: time.Hour},
		{Name: "production", Tier: vocab.TierProduction, MaxWait: time.Minute}, {Name: "idle", Tier: vocab.TierExperiment}}
	pending := []scheduling.PendingJob{
		{ID: "a", Queue: "standard", SubmitTime: now.Add(-5 * time.Hour), WaitingSince: now.Add(-90 * time.Minute)},
		{ID: "b", Queue: "standard", SubmitTime: now.Add(-time.Hour), WaitingSince: now.Add(-time.Hour)},
		{ID: "c", Queue: "production", WaitingSince: now.Add(-30 * time.Second)},
	}
	report := &queuereport.Report{Starving: []queuereport.StarvingJob{
		{JobID: "a", Queue: "standard", WaitOngoing: true},
		{JobID: "x", Queue: "standard", WaitOngoing: false}, // started since: not starving now
		{JobID: "c", Queue: "production", WaitOngoing: true},
	}}
	got := QueueGauges(queues, pending, report, now)
	want := map[string]QueueGauge{
		"standard":   {LongestWaitSeconds: 5400, StarvingJobs: 1, Tier: "standard", WaitObjectiveSeconds: 3600},
		"production": {LongestWaitSeconds: 30, StarvingJobs: 1, Tier: "production", WaitObjectiveSeconds: 60},
		"idle":       {Tier: "experiment"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for q, w := range want {
		if got[q] != w {
			t.Errorf("%s: %+v, want %+v", q, got[q], w)
		}
	}
	if g := QueueGauges(queues, nil, nil, now); g["standard"] != (QueueGauge{Tier: "standard", WaitObjectiveSeconds: 3600}) || len(g) != 3 {
		t.Errorf("no pending jobs, no report: %v", g)
	}
}

// TestNilMetricsReportMethods keeps the nil receiver contract.
func TestNilMetricsReportMethods(t *testing.T) {
	var m *Metrics
	m.SetQueueGauges(map[string]QueueGauge{"q": {StarvingJobs: 1}})
	m.AddWaitTransitions(context.Background(), map[string]int64{"held": 1})
	if !slices.Contains(MetricNames, MetricWaitReasonTransition) {
		t.Fatal("MetricNames lacks the transitions counter")
	}
}
