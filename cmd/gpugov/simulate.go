package main

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/trace/philly"
)

// simulateFlags are the options of `gpugov simulate`.
type simulateFlags struct {
	nodes, pods, policy, format string
	skipInvalid                 bool
	seed                        uint64
	models                      []string
	// What-if (simulate_vs.go): the candidate policy and the experiment spec.
	vs, experiment string
	// Export from the store (simulate_export.go).
	fromStore        bool
	since, until     string
	databaseURL, out string
	pool             string
	// The trace format and Philly's files (simulate_trace.go).
	trace   traceFlags
	inflate inflateFlags // the packing study (simulate_inflate.go)
}

func newSimulateCmd() *cobra.Command {
	var f simulateFlags
	cmd := &cobra.Command{
		Use: "simulate (--nodes NODES.csv --pods PODS.csv | --from-store --since T1 --until T2) [--policy FILE] " +
			"[--vs CANDIDATE.yaml [--experiment EXP.yaml]] [--format text|json] [--skip-invalid] [--seed N]",
		Short: "Replay an Alibaba GPU trace (or the service's recorded jobs) through the scheduler; compare two policies on it",
		Long: `simulate replays the pods of an Alibaba GPU cluster trace (v2023 "openb" CSV files)
through gpugov's scheduling cycle on a virtual clock and reports, per tier, the waits
it would give next to the waits recorded in the trace, the time spent per wait reason,
preemptions and their effective run loss, GPU utilisation and starved jobs.

The policy file (format gpugov.policy/v1, internal/policy; example
deploy/gpugov/policy.yaml, the same file serve takes) overrides the defaults of the
scheduling policy, queues, quotas, project weights and the pool's automation stage; its
simulation section sets the pool name, projects, seed, cycle interval, starvation factor
and recovery-evidence rule. The report names the policy hash it ran under (the hash serve
records for the same rules; the simulation section is not part of it), and every rule
the simulation adds to the trace is listed under "assumptions". Progress goes to stderr.

What-if (--vs CANDIDATE.yaml): the trace is read once and simulated twice, under
--policy (the baseline; the default policy without it) and under the candidate, which
takes the baseline's simulation section so that both runs get the same trace
assumptions. The command checks that both runs read the same input (pod counts and a
SHA-256 digest of the rows, printed), measures both over the same window (the whole
simulated span) with the live experiment's code (internal/experiment: Measure on the
queue report's definitions plus the governance metrics the simulator models, Check,
Decide), and prints both runs' summaries, the comparison and the verdict. --experiment
EXP.yaml gives the expected result and rollback conditions (the spec format of
` + "`gpugov experiment create -f`" + `; its candidate is --vs or its candidate.file, not both; its
start, window_s, baseline and check_interval_s apply to live experiments only);
without it a default spec applies: the experiment tier's longest_wait_s decreases by at
least 30 %, rolled back when production's wait_p95_s exceeds 1.2 × the baseline's or
the experiment tier has starving jobs. The rollback conditions are evaluated once, on the
whole window: a finished simulation's records hold the future, so a check at an
instant "during" the window would read it. The one-variable rule is a warning here, not
a refusal.

--from-store exports the jobs the service recorded as submitted in [--since, --until)
(RFC 3339 times) and the stored inventory as a trace in this same format (written to
--out DIR, else a temporary folder, as nodes.csv and pods.csv) and simulates it;
--pool limits the export to one pool's nodes and jobs. Without --policy it simulates
the service's active policy version, read from the same database (the default
policy when none is active; stderr says which); a what-if takes it as the baseline. The trace reader accepts the GPU
models of KnownModels (the Alibaba trace's) and those --models names: an exported
inventory names its GPUs by their NVML product names, which the export prints.

Malformed input stops the command with "file:line: what is wrong" (or the file and
field) and exit code 2; --skip-invalid skips and counts bad pod rows instead.` + inflateHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSimulate(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.nodes, "nodes", "", "node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
	fl.StringVar(&f.pods, "pods", "", "pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time)")
	fl.StringVar(&f.policy, "policy", "", "policy file (gpugov.policy/v1 YAML); defaults apply to every field it leaves out")
	fl.StringVar(&f.format, "format", "text", "output format: text or json")
	fl.BoolVar(&f.skipInvalid, "skip-invalid", false, "skip and count malformed pod rows instead of stopping")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the recovery-evidence draw (overrides the policy file's simulation.seed)")
	fl.StringSliceVar(&f.models, "models", nil, "GPU model names the trace reader accepts besides the Alibaba trace's (an exported inventory's)")
	fl.StringVar(&f.vs, "vs", "", "candidate policy file: simulate the trace under --policy and under it, and compare")
	fl.StringVar(&f.experiment, "experiment", "", "experiment spec (YAML, the format of gpugov experiment create -f) judging --vs; default: see above")
	fl.BoolVar(&f.fromStore, "from-store", false, "export the service's recorded jobs of [--since, --until) and its inventory as the trace")
	fl.StringVar(&f.since, "since", "", "with --from-store: first submit time exported (RFC 3339)")
	fl.StringVar(&f.until, "until", "", "with --from-store: end of the submit times exported, excluded (RFC 3339)")
	fl.StringVar(&f.databaseURL, "database-url", "", "with --from-store: PostgreSQL URL (default $DATABASE_URL, else "+defaultDatabaseURL+")")
	fl.StringVar(&f.out, "out", "", "with --from-store: folder the exported nodes.csv and pods.csv are written to (default: a temporary folder)")
	fl.StringVar(&f.pool, "pool", "", "with --from-store: export only this pool's nodes and jobs, simulated as that pool")
	addTraceFlags(fl, &f.trace)
	addInflateFlags(fl, &f.inflate)
	return cmd
}

func init() { rootCmd.AddCommand(newSimulateCmd()) }

// runSimulate validates the flags and inputs (usage errors, exit 2), runs the
// simulation (or the what-if of --vs) and writes the report to stdout.
func runSimulate(cmd *cobra.Command, f simulateFlags) error {
	if f.inflate.ratios != "" || cmd.Flags().Changed("inflate") {
		return runInflate(cmd, f)
	}
	if cmd.Flags().Changed("rules") {
		return newUsageError("simulate: --rules goes with --inflate")
	}
	if err := checkSimulateFlags(cmd, f); err != nil {
		return err
	}
	pol, label := policy.Default(), "(default policy)"
	if f.policy != "" {
		var err error
		if pol, err = policy.Load(f.policy); err != nil {
			return newUsageError("%w", err)
		}
		label = f.policy
	}
	var in simulation.Input
	var src traceSource
	if f.trace.format == philly.Format {
		var err error
		if in, err = phillyInput(f.trace, f.skipInvalid); err != nil {
			return err
		}
		if f.policy == "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "simulate: policy: the default (deploy/gpugov/philly-fifo.yaml mimics Philly: per-VC quota, FIFO within a VC)")
		}
	} else if f.fromStore {
		var cleanup func()
		var err error
		if src, cleanup, err = exportFromStore(cmd, f); err != nil {
			return err
		}
		defer cleanup()
		if f.policy == "" {
			if src.active != nil {
				pol, label = src.active, "(the store's active policy version "+short(src.activeHash)+")"
				fmt.Fprintf(cmd.ErrOrStderr(), "simulate: policy: the service's active version %s, read from the database (--policy FILE simulates another)\n",
					short(src.activeHash))
			} else {
				fmt.Fprintln(cmd.ErrOrStderr(), "simulate: policy: the default; the store has no active policy version (--policy FILE sets one)")
			}
		}
		if src.pool != "" {
			pol.Simulation.Pool = src.pool
		}
		f.models = append(f.models, src.models...)
	} else {
		src = traceSource{nodes: f.nodes, pods: f.pods}
	}
	var err error
	if f.trace.format == alibaba.Format {
		if in, err = readTrace(src, f); err != nil {
			return err
		}
	}
	if f.vs != "" || f.experiment != "" {
		return runWhatIf(cmd, f, pol, label, in, src)
	}
	cfg, err := simConfig(cmd, f, pol, label)
	if err != nil {
		return err
	}
	// A batch run: trade heap for less GC work (see simulation.BatchGCPercent).
	defer debug.SetGCPercent(debug.SetGCPercent(simulation.BatchGCPercent))
	report, err := simulation.Run(in, cfg, cmd.ErrOrStderr())
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if f.format == "json" {
		return report.WriteJSON(cmd.OutOrStdout())
	}
	return report.WriteText(cmd.OutOrStdout())
}

// checkSimulateFlags refuses combinations of flags that do not go together
// (usage errors).
func checkSimulateFlags(cmd *cobra.Command, f simulateFlags) error {
	if err := checkTraceFlags(cmd.Flags(), f.trace, "simulate", "nodes", "pods", "models", "from-store", "vs", "experiment"); err != nil {
		return err
	}
	switch {
	case f.format != "text" && f.format != "json":
		return newUsageError("simulate: --format %q: want text or json", f.format)
	case f.trace.format == philly.Format:
		return nil
	}
	switch {
	case f.format != "text" && f.format != "json":
		return newUsageError("simulate: --format %q: want text or json", f.format)
	case f.fromStore && (f.nodes != "" || f.pods != ""):
		return newUsageError("simulate: --from-store exports the trace: leave out --nodes and --pods")
	case f.fromStore && f.since == "":
		return newUsageError("simulate: --from-store needs --since")
	case f.fromStore && f.until == "":
		return newUsageError("simulate: --from-store needs --until")
	case !f.fromStore && f.nodes == "":
		return newUsageError("simulate: --nodes is required (or --from-store)")
	case !f.fromStore && f.pods == "":
		return newUsageError("simulate: --pods is required (or --from-store)")
	}
	if !f.fromStore {
		for _, name := range []string{"since", "until", "database-url", "out", "pool"} {
			if cmd.Flags().Changed(name) {
				return newUsageError("simulate: --%s goes with --from-store", name)
			}
		}
	}
	return nil
}

// traceSource is where a simulation's trace is read from: the node and pod
// lists, and, for an export, the pool it was limited to, the GPU models it
// names outside alibaba.KnownModels and origin, the service time of its
// trace second 0 (--since; zero for a trace file). active is, for an
// export without --policy, the service's active policy version (hash
// activeHash), nil when the store has none.
type traceSource struct {
	nodes, pods string
	pool        string
	models      []string
	origin      time.Time
	active      *policy.Policy
	activeHash  string
}

// readTrace reads the node and pod lists (usage errors naming the file and line).
func readTrace(src traceSource, f simulateFlags) (simulation.Input, error) {
	opts := alibaba.ReadOptions{SkipInvalid: f.skipInvalid, Models: f.models}
	nodes, err := alibaba.ReadNodesWith(src.nodes, opts)
	if err != nil {
		return simulation.Input{}, newUsageError("%w", err)
	}
	pods, skipped, err := alibaba.ReadPods(src.pods, opts)
	if err != nil {
		return simulation.Input{}, newUsageError("%w", err)
	}
	return simulation.Input{Nodes: nodes, Pods: pods, Skipped: skipped}, nil
}

// simConfig builds the simulation's configuration from pol (label names it
// in errors), with --seed applied.
func simConfig(cmd *cobra.Command, f simulateFlags, pol *policy.Policy, label string) (simulation.Config, error) {
	cfg, err := simulation.FromPolicy(pol)
	if err != nil {
		return cfg, newUsageError("simulate: policy %s: %w", label, err)
	}
	if cmd.Flags().Changed("seed") {
		cfg.Seed = f.seed
	}
	return cfg, nil
}
