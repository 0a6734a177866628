package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// BenchmarkLoadSnapshot loads a snapshot of a 1,000-node × 8-GPU inventory
// with 8,000 active allocations (each with a running run), 10,000 pending jobs
// that have been through a scheduling cycle (so they carry explanations and
// open wait events) and 10,000 finished jobs of history. Target: ≤ 100 ms/op.
//
// Besides wall time it reports the CPU time per load of this process
// (client-ms/op) and of the PostgreSQL backend serving it (server-ms/op, from
// /proc, at the kernel's clock-tick resolution): on a shared, loaded machine
// wall time includes waiting for a core, and the two CPU figures show what a
// load costs by itself.
func BenchmarkLoadSnapshot(b *testing.B) { benchLoadSnapshot(b, "") }

// BenchmarkLoadShardSnapshot is BenchmarkLoadSnapshot as the scheduler of
// the shard "default" loads it (LoadShardSnapshot) when that shard holds
// every pool: the cost of the shard filter without `shards:`.
func BenchmarkLoadShardSnapshot(b *testing.B) { benchLoadSnapshot(b, store.DefaultShard) }

func benchLoadSnapshot(b *testing.B, shard string) {
	seeder, url := newStore(b)
	ctx := context.Background()
	seedLargeSnapshot(b, seeder)
	// A one-connection pool, so that one backend serves every load.
	s, err := store.Open(ctx, url+"&pool_max_conns=1")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var backend int
	if err := s.Pool().QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		b.Fatal(err)
	}
	now := t0.Add(time.Hour)
	var snap *scheduling.Snapshot
	if snap, err = s.LoadShardSnapshot(ctx, shard, now); err != nil { // warm the statement cache
		b.Fatal(err)
	}
	client0, server0 := processCPU(b, 0), processCPU(b, backend)
	b.ResetTimer()
	for b.Loop() {
		if snap, err = s.LoadShardSnapshot(ctx, shard, now); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b, 0)-client0).Milliseconds())/float64(b.N), "client-ms/op")
	b.ReportMetric(float64((processCPU(b, backend)-server0).Milliseconds())/float64(b.N), "server-ms/op")
	if len(snap.Pending) != 10000 || len(snap.Allocations) != 8000 || len(snap.Running) != 8000 ||
		len(snap.Pools[0].Nodes) != 1000 {
		b.Fatalf("snapshot has %d pending, %d allocations, %d running, %d nodes", len(snap.Pending),
			len(snap.Allocations), len(snap.Running), len(snap.Pools[0].Nodes))
	}
}

// BenchmarkLoadSnapshotCold is BenchmarkLoadSnapshot's first load after a
// Store is opened (a service start): nothing cached, every statement prepared
// on a fresh connection. Opening the Store is not timed.
func BenchmarkLoadSnapshotCold(b *testing.B) {
	seeder, url := newStore(b)
	ctx := context.Background()
	seedLargeSnapshot(b, seeder)
	now := t0.Add(time.Hour)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s, err := store.Open(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		snap, err := s.LoadSnapshot(ctx, now)
		b.StopTimer()
		s.Close()
		if err != nil || len(snap.Pending) != 10000 || len(snap.Running) != 8000 {
			b.Fatalf("cold load: %v", err)
		}
		b.StartTimer()
	}
}

// BenchmarkApplyCycleWaiting applies a cycle that explains 10,000 waiting
// jobs (every job row rewritten: the explanation names the cycle), a tenth of
// them with a changed detail (an in-place refresh of the open wait event each).
func BenchmarkApplyCycleWaiting(b *testing.B) {
	s, _ := newStore(b)
	ctx := context.Background()
	pending := seedLargeSnapshot(b, s)
	i := 0
	for b.Loop() {
		i++
		res := waitingResult(pending, i, func(k int) (vocab.WaitReason, string) {
			if k%10 == i%10 {
				return vocab.ReasonCapacityBusy, fmt.Sprintf("0 of 8 free, cycle %d", i)
			}
			return vocab.ReasonCapacityBusy, "0 of 8 free"
		})
		out, err := s.ApplyCycle(ctx, fmt.Sprintf("bench-%d", i), res, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if out.WaitTransitions+out.WaitRefreshes < 1000 {
			b.Fatalf("%d transitions and %d refreshes, want ≥ 1000 in all", out.WaitTransitions, out.WaitRefreshes)
		}
	}
}

// BenchmarkApplyCycleSteady applies cycles 5 s apart that see 10,000 waiting
// jobs in an unchanged situation (only rank and score move): the cost of a
// cycle over a long, stable queue. With store.ExplanationRefresh a cycle
// rewrites only the explanations that are a refresh interval old (a ninth
// of them at 5 s per cycle, the intervals averaging 45 s), so compare its ns/op with
// BenchmarkApplyCycleWaiting's in one run.
func BenchmarkApplyCycleSteady(b *testing.B) {
	s, _ := newStore(b)
	ctx := context.Background()
	pending := seedLargeSnapshot(b, s)
	i := 0
	for b.Loop() {
		i++
		res := waitingResult(pending, i, func(int) (vocab.WaitReason, string) { return vocab.ReasonCapacityBusy, "0 of 8 free" })
		if _, err := s.ApplyCycle(ctx, fmt.Sprintf("steady-%d", i), res, t0.Add(time.Duration(5*i)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyCycleNotifying is BenchmarkApplyCycleWaiting where the
// tenth that changes moves between capacity_busy and quota_exhausted, so
// every other cycle writes about 1,000 job.wait_reason notifications (the
// outbox rows and the per-project locks, docs/design.md §3 step 7); compare
// its ns/op with BenchmarkApplyCycleWaiting's of the same run.
func BenchmarkApplyCycleNotifying(b *testing.B) {
	s, _ := newStore(b)
	ctx := context.Background()
	pending := seedLargeSnapshot(b, s)
	i := 0
	for b.Loop() {
		i++
		res := waitingResult(pending, i, func(k int) (vocab.WaitReason, string) {
			if k%10 == (i/2)%10 && i%2 == 1 {
				return vocab.ReasonQuotaExhausted, "0 of 8 free"
			}
			return vocab.ReasonCapacityBusy, "0 of 8 free"
		})
		if _, err := s.ApplyCycle(ctx, fmt.Sprintf("bench-%d", i), res, t0.Add(time.Duration(i)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	if n := queryInt(b, s, `SELECT count(*) FROM notifications`); n == 0 && i > 1 {
		b.Fatal("no notifications written")
	}
}

// waitingResult is cycle i's result explaining every pending job in rank
// order with the reason and detail status gives its index.
func waitingResult(pending []string, i int, status func(k int) (vocab.WaitReason, string)) *scheduling.Result {
	res := &scheduling.Result{}
	for k, id := range pending {
		reason, detail := status(k)
		res.Waiting = append(res.Waiting, scheduling.WaitStatus{JobID: id, Reason: reason,
			Detail: detail, Rank: k + 1, Priority: scheduling.Priority{Score: float64(10000 + i)}})
	}
	return res
}

// seedLargeSnapshot writes the benchmark state and returns the pending job IDs.
func seedLargeSnapshot(b *testing.B, s *store.Store) []string {
	b.Helper()
	ctx := context.Background()
	pool := testPool("p", 1000, 8)
	if err := s.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		b.Fatal(err)
	}
	if err := s.UpsertQueues(ctx, []scheduling.Queue{{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1}}); err != nil {
		b.Fatal(err)
	}
	var quotas []scheduling.Quota
	for p := range 20 {
		quotas = append(quotas, scheduling.Quota{Project: fmt.Sprintf("proj-%02d", p), Pool: "p", NominalMilli: 400000})
	}
	if err := s.UpsertQuotas(ctx, quotas); err != nil {
		b.Fatal(err)
	}
	mkJobs := func(n int, offset int) []string {
		njs := make([]*store.NewJob, n)
		for i := range njs {
			k := i + offset
			njs[i] = &store.NewJob{Project: fmt.Sprintf("proj-%02d", k%20), Queue: "train", Tier: vocab.TierStandard,
				SubmitTime: t0.Add(time.Duration(k) * time.Second),
				Request: scheduling.ResourceRequest{GPUs: 1 + k%8, Pool: "p", GPUModels: []string{"A100-SXM4-80GB"},
					GPUMemoryMiB: 40960, CPUMilli: 8000, MemoryMiB: 65536, Topology: scheduling.TopologySameNode,
					Labels: map[string]string{"storage": "nvme"}},
				Prerequisites: []scheduling.Prerequisite{{Name: "image", Ready: true}, {Name: "dataset", Ready: k%7 != 0, Message: "syncing"}},
				Recovery:      scheduling.RecoveryEvidence{Checkpointable: k%2 == 0, CheckpointIntervalSeconds: 900, VerifiedResumes: k % 3},
				Command:       []string{"python", "train.py"}, RunSeconds: 3600,
			}
		}
		ids, err := s.CreateJobs(ctx, njs)
		if err != nil {
			b.Fatal(err)
		}
		return ids
	}
	history := mkJobs(10000, 0)
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'succeeded' WHERE id = ANY($1)`, history); err != nil {
		b.Fatal(err)
	}
	running := mkJobs(8000, 10000)
	res := &scheduling.Result{}
	for i, id := range running {
		n := pool.Nodes[i/8]
		res.Placements = append(res.Placements, place(id, "p", n.Name, 1000, n.GPUs[i%8].UUID))
	}
	out, err := s.ApplyCycle(ctx, "seed-place", res, t0)
	if err != nil || len(out.Placed) != 8000 {
		b.Fatalf("seed placements: %d placed, err %v", len(out.Placed), err)
	}
	// Start a run on every allocation in one statement; MarkRunning 8,000
	// times would only slow the setup down.
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO runs (id, job_id, run_number, allocation_id, started_at)
			SELECT 'r-' || id, job_id, 1, id, granted_at FROM allocations;
		UPDATE allocations SET run_id = 'r-' || id;
		UPDATE jobs SET state = 'running' WHERE state = 'placed'`); err != nil {
		b.Fatal(err)
	}
	pending := mkJobs(10000, 18000)
	res = &scheduling.Result{}
	for i, id := range pending {
		res.Waiting = append(res.Waiting, scheduling.WaitStatus{JobID: id, Reason: vocab.ReasonCapacityBusy,
			Detail: "0 of 8 free", ReEvaluate: "when a GPU is released", Rank: i + 1,
			Priority: scheduling.Priority{Score: 10000, TierBase: 10000, SubmitTime: t0}})
	}
	if _, err := s.ApplyCycle(ctx, "seed-wait", res, t0); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return pending
}

// processCPU returns the user+system CPU time of process pid (0: this one)
// from /proc/<pid>/stat, whose fields 14 and 15 count clock ticks (100 Hz on
// Linux, the USER_HZ every architecture exposes there).
func processCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("read CPU time: %v", err)
	}
	// The command name (field 2) may contain spaces; fields resume after ")".
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("parse %s: %v %v", path, err1, err2)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
