package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// smallPool is two real 8-GPU G2 nodes of the trace: 16 GPUs.
func smallPool(t *testing.T) []alibaba.NodeRow {
	return traceNodes(t, traceDir(t), []nodePick{{"G2", 8, 2}})
}

// submitN submits n one-GPU jobs of runS seconds with keys prefix-0 …, and
// returns their IDs; any failure fails the test.
func submitN(t *testing.T, c *apiclient.Client, prefix string, n int, runS float64) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		spec := &api.JobSpec{Project: "drill", Queue: "standard", RunSeconds: runS,
			Resources: api.ResourceSpec{GPUs: 1, Pool: alibaba.DefaultPoolName}}
		job, status, err := c.Submit(context.Background(), spec, fmt.Sprintf("%s-%d", prefix, i))
		if err != nil || status != http.StatusCreated {
			t.Fatalf("submit %s-%d: status %d, %v", prefix, i, status, err)
		}
		ids[i] = job.ID
	}
	return ids
}

// waitSucceeded waits until every job in ids succeeded.
func waitSucceeded(t *testing.T, e *env, ids []string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "every job succeeded", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = 'succeeded'`, ids)
		return n == len(ids), fmt.Sprintf("%d of %d succeeded", n, len(ids))
	})
}

// TestWorkerKilledMidCycle stops both workers right after a scheduling
// cycle's placements are committed and before the cycle activity answers (as
// a crash there would), restarts them, and checks that every job then ran
// exactly once: the retried cycle is replayed by the store (same cycle ID), so
// no job gets a second allocation, and every granted allocation is run and
// released — none is lost.
func TestWorkerKilledMidCycle(t *testing.T) {
	var armed atomic.Bool
	var crashed atomic.Pointer[store.CycleOutcome]
	stopped := make(chan struct{})
	var e *env
	hook := func(_ context.Context, out *store.CycleOutcome) error {
		if len(out.Placed) == 0 || !armed.CompareAndSwap(true, false) {
			return nil
		}
		crashed.Store(out)
		go func() { e.svc.StopWorkers(); close(stopped) }()
		return errors.New("drill: worker killed after the cycle committed")
	}
	e = startEnv(t, envOptions{pools: alibaba.Pools(smallPool(t), alibaba.PoolOptions{}), simSpeed: 1000, afterCommit: hook})
	armed.Store(true)
	ids := submitN(t, e.client, "crash", 24, 2)
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("no scheduling cycle placed a job within a minute")
	}
	out := crashed.Load()
	t.Logf("workers stopped after cycle %s committed %d placements", out.CycleID, len(out.Placed))
	// While the workers are down the committed placements are held, not run.
	placed := make([]string, len(out.Placed))
	for i, p := range out.Placed {
		placed[i] = p.JobID
	}
	if n := e.queryInt(t, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = 'placed'`, placed); n != len(placed) {
		t.Fatalf("%d of the crashed cycle's %d jobs are placed in the store", n, len(placed))
	}
	time.Sleep(2 * time.Second) // past the cycle activity's first retry delay
	if err := e.svc.StartWorkers(); err != nil {
		t.Fatal(err)
	}
	waitSucceeded(t, e, ids, 2*time.Minute)

	if n := e.queryInt(t, `SELECT count(*) FROM scheduling_cycles WHERE id = $1`, out.CycleID); n != 1 {
		t.Errorf("crashed cycle stored %d times", n)
	}
	for _, c := range []struct{ what, sql string }{
		{"jobs with other than one allocation", `SELECT count(*) FROM jobs j WHERE id = ANY($1) AND (SELECT count(*) FROM allocations a WHERE a.job_id = j.id) <> 1`},
		{"jobs with other than one run", `SELECT count(*) FROM jobs j WHERE id = ANY($1) AND (SELECT count(*) FROM runs r WHERE r.job_id = j.id) <> 1`},
		{"allocations not released", `SELECT count(*) FROM allocations WHERE job_id = ANY($1) AND released_at IS NULL`},
		{"allocations released without a run", `SELECT count(*) FROM allocations WHERE job_id = ANY($1) AND run_id IS NULL`},
	} {
		if n := e.queryInt(t, c.sql, ids); n != 0 {
			t.Errorf("%d %s", n, c.what)
		}
	}
	if n := e.queryInt(t, `SELECT count(*) FROM gpu_usage WHERE used_milli <> 0`); n != 0 {
		t.Errorf("%d GPUs still charged after every job ended", n)
	}
	for _, id := range placed {
		if n := e.queryInt(t, `SELECT count(*) FROM allocations a WHERE a.job_id = $1 AND a.cycle_id = $2`, id, out.CycleID); n != 1 {
			t.Errorf("job %s: %d allocations from the crashed cycle, want its one (kept, then run)", id, n)
		}
	}
}

// TestPostgresOutage puts a TCP proxy between the service and PostgreSQL,
// submits continuously while the proxy cuts every connection, and checks
// that (1) during the outage submissions answer 503 store_unavailable and
// /readyz 503; (2) no submission answered 2xx is missing from the database,
// before, during or after the cut; (3) when the proxy forwards again the
// service recovers by itself: /readyz 200, new submissions 201, and every
// accepted job runs.
func TestPostgresOutage(t *testing.T) {
	requireTemporal(t)
	dbURL := storetest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	viaProxy := *u
	viaProxy.Host = proxy.Addr()
	e := startEnvOn(t, dbURL, envOptions{pools: alibaba.Pools(smallPool(t), alibaba.PoolOptions{}), simSpeed: 1000,
		dbURL: viaProxy.String()})
	ctx := context.Background()

	type answer struct {
		key    string
		status int
		id     string
		down   bool // sent after the cut was complete and before the restore
	}
	var mu sync.Mutex
	var answers []answer
	var isDown atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("outage-%d-%d", w, i)
				down := isDown.Load()
				spec := &api.JobSpec{Project: "drill", Queue: "standard", RunSeconds: 1,
					Resources: api.ResourceSpec{GPUs: 1, Pool: alibaba.DefaultPoolName}}
				job, status, _ := e.client.Submit(ctx, spec, key)
				a := answer{key: key, status: status, down: down && isDown.Load()}
				if job != nil {
					a.id = job.ID
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	proxy.Down()
	isDown.Store(true)
	time.Sleep(3 * time.Second)
	ready := readyz(t, e)
	isDown.Store(false)
	proxy.Up()
	waitFor(t, 30*time.Second, "/readyz 200 after PostgreSQL returned", func() (bool, string) {
		s := readyz(t, e)
		return s == http.StatusOK, fmt.Sprintf("/readyz %d", s)
	})
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	if ready != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage = %d, want 503", ready)
	}
	var accepted []string
	downAnswers, down503 := 0, 0
	for _, a := range answers {
		if a.down {
			downAnswers++
			if a.status == http.StatusServiceUnavailable {
				down503++
			}
		}
		if a.status >= 200 && a.status < 300 {
			accepted = append(accepted, a.id)
			if n := e.queryInt(t, `SELECT count(*) FROM jobs WHERE idempotency_key = $1 AND id = $2`, a.key, a.id); n != 1 {
				t.Errorf("submission %s answered %d but job %s is not stored", a.key, a.status, a.id)
			}
		}
	}
	t.Logf("%d submissions, %d accepted; %d sent during the outage, %d of them 503", len(answers), len(accepted), downAnswers, down503)
	if downAnswers == 0 || down503 != downAnswers {
		t.Errorf("during the outage %d of %d submissions answered 503, want all (and some)", down503, downAnswers)
	}
	after := submitN(t, e.client, "after-outage", 3, 1)
	waitSucceeded(t, e, append(accepted, after...), 2*time.Minute)
}

// readyz returns the status of GET /readyz.
func readyz(t *testing.T, e *env) int {
	t.Helper()
	resp, err := http.Get("http://" + e.svc.APIAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSameKeyTwiceOneJob submits one spec twice with one Idempotency-Key:
// the first answer is 201, the second 200 with the same job; the database
// holds one job and Temporal one workflow for it; the same key with a
// different spec is a 409.
func TestSameKeyTwiceOneJob(t *testing.T) {
	e := startEnv(t, envOptions{pools: alibaba.Pools(smallPool(t), alibaba.PoolOptions{}), simSpeed: 1000})
	ctx := context.Background()
	spec := &api.JobSpec{Project: "drill", Queue: "standard", RunSeconds: 1,
		Resources: api.ResourceSpec{GPUs: 1, Pool: alibaba.DefaultPoolName}}
	first, s1, err := e.client.Submit(ctx, spec, "same-key")
	if err != nil || s1 != http.StatusCreated {
		t.Fatalf("first submit: %d %v", s1, err)
	}
	second, s2, err := e.client.Submit(ctx, spec, "same-key")
	if err != nil || s2 != http.StatusOK || second.ID != first.ID {
		t.Fatalf("second submit: %d %v, job %v, want 200 with %s", s2, err, second, first.ID)
	}
	changed := *spec
	changed.RunSeconds = 2
	if _, s3, err := e.client.Submit(ctx, &changed, "same-key"); s3 != http.StatusConflict {
		t.Errorf("same key, other spec: %d %v, want 409", s3, err)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM jobs WHERE idempotency_key = 'same-key'`); n != 1 {
		t.Errorf("%d jobs with the key, want 1", n)
	}
	waitSucceeded(t, e, []string{first.ID}, time.Minute)
	q := fmt.Sprintf("WorkflowId = '%s'", temporalx.JobWorkflowID(first.ID))
	waitFor(t, 30*time.Second, "one workflow for the job", func() (bool, string) {
		n := countWorkflows(t, e.svc.Temporal(), q)
		return n == 1, fmt.Sprintf("%d executions match %q", n, q)
	})
}
