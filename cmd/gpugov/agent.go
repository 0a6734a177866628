package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv"
	"github.com/gpugov/gpugov/internal/inventory/static"
)

// agentOptions are the flags of `gpugov agent`.
type agentOptions struct {
	node          string        // node name; the host name by default
	nodeSet       bool          // --node was given (selects one node of a static file)
	pool          string        // pool of this node (NVML); a filter for a static file
	refresh       time.Duration // time between inventory refreshes
	inventoryFile string        // static inventory file used instead of NVML
	probe         bool          // print the inventory as JSON and exit
	logLevel      string        // slog level name
}

func init() {
	opts := &agentOptions{}
	host, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the GPU node agent: report this node's GPU inventory and utilisation to gpugov",
		Long: `agent reads this node's GPUs through NVML (UUID, model, memory, utilisation,
NVLink domains, health, processes) every --refresh and reports the inventory and
utilisation samples. Where NVML is absent, --inventory-file serves a static YAML
inventory instead (format: internal/inventory/static; example:
internal/inventory/static/testdata/inventory.yaml); all its nodes are served
unless --node or --pool select some.

--probe reads the inventory once and prints it as a JSON array of node
inventories, then exits; without NVML and without --inventory-file it fails with
an explanation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.nodeSet = cmd.Flags().Changed("node")
			return opts.run(cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.node, "node", host, "name of this node")
	f.StringVar(&opts.pool, "pool", "", "pool of this node (required with NVML unless --probe); with --inventory-file, serve only this pool")
	f.DurationVar(&opts.refresh, "refresh", 30*time.Second, "time between inventory refreshes")
	f.StringVar(&opts.inventoryFile, "inventory-file", "", "static YAML inventory to serve instead of reading NVML")
	f.BoolVar(&opts.probe, "probe", false, "print the inventory as JSON and exit")
	f.StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	rootCmd.AddCommand(cmd)
}

// run validates the flags, picks the inventory source and probes or runs the agent.
func (o *agentOptions) run(cmd *cobra.Command) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return newUsageError("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	if err := o.validate(); err != nil {
		return err
	}
	src, err := o.source(logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.probe {
		return inventory.Probe(ctx, src, cmd.OutOrStdout())
	}
	return runAgent(ctx, o, src, inventory.LogReporter{Logger: logger}, logger)
}

// validate checks the flags that do not depend on the machine.
func (o *agentOptions) validate() error {
	if o.refresh <= 0 {
		return newUsageError("--refresh must be > 0, got %s", o.refresh)
	}
	if o.inventoryFile != "" {
		return nil
	}
	if o.node == "" {
		return newUsageError("--node is required: the host name could not be read")
	}
	if o.pool == "" && !o.probe {
		return newUsageError("--pool is required: name the pool this node belongs to")
	}
	return nil
}

// source returns the static file source, after checking the file (a bad file is
// bad input), or the NVML collector for this node.
func (o *agentOptions) source(logger *slog.Logger) (inventory.Source, error) {
	if o.inventoryFile != "" {
		if _, err := static.Load(o.inventoryFile); err != nil {
			return nil, usageError{err}
		}
		src := static.Source{Path: o.inventoryFile, Pool: o.pool}
		if o.nodeSet {
			src.Node = o.node
		}
		return src, nil
	}
	c := nvmlinv.New(o.node, o.pool)
	cpuMilli, memoryMiB, err := inventory.HostResources()
	if err != nil {
		// The scheduler treats 0 as "not tracked", so the GPUs stay usable.
		logger.Warn("host CPU and memory not reported", "err", err)
	}
	c.CPUMilli, c.MemoryMiB = cpuMilli, memoryMiB
	return c, nil
}

// runAgent runs the node agent until ctx is done: the inventory refresh loop
// reporting to rep. It returns the first collection's error (e.g. no NVML) and
// nil on shutdown. The Temporal worker that executes runs on this node is added
// here next to the loop.
func runAgent(ctx context.Context, o *agentOptions, src inventory.Source, rep inventory.Reporter, logger *slog.Logger) error {
	logger.Info("agent starting", "inventory", inventorySourceName(o), "refresh", o.refresh)
	a := &inventory.Agent{Source: src, Reporter: rep, Refresh: o.refresh, Logger: logger}
	if err := a.Run(ctx); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	logger.Info("agent stopped")
	return nil
}

// inventorySourceName says where the inventory comes from and for which nodes,
// for the start log line.
func inventorySourceName(o *agentOptions) string {
	if o.inventoryFile == "" {
		return fmt.Sprintf("NVML of node %q in pool %q", o.node, o.pool)
	}
	nodes := "all nodes"
	if o.nodeSet {
		nodes = fmt.Sprintf("node %q", o.node)
	}
	if o.pool != "" {
		nodes += fmt.Sprintf(" of pool %q", o.pool)
	}
	return fmt.Sprintf("static file %s, %s", o.inventoryFile, nodes)
}
