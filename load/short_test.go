package load

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/service"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// testPool is a pool of nodes × 8 T4 GPUs named DefaultPool.
func testPool(nodes int) scheduling.Pool {
	p := scheduling.Pool{Name: DefaultPool, Available: true}
	for n := range nodes {
		node := scheduling.Node{Name: fmt.Sprintf("load-node-%02d", n), Schedulable: true}
		for g := range 8 {
			node.GPUs = append(node.GPUs, scheduling.GPU{UUID: fmt.Sprintf("GPU-10ad%04x-0000-4000-8000-%012x", n, g),
				Model: "T4", MemoryMiB: 15360, Healthy: true})
		}
		p.Nodes = append(p.Nodes, node)
	}
	return p
}

// testStack is the service of TestShortLoad and the burst tests, in this
// process, on its own database and dev server.
type testStack struct {
	client *apiclient.Client
	store  *store.Store
	dev    *temporaltest.DevServer
	base   string // the API's base URL
}

// startTestStack starts the service (16 × 8 T4, simulated executor at 10×,
// a cycle a second) with an operator token, closed when t ends; its
// warnings and errors are logged when t failed.
func startTestStack(t *testing.T) testStack {
	t.Helper()
	dev := temporaltest.Start(t)
	dbURL := storetest.NewDatabase(t)
	const token = "load-operator"
	tokens, err := api.NewTokens(map[string]api.Principal{token: {Name: "load", Project: "platform", Role: vocab.RoleOperator}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx := context.Background()
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	svc, err := service.Start(startCtx, service.Config{
		DatabaseURL: dbURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		Inventory: []scheduling.Pool{testPool(16)}, SimSpeed: 10, CycleInterval: time.Second, ReconcileInterval: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("start service: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("close service: %v", err)
		}
		if t.Failed() {
			t.Logf("service log (warnings and errors):\n%s", logs.String())
		}
	})
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	base := "http://" + svc.APIAddr()
	cl, err := apiclient.New(base, token)
	if err != nil {
		t.Fatal(err)
	}
	return testStack{client: cl.WithHTTPClient(NewHTTPClient(512)), store: st, dev: dev, base: base}
}

// TestShortLoad is the shortened variant of `make load` (docs/design.md §8):
// 10 submissions/s for 45 s with the query and cancel mix, against the
// service in this process on its own database and dev server. Nothing may
// be lost (every accepted job has its row, its workflow, and a final state
// or a wait reason) and no answer may be a 5xx. The memory trend is reported
// but not checked: 45 s is too short for one.
func TestShortLoad(t *testing.T) {
	temporaltest.SkipShort(t)
	ts := startTestStack(t)
	cl, st, dev, base := ts.client, ts.store, ts.dev, ts.base
	ctx := context.Background()
	var progress bytes.Buffer
	rep, err := Run(ctx, Config{
		Client: cl, Store: st, Temporal: dev.Client,
		Rate: 10, Duration: 45 * time.Second, GetRate: 5, WhyRate: 2, ListRate: 1, ReportRate: 0.2,
		CancelShare: 0.1, WaitShare: 0.03, RunSeconds: 20, Drain: 4 * time.Minute,
		ServePID: os.Getpid(), MetricsURL: base + "/metrics", SampleInterval: 5 * time.Second, Seed: 17,
		Progress: &progress,
	})
	if err != nil {
		t.Fatalf("load: %v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", out.String())
	if !rep.Pass {
		t.Fatalf("load failed:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	submit := rep.Kinds[0]
	// The schedule called for 10/s over 45 s; every one must have been sent
	// (none dropped at the in-flight cap) and answered 2xx (Pass checks that).
	if submit.Kind != KindSubmit || submit.Scheduled != 450 || submit.Sent != 450 || rep.Accepted != 450 {
		t.Errorf("submissions: scheduled %d, sent %d, accepted %d; want 450 each", submit.Scheduled, submit.Sent, rep.Accepted)
	}
	// The mix reached every kind, and the scheduler both finished jobs and
	// kept the built-to-wait ones waiting with their reasons.
	for _, k := range rep.Kinds {
		if k.OK+k.Conflict == 0 {
			t.Errorf("kind %s got no answer: %+v", k.Kind, k)
		}
	}
	if rep.States[string(vocab.JobSucceeded)] == 0 || rep.States[string(vocab.JobCancelled)] == 0 {
		t.Errorf("job states %v: want succeeded and cancelled jobs", rep.States)
	}
	for _, reason := range []vocab.WaitReason{vocab.ReasonHeld, vocab.ReasonNoMatchingCapacity, vocab.ReasonEnvironmentNotReady} {
		if rep.Reasons[string(reason)] == 0 {
			t.Errorf("wait reasons %v: want some %s", rep.Reasons, reason)
		}
	}
	if len(rep.Memory) < 5 || rep.Memory[0].RSSBytes == 0 || rep.Memory[0].HeapLiveBytes == 0 {
		t.Errorf("memory samples %+v: want RSS and heap every 5 s", rep.Memory)
	}
}

// syncBuffer is a bytes.Buffer safe for the service's concurrent log writes.
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
