package main

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/trace"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/trace/philly"
	"github.com/gpugov/gpugov/replay"
)

// defaultTraceDir is where the trace lies relative to the repository root
// (docs/design.md §9); GPUGOV_TRACE_DIR overrides it.
const defaultTraceDir = "../shared/traces/alibaba-gpu-v2023"

// replayFlags are the flags of `gpugov replay`.
type replayFlags struct {
	nodes, pods   string
	from, to      string
	speed         float64
	maxPods       int
	wait          time.Duration
	pool          string
	projects      int
	recoveryProb  float64
	recoverySeed  uint64
	maxRunSeconds float64
	concurrency   int
	format        string
	poolGPUs      int
	writeNodes    string
	temporalUI    string
	trace         traceFlags // --trace philly and its files (simulate_trace.go)
}

func init() {
	f := &replayFlags{}
	traceDir := cmp.Or(os.Getenv("GPUGOV_TRACE_DIR"), defaultTraceDir)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay a slice of the Alibaba GPU trace through a running gpugov API and report the queues",
		Long: `replay submits the GPU pods of --pods created in [--from, --to) through the API,
each at (creation_time − from) / --speed after the start, with run_seconds the
trace's run time, the pod name as Idempotency-Key (replaying the slice again
creates no job twice), the queue named after its tier (LS production,
Guaranteed key-project, Burstable standard, BE experiment) and a synthetic
project. Pods the trace never scheduled are cancelled at their deletion time.
Recovery evidence is not in the trace: it is drawn by a seeded rule (printed).

Progress goes to stderr every 5 s. When every pod is submitted and the jobs
have settled (each ended, or waiting with a reason and unchanged) or --wait has
passed, it prints the queue report per tier: jobs, P50/P95/P99/max wait next to
the trace's own waits scaled by the speed, and the current wait reasons.

The serving side must run its simulated executor at the same speed
(serve --sim-speed, default 600 like --speed). The token must be an operator's
or an admin's (dev token: dev-admin). --from and --to take trace seconds or a
duration from the trace start (3548h); the default slice is the busiest day of
openb_pod_list_default.csv (732 GPU pods). --nodes, when given, is read and the
trace cluster's size printed in the header.

--pool-gpus N (with --nodes) replays on a contended pool: N GPUs cut from the
node list so that every pod of the slice fits one of its nodes, then the
list's nodes in order (replay.SizePool); the header states the nodes and the
slice's peak demand. --write-nodes FILE writes that node list and exits, for
gpugov inventory import FILE before serve starts; the replay itself checks
that the API's pool holds exactly those nodes. Without --pool-gpus the pool is
whatever the API has (make run's full-cluster run: the whole node list).
The report ends with what governance did, from the service's records: aging
credits, waits behind reservations, preemptions with their effective run loss
and the Temporal UI query of their workflows (--temporal-ui), and the
starvation signals or why none fired.

--trace philly replays the Philly trace of --philly-dir instead (projects are
its virtual clusters, every job a standard-tier job; jobs above one node's GPUs
ask for whole nodes, topology whole-nodes); without --from/--to its slice is the
24 hours with the most submissions. The serving side's pool (--pool) must hold
the nodes and the VC quotas it is meant to model.`,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	fl := cmd.Flags()
	fl.StringVar(&f.nodes, "nodes", "", "Alibaba node list (optional: compared with the API's pool)")
	fl.StringVar(&f.pods, "pods", filepath.Join(traceDir, "openb_pod_list_default.csv"), "Alibaba pod list")
	fl.StringVar(&f.from, "from", fmt.Sprint(replay.DefaultFrom), "start of the slice: trace seconds or a duration such as 3548h")
	fl.StringVar(&f.to, "to", fmt.Sprint(replay.DefaultTo), "end of the slice (exclusive)")
	fl.Float64Var(&f.speed, "speed", replay.DefaultSpeed, "trace seconds per real second (match serve --sim-speed)")
	fl.IntVar(&f.maxPods, "max-pods", 0, "replay at most this many pods of the slice (0: all)")
	fl.DurationVar(&f.wait, "wait", replay.DefaultWait, "after the last submission, how long to wait for the jobs to settle")
	fl.StringVar(&f.pool, "pool", alibaba.DefaultPoolName, "pool the jobs ask for")
	fl.IntVar(&f.projects, "projects", alibaba.DefaultProjects, "synthetic projects the pods are spread over")
	fl.Float64Var(&f.recoveryProb, "recovery-probability", replay.DefaultRecovery().Probability, "probability that a standard or experiment job is checkpointable")
	fl.Uint64Var(&f.recoverySeed, "recovery-seed", replay.DefaultRecovery().Seed, "seed of the recovery-evidence draw")
	fl.Float64Var(&f.maxRunSeconds, "max-run-seconds", 0, "cap on each job's run_seconds (0: the trace's run time)")
	fl.IntVar(&f.concurrency, "concurrency", replay.DefaultConcurrency, "submissions in flight")
	fl.StringVar(&f.format, "format", "table", "report format: table or json")
	fl.IntVar(&f.poolGPUs, "pool-gpus", 0, "replay on a pool of this many GPUs cut from --nodes (0: the API's pool as it is)")
	fl.StringVar(&f.writeNodes, "write-nodes", "", "with --pool-gpus: write the pool's node list (CSV) to this file and exit")
	fl.StringVar(&f.temporalUI, "temporal-ui", "http://127.0.0.1:8233", "Temporal UI base URL the report links the preemption workflows to (\"\": none)")
	addTraceFlags(fl, &f.trace)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := connect(newClient, "")
		if err != nil {
			return err
		}
		return runReplay(cmd, client, f)
	}
	rootCmd.AddCommand(cmd)
}

// runReplay validates the flags, reads the trace, runs the replay and prints
// the report.
func runReplay(cmd *cobra.Command, client *apiclient.Client, f *replayFlags) error {
	if err := checkFormat(f.format, "table", "json"); err != nil {
		return err
	}
	from, err := replay.ParseTraceTime(f.from)
	if err != nil {
		return newUsageError("--from: %w", err)
	}
	to, err := replay.ParseTraceTime(f.to)
	if err != nil {
		return newUsageError("--to: %w", err)
	}
	switch {
	case to <= from:
		return newUsageError("--to (%d) must be after --from (%d)", to, from)
	case !(f.speed > 0):
		return newUsageError("--speed must be > 0, got %g", f.speed)
	case f.maxPods < 0 || f.wait < 0 || f.maxRunSeconds < 0:
		return newUsageError("--max-pods, --wait and --max-run-seconds must not be negative")
	case !(f.recoveryProb >= 0 && f.recoveryProb <= 1):
		return newUsageError("--recovery-probability must be in 0..1, got %g", f.recoveryProb)
	case f.poolGPUs < 0:
		return newUsageError("--pool-gpus must not be negative, got %d", f.poolGPUs)
	case f.poolGPUs > 0 && f.nodes == "":
		return newUsageError("--pool-gpus needs --nodes, the node list the pool is cut from")
	case f.writeNodes != "" && f.poolGPUs == 0:
		return newUsageError("--write-nodes needs --pool-gpus")
	}
	if err := checkTraceFlags(cmd.Flags(), f.trace, "replay", "pods", "nodes", "projects"); err != nil {
		return err
	}
	rec := replay.DefaultRecovery()
	rec.Probability, rec.Seed = f.recoveryProb, f.recoverySeed
	if f.trace.format == philly.Format {
		return runReplayPhilly(cmd, client, f, rec)
	}
	pods, _, err := alibaba.ReadPods(f.pods, alibaba.ReadOptions{})
	if err != nil {
		return usageError{err}
	}
	var nodes []alibaba.NodeRow
	clusterLine := ""
	if f.nodes != "" {
		if nodes, err = alibaba.ReadNodes(f.nodes); err != nil {
			return usageError{err}
		}
		clusterLine = describeTraceCluster(nodes)
	}
	selected := replay.Select(pods, from, to, f.maxPods)
	if len(selected) == 0 {
		return newUsageError("no GPU pod of %s is created in [%d, %d)", f.pods, from, to)
	}
	var sizing *replay.Sizing
	if f.poolGPUs > 0 {
		sz, err := replay.SizePool(nodes, selected, f.poolGPUs)
		if err != nil {
			return newUsageError("--pool-gpus: %w", err)
		}
		sizing = &sz
		clusterLine += fmt.Sprintf("Contended pool %s: %s.\n", f.pool, sz)
		if f.writeNodes != "" {
			return writePoolNodes(cmd, f.writeNodes, sz)
		}
	}
	subs, err := replay.Build(selected, replay.BuildOptions{From: from, Speed: f.speed, Pool: f.pool,
		Projects: f.projects, Recovery: rec, MaxRunSeconds: f.maxRunSeconds})
	if err != nil {
		return newUsageError("%w", err)
	}
	header := fmt.Sprintf("Trace slice: %s, trace seconds [%d, %d): %d GPU pods, submitted over %s.\n",
		filepath.Base(f.pods), from, to, len(subs), subs[len(subs)-1].SubmitAt.Round(time.Second))
	header += clusterLine
	peak := replay.PeakDemand(subs)
	header += fmt.Sprintf("Peak demand: %.1f GPUs at once were every pod started on arrival for its run time", float64(peak)/1000)
	if f.maxRunSeconds > 0 {
		header += fmt.Sprintf(" (runs capped at %g s by --max-run-seconds)", f.maxRunSeconds)
	}
	header += ".\n"
	header += "Recovery evidence is not in the trace; drawn by rule: " + rec.String() + ".\n"
	fmt.Fprintf(cmd.ErrOrStderr(), "replay: %d GPU pods of %s, submitted over %s; progress every %s\n",
		len(subs), filepath.Base(f.pods), subs[len(subs)-1].SubmitAt.Round(time.Second), replay.DefaultProgressInterval)
	if sizing != nil {
		if err := checkPoolNodes(cmd, client, f.pool, *sizing); err != nil {
			return err
		}
	}
	return runReplaySubs(cmd, client, f, subs, header)
}

// runReplayPhilly replays a slice of the Philly trace (--trace philly).
func runReplayPhilly(cmd *cobra.Command, client *apiclient.Client, f *replayFlags, rec replay.Recovery) error {
	src, err := readPhilly(f.trace, false)
	if err != nil {
		return err
	}
	tr, err := src.Trace(trace.Options{Pool: f.pool, Projects: 1})
	if err != nil {
		return newUsageError("%w", err)
	}
	from, _ := replay.ParseTraceTime(f.from)
	to, _ := replay.ParseTraceTime(f.to)
	if !cmd.Flags().Changed("from") && !cmd.Flags().Changed("to") {
		from = replay.BusiestWindow(tr.Jobs, 86400)
		to = from + 86400
	}
	selected := replay.SelectJobs(tr.Jobs, from, to, f.maxPods)
	if len(selected) == 0 {
		return newUsageError("no Philly job of %s is submitted in [%d, %d)", src.Files.Jobs, from, to)
	}
	subs, err := replay.BuildJobs(selected, replay.BuildOptions{From: from, Speed: f.speed, Recovery: rec, MaxRunSeconds: f.maxRunSeconds})
	if err != nil {
		return newUsageError("%w", err)
	}
	last := subs[len(subs)-1].SubmitAt.Round(time.Second)
	header := fmt.Sprintf("Trace slice: Philly %s, trace seconds [%d, %d) (second 0 is %s, local time read as UTC): %d jobs, submitted over %s.\n",
		filepath.Base(src.Files.Jobs), from, to, tr.Epoch.Format(philly.TimeLayout), len(subs), last)
	header += fmt.Sprintf("Trace cluster: %d nodes × %d GPUs; VC quotas are the service's own (the trace's: nodes in %s × %d GPUs).\n",
		src.Nodes, src.GPUsPerNode, filepath.Base(src.Files.VCs), src.GPUsPerNode)
	header += "Recovery evidence is not in the trace; drawn by rule: " + rec.String() + ".\n"
	fmt.Fprintf(cmd.ErrOrStderr(), "replay: %d Philly jobs, submitted over %s; progress every %s\n", len(subs), last, replay.DefaultProgressInterval)
	return runReplaySubs(cmd, client, f, subs, header)
}

// runReplaySubs runs the replay of subs and prints its report under header.
func runReplaySubs(cmd *cobra.Command, client *apiclient.Client, f *replayFlags, subs []replay.Submission, header string) error {
	res, err := replay.Run(cmd.Context(), replay.Config{Client: client, Submissions: subs, Speed: f.speed, Pool: f.pool,
		Wait: f.wait, Concurrency: f.concurrency, Progress: cmd.ErrOrStderr(), TemporalUI: f.temporalUI})
	if err != nil {
		return apiFailure(err)
	}
	if f.format == "json" {
		return printJSON(cmd.OutOrStdout(), res)
	}
	return res.Render(cmd.OutOrStdout(), "\n"+header)
}

// describeTraceCluster summarises the node list for the header.
func describeTraceCluster(nodes []alibaba.NodeRow) string {
	n, gpus := 0, 0
	for _, nd := range nodes {
		if nd.GPUs > 0 {
			n++
			gpus += nd.GPUs
		}
	}
	return fmt.Sprintf("Trace cluster (--nodes): %d GPU nodes, %d GPUs.\n", n, gpus)
}

// writePoolNodes writes the sized pool's node list to path (the Alibaba
// node-list CSV that gpugov inventory import reads) and says so on stderr.
func writePoolNodes(cmd *cobra.Command, path string, sz replay.Sizing) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := alibaba.WriteNodes(out, sz.Nodes); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "replay: wrote the contended pool's node list to %s: %s\n", path, sz)
	return nil
}

// checkPoolNodes fails unless the API's pool holds exactly the sized pool's
// nodes, so that the report's pool is the one the header states.
func checkPoolNodes(cmd *cobra.Command, client *apiclient.Client, pool string, sz replay.Sizing) error {
	inv, err := client.Inventory(cmd.Context())
	if err != nil {
		return apiFailure(err)
	}
	want := map[string]int{}
	for _, n := range sz.Nodes {
		want[n.SN] = n.GPUs
	}
	got := map[string]int{}
	for _, p := range inv.Pools {
		if p.Name == pool {
			for _, n := range p.Nodes {
				got[n.Name] = len(n.GPUs)
			}
		}
	}
	if !maps.Equal(got, want) {
		return newUsageError("--pool-gpus %d: the API's pool %s has %d nodes, not the %d of the contended pool; import them first: "+
			"gpugov replay --nodes NODES --pool-gpus %d --write-nodes FILE, then gpugov inventory import FILE --pool %s",
			sz.GPUs, pool, len(got), len(want), sz.GPUs, pool)
	}
	return nil
}
