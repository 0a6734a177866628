package service

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestRetentionShorterThanObservationWindowRefused: Start refuses a sample
// retention shorter than the reclaim observation window (the default 30
// min here), before any database or Temporal call, with an error naming
// both; a negative retention is refused too.
func TestRetentionShorterThanObservationWindowRefused(t *testing.T) {
	tokens, err := api.NewTokens(map[string]api.Principal{"t": {Project: "p", Role: vocab.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	for retention, want := range map[time.Duration]string{
		29 * time.Minute: "shorter than the reclaim observation window 30m0s",
		-time.Hour:       "want a positive duration",
	} {
		// Unreachable database and Temporal: Start must fail on the retention first.
		svc, err := Start(context.Background(), Config{DatabaseURL: "postgres://127.0.0.1:1/none", TemporalAddress: "127.0.0.1:1",
			APIAddr: "127.0.0.1:0", Tokens: tokens, GPUSampleRetention: retention,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			svc.Close(context.Background())
			t.Fatalf("retention %s: Start succeeded", retention)
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--gpu-sample-retention") {
			t.Errorf("retention %s: %v; want an error containing %q and naming the flag", retention, err, want)
		}
	}
}

// syncBuffer is a log sink safe for the loop's goroutine and the test's.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRetentionLoopPrunesOldSamples runs the service's retention loop on a
// real PostgreSQL store with a short interval: its first pass deletes the
// samples older than the retention and keeps the recent ones, a later pass
// deletes a sample that became old meanwhile, and each pass logs the count.
func TestRetentionLoopPrunesOldSamples(t *testing.T) {
	ctx := context.Background()
	st, _ := storetest.NewStore(t, storetest.Fixture{})
	node := scheduling.Node{Name: "n1", CPUMilli: 1000, MemoryMiB: 1024, Schedulable: true,
		GPUs: []scheduling.GPU{{UUID: "GPU-a", Model: "A100", MemoryMiB: 81920, Healthy: true}}}
	if _, err := st.UpsertNode(ctx, "p", node, "agent"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	const retention = 24 * time.Hour
	sample := func(age time.Duration) store.GPUSample {
		return store.GPUSample{GPUUUID: "GPU-a", At: now.Add(-age), GPUPercent: 50, MemoryUsedMiB: 100}
	}
	if _, err := st.InsertGPUSamples(ctx, "n1", []store.GPUSample{
		sample(3 * retention), sample(2 * retention), sample(retention + time.Minute), // old
		sample(retention - time.Hour), sample(time.Minute), // kept
	}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	s := &Service{store: st, cfg: Config{GPUSampleRetention: retention, RetentionInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}.withDefaults()}
	if err := s.loadPolicy(); err != nil { // the default policy: a 30 min observation window
		t.Fatal(err)
	}
	loopCtx, cancel := context.WithCancel(ctx)
	s.loops.Add(1)
	go s.retentionLoop(loopCtx)
	defer func() {
		cancel()
		s.loops.Wait()
	}()

	count := func() int {
		got, err := st.GPUSamples(ctx, []string{"GPU-a"}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	waitFor := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for count() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d samples left, want %d; log:\n%s", what, count(), want, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(2, "first pass")
	if !strings.Contains(logs.String(), "deleted=3") {
		t.Fatalf("no pass logged deleting 3 rows:\n%s", logs.String())
	}
	// A sample reported late for an old instant: the next pass deletes it.
	if _, err := st.InsertGPUSamples(ctx, "n1", []store.GPUSample{sample(5 * retention)}); err != nil {
		t.Fatal(err)
	}
	waitFor(2, "later pass")
	if !strings.Contains(logs.String(), "deleted=1") {
		t.Fatalf("no pass logged deleting the late sample:\n%s", logs.String())
	}
	got, err := st.GPUSamples(ctx, []string{"GPU-a"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sm := range got {
		if now.Sub(sm.At) >= retention {
			t.Errorf("kept a sample %s old", now.Sub(sm.At))
		}
	}
	// Decisions older than their retention (the default, 7 days) go too;
	// a recent one stays.
	old := now.Add(-DefaultDecisionRetention - time.Hour)
	if _, err := st.Pool().Exec(ctx, `INSERT INTO scheduling_cycles (id, at, policy_version) VALUES ('old', $1, 'v')`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `
		INSERT INTO decisions (cycle_id, job_id, kind, body, at) VALUES
			('old', 'j-gone', 'place', '{}', $1), ('old', 'j-new', 'place', '{}', $2)`, old, now); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var left []string
		rows, err := st.Pool().Query(ctx, `SELECT job_id FROM decisions`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			left = append(left, id)
		}
		rows.Close()
		if len(left) == 1 && left[0] == "j-new" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("decisions left %v, want [j-new]; log:\n%s", left, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "decisions pruned") {
		t.Fatalf("no decisions pass logged:\n%s", logs.String())
	}
}
