package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/replay"
)

// jobChecks are the end-of-test invariants of many jobs that all ran: each
// one allocation and one run, nothing left held or charged, and no
// allocation from a scheduling cycle that is not stored (a cycle whose
// transaction was cut must leave nothing behind).
func jobChecks(ids []string) []check {
	return append([]check{
		{what: "jobs with other than one allocation", sql: `SELECT count(*) FROM jobs j WHERE id = ANY($1) AND (SELECT count(*) FROM allocations a WHERE a.job_id = j.id) <> 1`, args: []any{ids}},
		{what: "jobs with other than one run", sql: `SELECT count(*) FROM jobs j WHERE id = ANY($1) AND (SELECT count(*) FROM runs r WHERE r.job_id = j.id) <> 1`, args: []any{ids}},
		{what: "allocations not released", sql: `SELECT count(*) FROM allocations WHERE job_id = ANY($1) AND released_at IS NULL`, args: []any{ids}},
		{what: "allocations of a cycle not stored", sql: `SELECT count(*) FROM allocations a WHERE NOT EXISTS (SELECT 1 FROM scheduling_cycles c WHERE c.id = a.cycle_id)`},
	}, gpuChecks()...)
}

// TestPostgresCutMidCycle runs `gpugov serve` through a TCP proxy in front
// of PostgreSQL, keeps the scheduler busy placing 24 short jobs on four
// GPUs, and cuts every connection at the moment a proxied connection is
// inside a scheduling cycle's transaction (pg_stat_activity: a transaction
// open on a statement of the cycle's); five seconds later the proxy
// forwards again. The shared PostgreSQL server is never restarted: other
// tests use it. The cut transaction must leave nothing; the retried cycle
// places each job once and every job runs once.
func TestPostgresCutMidCycle(t *testing.T) {
	requireTemporal(t)
	t.Parallel()
	var proxy *tcpProxy
	r := newCrashRig(t, gpugovBinary(t), crashRigOptions{policy: crashPolicy, inventory: crashInventory, simSpeed: 10,
		viaProxy: func(dbURL string) string {
			u, err := url.Parse(dbURL)
			if err != nil {
				t.Fatal(err)
			}
			proxy = startProxy(t, u.Host)
			u.Host = proxy.Addr()
			return u.String()
		}})
	r.start("", "")
	ids := make([]string, 24)
	for i := range ids {
		ids[i] = submitCrash(t, r, "standard", 1, 20, false).ID
	}
	// Hold the GPU rows on the test's own (unproxied) connection, so that the
	// next cycle that places a job waits inside its transaction at lockGPUs'
	// FOR UPDATE: on an idle machine a cycle's transaction lasts too short a
	// time for polling to find it open. The lock is let go right after the cut.
	ctx := context.Background()
	lock, err := r.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `SELECT 1 FROM gpus FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var cutOn string
	waitFor(t, time.Minute, "a scheduling cycle's transaction open on a proxied connection", func() (bool, string) {
		ports := proxy.upstreamPorts()
		var q string
		err := r.db.QueryRow(ctx, `
			SELECT coalesce(min(query), '') FROM pg_stat_activity
			WHERE datname = current_database() AND client_port = ANY($1) AND xact_start IS NOT NULL
			  AND query ~* '(scheduling_cycles|INSERT INTO allocations|INSERT INTO allocation_gpus|INSERT INTO decisions|FOR UPDATE OF g)'`, ports).Scan(&q)
		if err != nil {
			return false, err.Error()
		}
		if q == "" {
			return false, fmt.Sprintf("no cycle transaction among %d proxied connections", len(ports))
		}
		proxy.Down()
		cutOn = q
		return true, ""
	})
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL cut while a cycle's transaction ran %q", strings.Join(strings.Fields(cutOn), " "))
	placedAtCut := r.queryInt(`SELECT count(*) FROM allocations`)
	time.Sleep(5 * time.Second)
	proxy.Up()
	began := time.Now()
	waitFor(t, 3*time.Minute, "every job succeeded after the cut", func() (bool, string) {
		n := r.queryInt(`SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = 'succeeded'`, ids)
		var states string
		if err := r.db.QueryRow(context.Background(), `SELECT coalesce(string_agg(state || ':' || n, ' '), '') FROM (
			SELECT state, count(*) AS n FROM jobs WHERE id = ANY($1) GROUP BY state) s`, ids).Scan(&states); err != nil {
			return false, err.Error()
		}
		return n == len(ids), fmt.Sprintf("%d of %d succeeded (states %s)", n, len(ids), states)
	})
	t.Logf("%d allocations stored at the cut; all %d jobs succeeded %.0f s after PostgreSQL returned", placedAtCut, len(ids), time.Since(began).Seconds())
	what, res := verify(t, r, jobChecks(ids))
	t.Logf("PostgreSQL cut mid-cycle: checked %s: %s", what, res)
}

// traceNodeCSV is an Alibaba node-list CSV of the first count nodes of
// each pick, with the trace's header, read from the trace in dir.
func traceNodeCSV(t *testing.T, dir string, picks []nodePick) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	out := []string{lines[0]}
	for _, p := range picks {
		n := 0
		for _, l := range lines[1:] {
			f := strings.Split(strings.TrimSpace(l), ",")
			if n < p.count && len(f) == 5 && f[4] == p.model && f[3] == fmt.Sprint(p.gpus) {
				out = append(out, strings.TrimSpace(l))
				n++
			}
		}
		if n < p.count {
			t.Fatalf("trace has only %d %d-GPU %s nodes, want %d", n, p.gpus, p.model, p.count)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// TestTemporalRestartDuringReplay replays 100 pods of the trace's busiest
// day (its requests and arrival times, at 800×) through a `gpugov serve`
// process on a slice of the trace's nodes, and restarts the Temporal dev
// server (SIGTERM, then the same port and SQLite file) in the middle of the
// replay. Every submission must be accepted (a 202 while Temporal is away
// is started again by the reconciler), and at the end every job has ended
// or waits with a reason, ran at most once, nothing is over-allocated, and
// Temporal holds one JobWorkflow per job.
func TestTemporalRestartDuringReplay(t *testing.T) {
	requireTemporal(t)
	t.Parallel()
	dir := traceDir(t)
	r := newCrashRig(t, gpugovBinary(t), crashRigOptions{policy: "version: gpugov.policy/v1\n",
		inventory: traceNodeCSV(t, dir, replayFewNodes), inventoryCSV: true, simSpeed: replaySpeed})
	r.start("", "")
	pods, _, err := alibaba.ReadPods(filepath.Join(dir, "openb_pod_list_default.csv"), alibaba.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	subs, err := replay.Build(replay.Select(pods, replay.DefaultFrom, replay.DefaultTo, n), replay.BuildOptions{
		From: replay.DefaultFrom, Speed: replaySpeed, Recovery: replay.DefaultRecovery(), MaxRunSeconds: replayMaxRunS})
	if err != nil || len(subs) != n {
		t.Fatalf("%d submissions, %v", len(subs), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), replayDeadline)
	defer cancel()
	type outcome struct {
		res *replay.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := replay.Run(ctx, replay.Config{Client: r.client, Submissions: subs, Speed: replaySpeed,
			Pool: alibaba.DefaultPoolName, Wait: replaySettle, Progress: testLog{t}})
		done <- outcome{res, err}
	}()
	time.Sleep(subs[n/2].SubmitAt) // the middle submission's time
	began := time.Now()
	r.dev.Restart(t)
	down := time.Since(began)
	out := <-done
	res, err := out.res, out.err
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	t.Logf("Temporal dev server restarted mid-replay in %.1f s; replay: %d accepted, %d rejected, timed out %v",
		down.Seconds(), res.Accepted, len(res.Rejected), res.TimedOut)
	if len(res.Rejected) > 0 || res.Accepted != n {
		t.Fatalf("replay: %d rejected (%v), %d of %d accepted", len(res.Rejected), res.Rejected, res.Accepted, n)
	}
	// On a loaded machine the replay's own settle wait may end first.
	waitFor(t, 4*time.Minute, "every job ended or waiting", func() (bool, string) {
		left := r.queryInt(`SELECT count(*) FROM jobs WHERE state IN ('submitted', 'placed', 'running')`)
		return left == 0, fmt.Sprintf("%d jobs submitted, placed or running", left)
	})
	e := r.env()
	checkEveryJobEndedOrExplained(t, e, n)
	checkUsageConsistent(t, e)
	checkWaitEvents(t, e)
	checkOneRunPerJob(t, e)
	q := "WorkflowType = 'JobWorkflow'"
	waitFor(t, time.Minute, "one JobWorkflow per job", func() (bool, string) {
		got := countWorkflows(t, r.dev.Client, q)
		return got == n, fmt.Sprintf("%d executions match %q, want %d", got, q, n)
	})
}
