package replay_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/replay"
	"github.com/gpugov/gpugov/service"
	"github.com/gpugov/gpugov/store/storetest"
)

const (
	adminToken     = "replay-admin"
	submitterToken = "replay-submitter"
	// testSpeed compresses pods_small.csv (arrivals over 140 s, runs up to
	// 200 s) into seconds.
	testSpeed = 100
)

// startService runs gpugov in-process on a fresh database and dev server,
// with the two T4 GPUs of internal/simulation's nodes_two_t4.csv as pool
// "alibaba" and the simulated executor at testSpeed.
func startService(t *testing.T) *service.Service {
	t.Helper()
	nodes, err := alibaba.ReadNodes("../internal/simulation/testdata/nodes_two_t4.csv")
	if err != nil {
		t.Fatal(err)
	}
	dbURL := storetest.NewDatabase(t)
	dev := temporaltest.Start(t)
	tokens, err := api.NewTokens(map[string]api.Principal{
		adminToken:     {Project: "platform", Role: vocab.RoleAdmin},
		submitterToken: {Project: "project-00", Role: vocab.RoleSubmitter},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc, err := service.Start(ctx, service.Config{
		DatabaseURL: dbURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		Inventory: alibaba.Pools(nodes, alibaba.PoolOptions{}), SimSpeed: testSpeed, CycleInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	return svc
}

func client(t *testing.T, svc *service.Service, token string) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New("http://"+svc.APIAddr(), token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// smallSubmissions builds pods_small.csv's seven GPU pods at testSpeed.
func smallSubmissions(t *testing.T) []replay.Submission {
	t.Helper()
	pods, _, err := alibaba.ReadPods("../internal/simulation/testdata/pods_small.csv", alibaba.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subs, err := replay.Build(replay.Select(pods, 0, 1000, 0), replay.BuildOptions{Speed: testSpeed, Recovery: replay.DefaultRecovery()})
	if err != nil {
		t.Fatal(err)
	}
	return subs
}

// TestRun replays pods_small.csv on two T4 GPUs through the real service and
// checks the outcome: the 4-GPU pod waits for no_matching_capacity (the jobs
// then settle without the wait running out), the never-scheduled pod is
// cancelled at its deletion, the others succeed; the report counts them; a
// second replay of the same pods creates no job; a submitter token aborts the
// replay; a missing pool or queue stops it before any submission; a refused
// submission is recorded, not fatal.
func TestRun(t *testing.T) {
	svc := startService(t)
	admin := client(t, svc, adminToken)
	subs := smallSubmissions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := replay.Config{Client: admin, Submissions: subs, Speed: testSpeed, Pool: alibaba.DefaultPoolName, Wait: time.Minute}

	res, err := replay.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := res.Render(&out, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", out.String())
	if res.TimedOut || res.Accepted != 7 || len(res.Rejected) != 0 {
		t.Fatalf("timed out %v, %d accepted, rejected %v; want settled, 7, none", res.TimedOut, res.Accepted, res.Rejected)
	}
	if res.States["succeeded"] != 5 || res.States["cancelled"] != 1 || res.States["waiting"] != 1 {
		t.Errorf("states %v, want 5 succeeded, 1 cancelled (pod d), 1 waiting (pod h)", res.States)
	}
	if n := res.Reasons["experiment"]["no_matching_capacity"]; n != 1 {
		t.Errorf("reasons %v, want pod h (4 GPUs, nodes of 2) waiting for no_matching_capacity", res.Reasons)
	}
	if g := res.Report.Total; g.Jobs != 7 || g.Started < 5 || g.StillWaiting != 1 {
		t.Errorf("report total %+v, want 7 jobs, ≥ 5 started, 1 waiting", g)
	}

	again, err := replay.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for pod, id := range res.JobIDs {
		if again.JobIDs[pod] != id {
			t.Errorf("pod %s: job %s on the second replay, %s on the first", pod, again.JobIDs[pod], id)
		}
	}
	list, err := admin.ListJobs(ctx, apiclient.ListOptions{Limit: 100})
	if err != nil || len(list.Jobs) != 7 {
		t.Errorf("after two replays the API lists %d jobs (%v), want 7", len(list.Jobs), err)
	}

	t.Run("submitter token aborts", func(t *testing.T) {
		c := cfg
		c.Client = client(t, svc, submitterToken)
		_, err := replay.Run(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "operator or admin token") {
			t.Errorf("Run with a submitter token: %v", err)
		}
	})
	t.Run("missing pool or queue", func(t *testing.T) {
		c := cfg
		c.Pool = "nowhere"
		if _, err := replay.Run(ctx, c); err == nil || !strings.Contains(err.Error(), `no pool "nowhere"`) {
			t.Errorf("Run on a missing pool: %v", err)
		}
		c = cfg
		c.Submissions = []replay.Submission{subs[0]}
		c.Submissions[0].Spec.Queue = "gold"
		if _, err := replay.Run(ctx, c); err == nil || !strings.Contains(err.Error(), "no queue gold") {
			t.Errorf("Run with a missing queue: %v", err)
		}
	})
	t.Run("refusal recorded", func(t *testing.T) {
		bad := subs[0]
		bad.Key = "bad-request"
		bad.Spec.Resources.GPUs = -1
		c := cfg
		c.Submissions = []replay.Submission{bad}
		c.Wait = 5 * time.Second
		res, err := replay.Run(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Rejected) != 1 || !strings.Contains(res.Rejected[0].Error, "resources.gpus") || res.Accepted != 0 {
			t.Errorf("rejected %v, accepted %d; want the one refusal naming resources.gpus", res.Rejected, res.Accepted)
		}
	})
}
