package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/telemetry"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// metricValue scrapes the telemetry handler and returns the value of the
// first sample whose line matches pattern, or -1 when none does.
func metricValue(t *testing.T, tel *telemetry.Telemetry, pattern string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	re := regexp.MustCompile(`(?m)^` + pattern + ` ([0-9.e+-]+)$`)
	m := re.FindStringSubmatch(rec.Body.String())
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestInstrumentedStore runs real scheduling cycles through the decorator on
// a real store and checks what it records: placements by pool and tier, the
// waiting gauge by queue and reason, the cycle duration, the wait-reason
// transitions, one wait sample per run — and nothing for a replayed cycle — and that the after-commit hook
// runs after the commit and its error reaches the caller.
func TestInstrumentedStore(t *testing.T) {
	ctx := context.Background()
	pool := scheduling.Pool{Name: "p", Available: true, Stage: vocab.StageObserve, Nodes: []scheduling.Node{{
		Name: "n1", Schedulable: true, GPUs: []scheduling.GPU{
			{UUID: "GPU-1", Model: "T4", MemoryMiB: 15360, Healthy: true},
			{UUID: "GPU-2", Model: "T4", MemoryMiB: 15360, Healthy: true},
		}}}}
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{pool}})
	if _, err := EnsureDefaultQueues(ctx, st); err != nil {
		t.Fatal(err)
	}
	for i, gpus := range []int{1, 1, 4} {
		_, _, err := st.CreateJob(ctx, &store.NewJob{Project: "p1", Queue: "standard", Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: gpus, Pool: "p"}, RunSeconds: 10,
			SubmitTime: time.Now().Add(-time.Duration(10+i) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
	}
	tel, err := telemetry.Setup(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	var hookCalls []string
	var hookErr error
	is := newInstrumentedStore(st, tel.Metrics, func(_ context.Context, out *store.CycleOutcome) error {
		hookCalls = append(hookCalls, out.CycleID)
		return hookErr
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))

	cycle := func(id string) (*store.CycleOutcome, error) {
		now := time.Now()
		snap, err := is.LoadSnapshot(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		pol := scheduling.DefaultPolicy()
		return is.ApplyCycle(ctx, id, scheduling.Plan(snap, &pol, now), now)
	}
	out, err := cycle("c1")
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Placed) != 2 {
		t.Fatalf("cycle placed %d jobs, want the two 1-GPU jobs", len(out.Placed))
	}
	placements := `gpugov_placements_total\{.*pool="p",tier="standard"\}`
	if v := metricValue(t, tel, placements); v != 2 {
		t.Errorf("placements = %v, want 2", v)
	}
	select {
	case <-is.waitingStale:
	default:
		t.Error("the applied cycle did not mark the waiting gauge stale")
	}
	if err := is.refreshWaiting(ctx); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, tel, `gpugov_waiting_jobs\{.*queue="standard",reason="no_matching_capacity"\}`); v != 1 {
		t.Errorf("waiting gauge = %v, want the 4-GPU job waiting for no_matching_capacity", v)
	}
	// Another replica, which ran no cycle, reports the same counts: they
	// come from the database, not from the cycles a process ran.
	otherTel, err := telemetry.Setup(ctx, "test-replica-2")
	if err != nil {
		t.Fatal(err)
	}
	defer otherTel.Shutdown(ctx)
	other := newInstrumentedStore(st, otherTel.Metrics, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := other.refreshWaiting(ctx); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, otherTel, `gpugov_waiting_jobs\{.*queue="standard",reason="no_matching_capacity"\}`); v != 1 {
		t.Errorf("the other replica's waiting gauge = %v, want 1 like the replica that ran the cycle", v)
	}
	if v := metricValue(t, tel, `gpugov_scheduling_cycle_duration_seconds_count\{.*\}`); v != 1 {
		t.Errorf("cycles recorded = %v, want 1", v)
	}
	transitions := `gpugov_wait_reason_transitions_total\{.*reason="no_matching_capacity"\}`
	if out.WaitTransitions != 1 {
		t.Errorf("store opened %d wait events, want 1 (the 4-GPU job)", out.WaitTransitions)
	}
	if v := metricValue(t, tel, transitions); v != 1 {
		t.Errorf("wait reason transitions = %v, want 1 to no_matching_capacity", v)
	}

	// A retried attempt of the same cycle is replayed by the store: no new placements counted.
	if _, err := cycle("c1"); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, tel, placements); v != 2 {
		t.Errorf("placements after a replayed cycle = %v, want still 2", v)
	}
	if v := metricValue(t, tel, transitions); v != 1 {
		t.Errorf("wait reason transitions after a replayed cycle = %v, want still 1", v)
	}
	hookErr = errors.New("drill")
	if _, err := cycle("c2"); !errors.Is(err, hookErr) {
		t.Errorf("cycle with a failing hook: %v, want the hook's error", err)
	}
	if len(hookCalls) != 3 || hookCalls[0] != "c1" || hookCalls[2] != "c2" {
		t.Errorf("hook calls %v, want c1, c1 (replay), c2", hookCalls)
	}

	p := out.Placed[0]
	for range 2 { // the second call is a retried attempt: same run, no second sample
		if _, err := is.MarkRunning(ctx, p.JobID, p.AllocationID, 0, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if v := metricValue(t, tel, `gpugov_job_wait_seconds_count\{.*queue="standard",tier="standard"\}`); v != 1 {
		t.Errorf("wait samples = %v, want 1", v)
	}
	if v := metricValue(t, tel, `gpugov_job_wait_seconds_sum\{.*queue="standard",tier="standard"\}`); v < 10 {
		t.Errorf("wait sum = %v s, want ≥ 10 s (the job was submitted 10 s ago)", v)
	}
}

// TestWaitTransitionsAcrossReplicas: the wait-reason transitions are the
// store's, whichever replica's instrumented store applies a cycle. Two
// replicas on one database alternate cycles of one waiting job (A: a new
// wait, B: the same reason, A: a new reason, B: the same new reason, with a
// new detail): exactly two transitions are counted, one per reason — a
// replica comparing with the last cycle it ran itself would count B's
// second cycle again.
func TestWaitTransitionsAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	st, url := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{storetest.Pool("p", vocab.StageObserve, 1, 1)}})
	other := storetest.OpenStore(t, url, storetest.Fixture{})
	if _, err := EnsureDefaultQueues(ctx, st); err != nil {
		t.Fatal(err)
	}
	j, _, err := st.CreateJob(ctx, &store.NewJob{Project: "p1", Queue: "standard", Tier: vocab.TierStandard,
		Request: scheduling.ResourceRequest{GPUs: 4, Pool: "p"}, RunSeconds: 10, SubmitTime: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.Setup(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	replicas := []*instrumentedStore{newInstrumentedStore(st, tel.Metrics, nil, discard), newInstrumentedStore(other, tel.Metrics, nil, discard)}
	capacity, quota := vocab.ReasonNoMatchingCapacity, vocab.ReasonQuotaExhausted
	for i, r := range []struct {
		reason vocab.WaitReason
		detail string
		want   int // transitions the store counts
	}{{capacity, "0 free", 1}, {capacity, "0 free", 0}, {quota, "over quota", 1}, {quota, "over quota by 2", 0}} {
		is := replicas[i%2]
		res := &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: j.ID, Reason: r.reason, Detail: r.detail}}}
		out, err := is.ApplyCycle(ctx, "c"+strconv.Itoa(i), res, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if out.WaitTransitions != r.want {
			t.Errorf("cycle %d: store counted %d transitions, want %d", i, out.WaitTransitions, r.want)
		}
	}
	for _, reason := range []vocab.WaitReason{capacity, quota} {
		if v := metricValue(t, tel, `gpugov_wait_reason_transitions_total\{.*reason="`+string(reason)+`"\}`); v != 1 {
			t.Errorf("transitions to %s = %v, want 1", reason, v)
		}
	}
}
