package main

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
)

// inflateFlags are the options of `gpugov simulate --inflate`.
type inflateFlags struct {
	ratios string   // --inflate: comma-separated multiples of the cluster's GPUs
	rules  []string // --rules: placement rules compared
}

// inflateHelp is the part of simulate's help about --inflate.
const inflateHelp = `

Packing under workload inflation (--inflate RATIOS, e.g. 0.9,1.0,1.1,1.2,1.3): the
packing study of the FGD paper (Weng et al., "Beware of Fragmentation", USENIX ATC '23)
on the GPU nodes of --nodes and the pods of --pods (an 11-column pod list or a 5-column
packing workload such as openb_pod_list_multigpu50.csv). Every pod of the list arrives
once in an order shuffled with --seed, then clones drawn with replacement keep arriving
until the arrived GPU requests reach each ratio × the cluster's GPUs; nothing departs,
and a pod that does not fit is recorded with its wait reason and dropped. At each ratio
it reports the GPU allocation ratio, GPUs with any allocation, unallocated and
fragmented milli-GPU (expected fragmentation w.r.t. the list's requests) and the
reasons of the dropped pods, plus the first failure, for each placement rule of --rules
(default: the policy's rule, fgd and bestfit; the scheduling core's rules, the policy
file's placement field). Times, QoS and phases of the trace are not read.`

// addInflateFlags registers --inflate and --rules.
func addInflateFlags(fl *pflag.FlagSet, f *inflateFlags) {
	fl.StringVar(&f.ratios, "inflate", "", "packing study: comma-separated multiples of the cluster's GPUs the arrived requests reach (e.g. 0.9,1.0,1.1,1.2,1.3)")
	fl.StringSliceVar(&f.rules, "rules", nil, "with --inflate: placement rules compared ("+ruleNames()+"; default: fragmentation,fgd,bestfit)")
}

// ruleNames lists the placement rules for help texts.
func ruleNames() string {
	names := make([]string, len(scheduling.PlacementRules))
	for i, r := range scheduling.PlacementRules {
		names[i] = string(r)
	}
	return strings.Join(names, "|")
}

// inflateConfig parses --inflate, --rules and --seed (usage errors).
func inflateConfig(cmd *cobra.Command, f simulateFlags) (simulation.InflateConfig, error) {
	var cfg simulation.InflateConfig
	for _, s := range strings.Split(f.inflate.ratios, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return cfg, newUsageError("simulate: --inflate %q: %q is not a number", f.inflate.ratios, s)
		}
		cfg.Ratios = append(cfg.Ratios, r)
	}
	rules := f.inflate.rules
	if len(rules) == 0 {
		rules = []string{string(scheduling.PlacementFragmentation), string(scheduling.PlacementFGD), string(scheduling.PlacementBestFit)}
		if f.policy != "" {
			pol, err := policy.Load(f.policy)
			if err != nil {
				return cfg, newUsageError("%w", err)
			}
			if r := pol.Scheduling().Placement; r != "" && r != scheduling.PlacementFragmentation {
				// The policy's rule first, then the others (once each).
				rest := []string{string(r)}
				for _, o := range rules {
					if o != string(r) {
						rest = append(rest, o)
					}
				}
				rules = rest
			}
		}
	}
	seen := map[scheduling.PlacementRule]bool{}
	for _, s := range rules {
		r, err := scheduling.ParsePlacementRule(s)
		if err != nil {
			return cfg, newUsageError("simulate: --rules: %w", err)
		}
		if seen[r] {
			return cfg, newUsageError("simulate: --rules: %q is listed twice", s)
		}
		seen[r] = true
		cfg.Rules = append(cfg.Rules, r)
	}
	if cmd.Flags().Changed("seed") {
		cfg.Seed = f.seed
	} else {
		cfg.Seed = 42
	}
	if err := cfg.Validate(); err != nil {
		return cfg, newUsageError("simulate: --%w", err)
	}
	return cfg, nil
}

// runInflate is `gpugov simulate --inflate`.
func runInflate(cmd *cobra.Command, f simulateFlags) error {
	switch {
	case f.fromStore || f.vs != "" || f.experiment != "":
		return newUsageError("simulate: --inflate reads --nodes and --pods; it goes with neither --from-store, --vs nor --experiment")
	case f.nodes == "" || f.pods == "":
		return newUsageError("simulate: --inflate needs --nodes and --pods")
	case f.format != "text" && f.format != "json":
		return newUsageError("simulate: --format %q: want text or json", f.format)
	}
	cfg, err := inflateConfig(cmd, f)
	if err != nil {
		return err
	}
	opts := alibaba.ReadOptions{SkipInvalid: f.skipInvalid, Models: f.models}
	nodes, err := alibaba.ReadNodesWith(f.nodes, opts)
	if err != nil {
		return newUsageError("%w", err)
	}
	pods, skipped, err := alibaba.ReadPackingPods(f.pods, opts)
	if err != nil {
		return newUsageError("%w", err)
	}
	if skipped.Count > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "simulate: skipped %d malformed pod rows (first: %s)\n", skipped.Count, skipped.Messages[0])
	}
	defer debug.SetGCPercent(debug.SetGCPercent(simulation.BatchGCPercent))
	start := time.Now()
	rep, err := simulation.Inflate(nodes, pods, cfg, cmd.ErrOrStderr())
	if err != nil {
		return newUsageError("simulate: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "simulate: inflation study of %s took %.1fs\n", plural.Count(len(cfg.Rules), "rule", "rules"), time.Since(start).Seconds())
	if f.format == "json" {
		return rep.WriteJSON(cmd.OutOrStdout())
	}
	return rep.WriteText(cmd.OutOrStdout())
}
