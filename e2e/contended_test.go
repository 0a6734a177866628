package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/replay"
)

// Contended replay settings: `make run`'s main job, shortened. The window,
// speed, run cap and pool are make run's (replay.Contended*: the pool is
// replay.SizePool of ContendedPoolGPUs from the trace's node list), the
// policy its deploy/gpugov/replay-policy.yaml (pool alibaba in trial:
// checkpointable experiment jobs may be preempted). Only the window's first
// contendedPods pods (of 221) are submitted, so that the test ends within a
// few minutes.
const (
	contendedPods     = 120
	contendedSettle   = 30 * time.Second
	contendedDeadline = 5 * time.Minute
)

// TestContendedReplay replays the busiest day's first pods on the contended
// pool under make run's policy and checks that governance is exercised and
// safe: jobs waited for capacity (capacity-type wait reasons, not only the
// service's latency); at least one preemption notified its victim (on a
// loaded machine a victim near its end may finish before the release:
// outcome victim_ended), and every victim released was checkpointable and
// had saved a checkpoint; no GPU was granted beyond 1000
// milli-GPU at any sample and the usage table agrees with the allocations;
// and the replay's report shows the governance section from those records.
func TestContendedReplay(t *testing.T) {
	selected, sz, pol := contendedSlice(t)
	e := startEnv(t, envOptions{pools: alibaba.Pools(sz.Nodes, alibaba.PoolOptions{}), simSpeed: replay.ContendedSpeed, policy: pol})
	subs, err := replay.Build(selected[:contendedPods], replay.BuildOptions{From: replay.ContendedFrom, Speed: replay.ContendedSpeed,
		Recovery: replay.DefaultRecovery(), MaxRunSeconds: replay.ContendedMaxRunS})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pool: %s; peak demand %.1f GPUs", sz, float64(replay.PeakDemand(subs))/1000)

	ctx, cancel := context.WithTimeout(context.Background(), contendedDeadline)
	defer cancel()
	sampler := startUsageSampler(ctx, t, e)
	res, err := replay.Run(ctx, replay.Config{Client: e.client, Submissions: subs, Speed: replay.ContendedSpeed,
		Pool: alibaba.DefaultPoolName, Wait: contendedSettle, Progress: testLog{t}, TemporalUI: "http://127.0.0.1:8233"})
	sampler.stop()
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	var report strings.Builder
	if err := res.Render(&report, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("replay report:\n%s", report.String())
	if len(res.Rejected) > 0 || res.Accepted != len(subs) {
		t.Fatalf("replay: %d rejected (%v), %d of %d accepted", len(res.Rejected), res.Rejected, res.Accepted, len(subs))
	}

	// Capacity-type waits, from the wait events the cycles wrote.
	capacityWaiters := e.queryInt(t, `SELECT count(DISTINCT job_id) FROM wait_events
		WHERE reason IN ('capacity_busy', 'fragmented', 'reserved_for_higher_priority', 'preemption_in_progress')`)
	if capacityWaiters == 0 {
		t.Errorf("no job waited for capacity (capacity_busy, fragmented, reserved_for_higher_priority, preemption_in_progress)")
	}
	t.Logf("%d jobs waited for capacity", capacityWaiters)

	// At least one preemption acted on a victim; those that released one
	// released a checkpointable job after a checkpoint saved in its grace.
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions p JOIN jobs v ON v.id = p.victim_job_id
		WHERE p.kind = 'preemption' AND p.notified_at IS NOT NULL`); n == 0 {
		t.Errorf("no preemption notified a victim")
	}
	t.Logf("preemptions: %d notified, %d released", e.queryInt(t, `SELECT count(*) FROM preemptions WHERE notified_at IS NOT NULL`),
		e.queryInt(t, `SELECT count(*) FROM preemptions WHERE released_at IS NOT NULL`))
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions p JOIN jobs v ON v.id = p.victim_job_id
		WHERE p.released_at IS NOT NULL AND (NOT (v.recovery->>'checkpointable')::boolean OR p.saved_at IS NULL)`); n != 0 {
		t.Errorf("%d preemptions released a victim that is not checkpointable or saved no checkpoint", n)
	}
	if res.Governance == nil || len(res.Governance.Preemptions) == 0 || !strings.Contains(report.String(), "PreemptionWorkflow") {
		t.Errorf("the report's governance section lists no preemption with its Temporal UI query")
	}

	sampler.check(t)
	checkUsageConsistent(t, e)
	checkWaitEvents(t, e)
}

// contendedSlice is `make run`'s contended input (replay.ContendedFrom to
// ContendedTo of the default pod list, on a pool of ContendedPoolGPUs cut
// from the trace's nodes, under deploy/gpugov/replay-policy.yaml): the
// selected pods, the sized pool and the policy.
func contendedSlice(t *testing.T) ([]alibaba.PodRow, replay.Sizing, *policy.Policy) {
	t.Helper()
	dir := traceDir(t)
	nodes, err := alibaba.ReadNodes(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	pods, _, err := alibaba.ReadPods(filepath.Join(dir, "openb_pod_list_default.csv"), alibaba.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selected := replay.Select(pods, replay.ContendedFrom, replay.ContendedTo, 0)
	sz, err := replay.SizePool(nodes, selected, replay.ContendedPoolGPUs)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(filepath.Join(repoRoot(t), "deploy", "gpugov", "replay-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return selected, sz, pol
}
