package main

import (
	"cmp"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
)

// simulateFlags are the options of `gpugov simulate`.
type simulateFlags struct {
	nodes, pods, policy, format string
	skipInvalid                 bool
	seed                        uint64
}

func newSimulateCmd() *cobra.Command {
	var f simulateFlags
	cmd := &cobra.Command{
		Use:   "simulate --nodes NODES.csv --pods PODS.csv [--policy FILE] [--format text|json] [--skip-invalid] [--seed N]",
		Short: "Replay an Alibaba GPU trace through the scheduler and report the queue service it would give",
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

Malformed input stops the command with "file:line: what is wrong" and exit code 2;
--skip-invalid skips and counts bad pod rows instead.`,
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
	return cmd
}

func init() { rootCmd.AddCommand(newSimulateCmd()) }

// runSimulate validates the flags and inputs (usage errors, exit 2), runs the
// simulation and writes the report to stdout.
func runSimulate(cmd *cobra.Command, f simulateFlags) error {
	switch {
	case f.nodes == "":
		return newUsageError("simulate: --nodes is required")
	case f.pods == "":
		return newUsageError("simulate: --pods is required")
	case f.format != "text" && f.format != "json":
		return newUsageError("simulate: --format %q: want text or json", f.format)
	}
	pol := policy.Default()
	if f.policy != "" {
		var err error
		if pol, err = policy.Load(f.policy); err != nil {
			return newUsageError("%w", err)
		}
	}
	cfg, err := simulation.FromPolicy(pol)
	if err != nil {
		return newUsageError("simulate: policy %s: %w", cmp.Or(f.policy, "(default)"), err)
	}
	if cmd.Flags().Changed("seed") {
		cfg.Seed = f.seed
	}
	nodes, err := alibaba.ReadNodes(f.nodes)
	if err != nil {
		return newUsageError("%w", err)
	}
	pods, skipped, err := alibaba.ReadPods(f.pods, alibaba.ReadOptions{SkipInvalid: f.skipInvalid})
	if err != nil {
		return newUsageError("%w", err)
	}
	// A batch run: trade heap for less GC work (see simulation.BatchGCPercent).
	defer debug.SetGCPercent(debug.SetGCPercent(simulation.BatchGCPercent))
	report, err := simulation.Run(simulation.Input{Nodes: nodes, Pods: pods, Skipped: skipped}, cfg, cmd.ErrOrStderr())
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if f.format == "json" {
		return report.WriteJSON(cmd.OutOrStdout())
	}
	return report.WriteText(cmd.OutOrStdout())
}
