package main

import (
	"github.com/spf13/pflag"

	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/trace/philly"
)

// DefaultPhillyDir is the Philly trace folder `--trace philly` reads when
// --philly-dir is not given: the shared copy, relative to the repository
// root.
const DefaultPhillyDir = "../shared/traces/philly-2017"

// traceFlags choose the trace format of `gpugov simulate` and `gpugov
// replay` and, for Philly, its files and sizing.
type traceFlags struct {
	format           string // alibaba (default) or philly
	phillyDir        string // folder of philly.csv, philly_vc.csv and multigpu_pass_jobs_with_vc.csv
	phillyVCs        string // VC sizes file instead of the folder's philly_vc.csv
	phillyGPUs       int    // GPUs per node
	phillyNodes      int    // nodes in the pool; 0: the VCs' nodes summed
	phillyNoRecorded bool   // read no recorded starts
}

// addTraceFlags registers the trace flags on fl.
func addTraceFlags(fl *pflag.FlagSet, f *traceFlags) {
	fl.StringVar(&f.format, "trace", alibaba.Format, "trace format: alibaba (--nodes/--pods) or philly (--philly-dir)")
	fl.StringVar(&f.phillyDir, "philly-dir", DefaultPhillyDir, "with --trace philly: folder of philly.csv, philly_vc.csv and multigpu_pass_jobs_with_vc.csv")
	fl.StringVar(&f.phillyVCs, "philly-vcs", "", "with --trace philly: VC sizes (vc,node num) instead of the folder's philly_vc.csv")
	fl.IntVar(&f.phillyGPUs, "philly-gpus-per-node", philly.DefaultGPUsPerNode, "with --trace philly: GPUs per node (each VC's quota is its nodes × this)")
	fl.IntVar(&f.phillyNodes, "philly-nodes", 0, "with --trace philly: nodes in the pool (default: the VCs' nodes summed, 352)")
	fl.BoolVar(&f.phillyNoRecorded, "philly-no-recorded", false, "with --trace philly: read no recorded starts (no fidelity table)")
}

// checkTraceFlags refuses a Philly flag without --trace philly, an unknown
// format, and the Alibaba-only flags named in alibabaOnly with Philly
// (usage errors).
func checkTraceFlags(fl *pflag.FlagSet, f traceFlags, cmd string, alibabaOnly ...string) error {
	switch f.format {
	case alibaba.Format:
		for _, name := range []string{"philly-dir", "philly-vcs", "philly-gpus-per-node", "philly-nodes", "philly-no-recorded"} {
			if fl.Changed(name) {
				return newUsageError("%s: --%s goes with --trace philly", cmd, name)
			}
		}
	case philly.Format:
		for _, name := range alibabaOnly {
			if fl.Changed(name) {
				return newUsageError("%s: --%s goes with --trace alibaba, not --trace philly", cmd, name)
			}
		}
	default:
		return newUsageError("%s: --trace %q: want alibaba or philly", cmd, f.format)
	}
	return nil
}

// readPhilly reads the Philly trace the flags name (usage errors naming the
// file and line, or the flag).
func readPhilly(f traceFlags, skipInvalid bool) (*philly.Source, error) {
	files := philly.FilesIn(f.phillyDir)
	if f.phillyVCs != "" {
		files.VCs = f.phillyVCs
	}
	if f.phillyNoRecorded {
		files.Recorded = ""
	}
	if f.phillyGPUs < 1 {
		return nil, newUsageError("--philly-gpus-per-node %d: want at least 1", f.phillyGPUs)
	}
	if f.phillyNodes < 0 {
		return nil, newUsageError("--philly-nodes %d is negative", f.phillyNodes)
	}
	src, err := philly.Read(files, philly.Options{GPUsPerNode: f.phillyGPUs, Nodes: f.phillyNodes, SkipInvalid: skipInvalid})
	if err != nil {
		return nil, newUsageError("%w", err)
	}
	return src, nil
}

// phillyInput reads the Philly trace as the simulation's input.
func phillyInput(f traceFlags, skipInvalid bool) (simulation.Input, error) {
	src, err := readPhilly(f, skipInvalid)
	if err != nil {
		return simulation.Input{}, err
	}
	return simulation.Input{Source: src}, nil
}
