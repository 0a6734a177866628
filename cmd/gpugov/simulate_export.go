package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// The file names of an exported trace in its folder.
const (
	exportNodesFile = "nodes.csv"
	exportPodsFile  = "pods.csv"
)

// exportFromStore is `simulate --from-store`: it reads the jobs the service
// recorded as submitted in [--since, --until) and the stored inventory,
// writes them as an Alibaba v2023 trace (exportNodesFile, exportPodsFile)
// to --out (a temporary folder without it, removed by cleanup) and returns
// where the trace is. Without --policy it also reads the service's active
// policy version (src.active; nil when there is none), which the
// simulation then runs under. Bad flags are usage errors; an unreachable
// database is an error (exit 1).
func exportFromStore(cmd *cobra.Command, f simulateFlags) (src traceSource, cleanup func(), err error) {
	cleanup = func() {}
	since, err := time.Parse(time.RFC3339, f.since)
	if err != nil {
		return src, cleanup, newUsageError("simulate: --since %q: want an RFC 3339 time (2026-11-23T00:00:00Z)", f.since)
	}
	until, err := time.Parse(time.RFC3339, f.until)
	if err != nil {
		return src, cleanup, newUsageError("simulate: --until %q: want an RFC 3339 time (2026-11-30T00:00:00Z)", f.until)
	}
	ctx := cmd.Context()
	url := cmp.Or(f.databaseURL, os.Getenv("DATABASE_URL"), defaultDatabaseURL)
	st, err := store.Open(ctx, url)
	if err != nil {
		return src, cleanup, fmt.Errorf("simulate --from-store: %w", err)
	}
	defer st.Close()
	now := time.Now().UTC()
	var active *policy.Policy
	var activeHash string
	if f.policy == "" {
		if active, activeHash, err = activePolicy(ctx, st); err != nil {
			return src, cleanup, err
		}
	}
	pools, err := st.GetInventory(ctx)
	if err != nil {
		return src, cleanup, fmt.Errorf("simulate --from-store: %w", err)
	}
	nodes, mixed, err := exportNodes(pools, f.pool)
	if err != nil {
		return src, cleanup, err
	}
	jobs, err := st.TraceJobs(ctx, since, until, now, f.pool)
	var ve *store.ValidationError
	if errors.As(err, &ve) {
		return src, cleanup, newUsageError("simulate: --%s: %s", ve.Field, ve.Message)
	}
	if err != nil {
		return src, cleanup, fmt.Errorf("simulate --from-store: %w", err)
	}
	pods := exportPods(jobs, since, now)

	dir := f.out
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpugov-trace-"); err != nil {
			return src, cleanup, err
		}
		cleanup = func() { os.RemoveAll(dir) }
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return src, cleanup, newUsageError("simulate: --out %s: %w", dir, err)
	}
	src = traceSource{nodes: filepath.Join(dir, exportNodesFile), pods: filepath.Join(dir, exportPodsFile), pool: f.pool,
		models: unknownModels(nodes, pods), origin: since, active: active, activeHash: activeHash}
	if err := writeTraceFile(src.nodes, func(w *os.File) error { return alibaba.WriteNodes(w, nodes) }); err != nil {
		cleanup()
		return src, func() {}, err
	}
	if err := writeTraceFile(src.pods, func(w *os.File) error { return alibaba.WritePods(w, pods) }); err != nil {
		cleanup()
		return src, func() {}, err
	}
	progress := cmd.ErrOrStderr()
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	fmt.Fprintf(progress, "simulate: exported %s (%s) of %s and %s submitted in [%s, %s) to %s and %s\n",
		plural.Count(len(nodes), "node", "nodes"), plural.Count(gpus, "GPU", "GPUs"), cmp.Or(f.pool, "every pool"), plural.Count(len(pods), "job", "jobs"), since.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339),
		src.nodes, src.pods)
	if mixed > 0 {
		fmt.Fprintf(progress, "simulate: %s GPUs of more than one model; each is exported with its most common model\n",
			plural.Count(mixed, "node holds", "nodes hold"))
	}
	if f.out != "" {
		reuse := fmt.Sprintf("gpugov simulate --nodes %s --pods %s", src.nodes, src.pods)
		if len(src.models) > 0 {
			reuse += " --models " + strings.Join(src.models, ",")
		}
		fmt.Fprintf(progress, "simulate: reuse the trace with: %s\n", reuse)
	}
	return src, cleanup, nil
}

// activePolicy reads the service's active policy version from st (what
// --from-store simulates without --policy): the decoded version
// (policy.FromCanonical: the default simulation section) and its hash, or
// nil and "" when the store has none active. A body that does not decode to
// its hash is an error.
func activePolicy(ctx context.Context, st *store.Store) (*policy.Policy, string, error) {
	v, err := st.ActivePolicyVersion(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("simulate --from-store: active policy version: %w", err)
	}
	p, err := policy.FromCanonical(v.Body)
	if err != nil {
		return nil, "", fmt.Errorf("simulate --from-store: active policy version %s: %w", v.Hash, err)
	}
	if h := p.Hash(); h != v.Hash {
		return nil, "", fmt.Errorf("simulate --from-store: active policy version %s decodes to %s", v.Hash, h)
	}
	return p, v.Hash, nil
}

// writeTraceFile creates path and writes it with write.
func writeTraceFile(path string, write func(*os.File) error) error {
	w, err := os.Create(path)
	if err != nil {
		return newUsageError("simulate: --out: %w", err)
	}
	if err := write(w); err != nil {
		w.Close()
		return fmt.Errorf("simulate: write %s: %w", path, err)
	}
	return w.Close()
}

// exportNodes turns the stored inventory (only pool's nodes when pool is
// not "") into node rows: the node's name, CPU and memory, its GPUs (every
// GPU stored, healthy or not: the inventory as it is now, not as it was in
// the window) and their model — the most common one on the node (the first
// by name on a tie) when it holds several, counted in mixed. An unknown
// pool is a usage error.
func exportNodes(pools []scheduling.Pool, pool string) (rows []alibaba.NodeRow, mixed int, err error) {
	found := pool == ""
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
		if pool != "" && p.Name != pool {
			continue
		}
		found = true
		for _, n := range p.Nodes {
			row := alibaba.NodeRow{SN: n.Name, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, GPUs: len(n.GPUs)}
			count := map[string]int{}
			for _, g := range n.GPUs {
				count[g.Model]++
			}
			for m, c := range count {
				if c > count[row.Model] || c == count[row.Model] && m < row.Model {
					row.Model = m
				}
			}
			if len(count) > 1 {
				mixed++
			}
			rows = append(rows, row)
		}
	}
	if !found {
		return nil, 0, newUsageError("simulate: --pool %q: no such pool in the inventory (pools: %s)", pool, strings.Join(names, ", "))
	}
	return rows, mixed, nil
}

// exportPods turns recorded jobs into pod rows, trace second 0 being since
// (times rounded down to the second):
//
//   - qos is alibaba.QoSOf(tier), the inverse of the reader's TierOf;
//     num_gpu, gpu_milli (1000 for whole GPUs), gpu_spec, cpu_milli and
//     memory_mib are the request's (its GPU memory, queue and project have
//     no column: the simulator routes jobs to the queue named after their
//     tier and hashes them into projects);
//   - creation_time is the submit time;
//   - a job that ran: scheduled_time is its first start and deletion_time
//     scheduled_time + the seconds its runs held GPUs (the end of its only
//     run for a job that ran once; a preempted job's requeue waits are left
//     out, since the simulator runs a pod for deletion − scheduled), phase
//     Succeeded, Failed (failed or cancelled) or Running (still going, or
//     requeued, at now);
//   - a job that never ran is Pending, deleted at its end (cancelled or
//     failed before a start) or at now while it still waits: the simulator
//     deletes it then if it is still waiting.
func exportPods(jobs []store.TraceJob, since, now time.Time) []alibaba.PodRow {
	sec := func(t time.Time) int64 { return int64(math.Floor(t.Sub(since).Seconds())) }
	pods := make([]alibaba.PodRow, 0, len(jobs))
	for _, j := range jobs {
		p := alibaba.PodRow{Name: j.ID, CPUMilli: j.CPUMilli, MemoryMiB: j.MemoryMiB, NumGPU: j.GPUs,
			GPUSpec: slices.Clone(j.GPUModels), QoS: alibaba.QoSOf(j.Tier), CreationTime: max(0, sec(j.SubmitTime))}
		if len(p.GPUSpec) == 0 {
			p.GPUSpec = nil
		}
		switch {
		case j.GPUs == 0:
		case j.GPUs == 1 && j.GPUMilli > 0 && j.GPUMilli < scheduling.MilliPerGPU:
			p.GPUMilli = j.GPUMilli
		default:
			p.GPUMilli = scheduling.MilliPerGPU
		}
		end := now
		if j.EndedAt != nil {
			end = *j.EndedAt
		}
		if j.StartedAt == nil {
			p.Phase, p.DeletionTime = alibaba.PhasePending, max(p.CreationTime, sec(end))
			pods = append(pods, p)
			continue
		}
		p.Scheduled, p.ScheduledTime = true, max(p.CreationTime, sec(*j.StartedAt))
		p.DeletionTime = p.ScheduledTime + int64(math.Ceil(j.RunSeconds))
		switch j.State {
		case vocab.JobSucceeded:
			p.Phase = alibaba.PhaseSucceeded
		case vocab.JobFailed, vocab.JobCancelled:
			p.Phase = alibaba.PhaseFailed
		default:
			p.Phase = alibaba.PhaseRunning
		}
		pods = append(pods, p)
	}
	return pods
}

// unknownModels lists, sorted, the GPU models of the rows outside
// alibaba.KnownModels: those the reader must be told of (ReadOptions.Models).
func unknownModels(nodes []alibaba.NodeRow, pods []alibaba.PodRow) []string {
	var out []string
	add := func(m string) {
		if m != "" && !slices.Contains(alibaba.KnownModels, m) && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	for _, n := range nodes {
		add(n.Model)
	}
	for _, p := range pods {
		for _, m := range p.GPUSpec {
			add(m)
		}
	}
	slices.Sort(out)
	return out
}
