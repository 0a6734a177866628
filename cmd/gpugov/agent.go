package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/executor/process"
	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/httpreport"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv"
	"github.com/gpugov/gpugov/internal/inventory/static"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/workflows"
)

// Executors of `gpugov agent --executor`.
const (
	agentExecutorProcess   = "process"   // runs jobs as local processes (process.ProcessActivity)
	agentExecutorSimulated = "simulated" // lets time pass (executor.SimulatedExecutor), for machines without GPUs
	agentExecutorNone      = "none"      // reports inventory only and runs no jobs
)

const (
	// maxAgentWorkerNodes bounds the nodes one agent polls run queues for: a
	// static file of a whole cluster would otherwise start a worker per node.
	maxAgentWorkerNodes = 64
	// defaultCheckpointRoot is where jobs' checkpoints and run files live on a
	// GPU node unless --checkpoint-root says otherwise.
	defaultCheckpointRoot = "/var/lib/gpugov/runs"
)

// newNVMLCollector returns the NVML collector of node in pool: the real
// library (nvmlinv.New); the probe's tests put a go-nvml mock in its place.
var newNVMLCollector = nvmlinv.New

// agentOptions are the flags of `gpugov agent`.
type agentOptions struct {
	node            string            // node name; the host name by default
	nodeSet         bool              // --node was given (selects one node of a static file)
	pool            string            // pool of this node (NVML); a filter for a static file
	refresh         time.Duration     // time between inventory refreshes
	inventoryFile   string            // static inventory file used instead of NVML
	probe           bool              // print the inventory as JSON and exit
	logLevel        string            // slog level name
	executor        string            // agentExecutorProcess, agentExecutorSimulated or agentExecutorNone
	temporalAddress string            // Temporal frontend host:port
	namespace       string            // Temporal namespace
	apiURL          string            // gpugov API base URL; "" logs reports instead of sending them
	token           string            // bearer token for the API (an agent-role token)
	checkpointRoot  string            // the process executor's directory of job checkpoints and run files
	grace           time.Duration     // SIGTERM → SIGKILL grace period of stopped jobs
	simSpeed        float64           // the simulated executor's seconds of job work per real second
	labelFlags      []string          // --label key=value, as given
	labels          map[string]string // labelFlags parsed by validate: reported with every served node
}

func init() {
	opts := &agentOptions{}
	host, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the GPU node agent: report this node's GPUs to gpugov and run the jobs placed on it",
		Long: `agent reads this node's GPUs through NVML (UUID, model, memory, utilisation,
NVLink domains, health, processes) every --refresh and reports the inventory and
utilisation samples to the gpugov API (--api, --token; without --api it only
logs what it would send). Where NVML is absent, --inventory-file serves a static
YAML inventory instead (format: internal/inventory/static; example:
internal/inventory/static/testdata/inventory.yaml); all its nodes are served
unless --node or --pool select some.

It is also the node's Temporal worker: it polls the task queue node/<name> of
each node it serves and runs the jobs placed there. --executor process (the
default) runs each job's command as a local process with CUDA_VISIBLE_DEVICES
set to its GPUs, a checkpoint directory under --checkpoint-root and the
status-file protocol of docs/job-protocol.md; a preemption or cancel sends
SIGTERM, waits --grace, then SIGKILL. --executor simulated lets time pass
instead (machines without GPUs, docker-compose); --executor none runs no jobs.
The jobs' commands and checkpoints go through the API, so the token needs the
agent role (or operator/admin).

On SIGTERM the agent stops polling, gives its running jobs SIGTERM and their
grace period to save a checkpoint, records it, and exits; the runs resume on
the restarted agent from that checkpoint. An agent that dies without doing so
is noticed by the runs' heartbeat timeout.

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
	f.StringVar(&opts.executor, "executor", agentExecutorProcess, "how jobs placed on this node run: process, simulated or none")
	f.StringVar(&opts.temporalAddress, "temporal-address", cmp.Or(os.Getenv("TEMPORAL_ADDRESS"), "127.0.0.1:7233"), "Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	f.StringVar(&opts.namespace, "temporal-namespace", cmp.Or(os.Getenv("TEMPORAL_NAMESPACE"), "default"), "Temporal namespace (env TEMPORAL_NAMESPACE)")
	f.StringVar(&opts.apiURL, "api", os.Getenv("GPUGOV_API"), "gpugov API address, e.g. http://gpugov:8080 (env GPUGOV_API); empty: only log reports")
	f.StringVar(&opts.token, "token", "", "API bearer token with the agent role (default: env GPUGOV_TOKEN; never shown here)")
	f.StringVar(&opts.checkpointRoot, "checkpoint-root", cmp.Or(os.Getenv("GPUGOV_CHECKPOINT_ROOT"), defaultCheckpointRoot),
		"directory of the jobs' checkpoints and run files; must survive agent restarts (env GPUGOV_CHECKPOINT_ROOT)")
	f.DurationVar(&opts.grace, "grace", process.DefaultGracePeriod, "time a stopped job gets between SIGTERM and SIGKILL")
	f.Float64Var(&opts.simSpeed, "sim-speed", 1, "with --executor simulated: seconds of job work per real second")
	f.StringArrayVar(&opts.labelFlags, "label", nil, "node label key=value reported with every served node, matched by jobs' resources.node_selector "+
		"(repeatable, e.g. --label network=infiniband --label storage=local-nvme; overrides a static file's label of the same key)")
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
	rep, api, err := o.reporter(logger)
	if err != nil {
		return err
	}
	runs, err := o.runWorkers(ctx, src, api, logger)
	if err != nil {
		return err
	}
	return runAgent(ctx, o, src, rep, runs, logger)
}

// validate checks the flags that do not depend on the machine.
func (o *agentOptions) validate() error {
	if o.refresh <= 0 {
		return newUsageError("--refresh must be > 0, got %s", o.refresh)
	}
	if err := o.validateExecutor(); err != nil {
		return err
	}
	labels, err := parseLabelFlags(o.labelFlags)
	if err != nil {
		return err
	}
	o.labels = labels
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

// parseLabelFlags parses --label key=value flags into labels (nil when none).
// A flag without "=", with an empty key or value, a key given twice, or
// labels beyond inventory.CheckLabels' limits are usage errors naming --label.
func parseLabelFlags(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	labels := make(map[string]string, len(flags))
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || k == "" || v == "":
			return nil, newUsageError("--label %q: want key=value with a non-empty key and value, e.g. --label network=infiniband", f)
		case labels[k] != "":
			return nil, newUsageError("--label %q: key %q is already given as %q", f, k, labels[k])
		}
		labels[k] = v
	}
	if key, err := inventory.CheckLabels(labels); err != nil {
		if key != "" {
			return nil, newUsageError("--label %s: %v", key, err)
		}
		return nil, newUsageError("--label: %v", err)
	}
	return labels, nil
}

// validateExecutor checks --executor and what it needs.
func (o *agentOptions) validateExecutor() error {
	switch o.executor {
	case agentExecutorNone:
		return nil
	case agentExecutorProcess, agentExecutorSimulated:
	default:
		return newUsageError("--executor %q: want process, simulated or none", o.executor)
	}
	if o.probe {
		return nil
	}
	if o.apiURL == "" {
		return newUsageError("--api is required with --executor %s: jobs' commands and checkpoints go through the gpugov API (or use --executor none)", o.executor)
	}
	if o.grace <= 0 {
		return newUsageError("--grace must be > 0, got %s", o.grace)
	}
	if o.executor == agentExecutorSimulated && o.simSpeed <= 0 {
		return newUsageError("--sim-speed must be > 0, got %g", o.simSpeed)
	}
	return nil
}

// source returns the static file source, after checking the file (a bad file is
// bad input), or the NVML collector for this node, labelling every node with
// --label.
func (o *agentOptions) source(logger *slog.Logger) (inventory.Source, error) {
	src, err := o.baseSource(logger)
	if err != nil || len(o.labels) == 0 {
		return src, err
	}
	return inventory.LabelledSource{Source: src, Labels: o.labels}, nil
}

// baseSource returns the inventory source before --label is applied.
func (o *agentOptions) baseSource(logger *slog.Logger) (inventory.Source, error) {
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
	c := newNVMLCollector(o.node, o.pool)
	cpuMilli, memoryMiB, err := inventory.HostResources()
	if err != nil {
		// The scheduler treats 0 as "not tracked", so the GPUs stay usable.
		logger.Warn("host CPU and memory not reported", "err", err)
	}
	c.CPUMilli, c.MemoryMiB = cpuMilli, memoryMiB
	return c, nil
}

// reporter returns the API client as the inventory reporter, or a
// LogReporter (and no client) without --api.
func (o *agentOptions) reporter(logger *slog.Logger) (inventory.Reporter, *httpreport.Client, error) {
	if o.apiURL == "" {
		logger.Warn("no --api: inventory and samples are only logged")
		return inventory.LogReporter{Logger: logger}, nil, nil
	}
	token := o.token
	if token == "" {
		token = os.Getenv("GPUGOV_TOKEN")
	}
	c, err := httpreport.New(o.apiURL, token)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--api/--token: %w", err)}
	}
	return c, c, nil
}

// runWorkers dials Temporal and prepares one run worker per served node, or
// returns nil for --executor none.
func (o *agentOptions) runWorkers(ctx context.Context, src inventory.Source, api *httpreport.Client, logger *slog.Logger) (*runWorkers, error) {
	if o.executor == agentExecutorNone {
		return nil, nil
	}
	nodes, err := o.servedNodes(ctx, src)
	if err != nil {
		return nil, err
	}
	reg, err := o.runRegistrar(api, logger)
	if err != nil {
		return nil, err
	}
	c, err := temporalx.Dial(ctx, temporalx.ClientOptions{HostPort: o.temporalAddress, Namespace: o.namespace, Logger: logger})
	if err != nil {
		return nil, err
	}
	return newRunWorkers(c, nodes, reg, process.WorkerOptions(o.grace), logger), nil
}

// servedNodes names the nodes whose run queues this agent polls: this node
// with NVML, the selected nodes of a static file.
func (o *agentOptions) servedNodes(ctx context.Context, src inventory.Source) ([]string, error) {
	if o.inventoryFile == "" {
		return []string{o.node}, nil
	}
	invs, err := src.Collect(ctx)
	if err != nil {
		return nil, usageError{err}
	}
	if len(invs) > maxAgentWorkerNodes {
		return nil, newUsageError("%s serves %d nodes; one agent runs jobs for at most %d: select nodes with --node or --pool, or use --executor none",
			o.inventoryFile, len(invs), maxAgentWorkerNodes)
	}
	nodes := make([]string, len(invs))
	for i, n := range invs {
		nodes[i] = n.Node
	}
	return nodes, nil
}

// runRegistrar returns the function that registers the run activity of
// --executor for one node on its worker.
func (o *agentOptions) runRegistrar(api *httpreport.Client, logger *slog.Logger) (func(w worker.Registry, node string), error) {
	if o.executor == agentExecutorSimulated {
		sim := &executor.SimulatedExecutor{Checkpoints: api, SpeedFactor: o.simSpeed}
		return func(w worker.Registry, _ string) { workflows.RegisterSimExecutorWorker(w, sim) }, nil
	}
	if err := os.MkdirAll(o.checkpointRoot, 0o700); err != nil {
		return nil, newUsageError("--checkpoint-root: %v", err)
	}
	ex := &process.Executor{CheckpointRoot: o.checkpointRoot, GracePeriod: o.grace,
		HeartbeatInterval: process.NoticeInterval, Logger: logger}
	return func(w worker.Registry, node string) {
		workflows.RegisterNodeWorker(w, &process.ProcessActivity{
			Executor: ex, Node: node, Specs: api, Checkpoints: api, Logger: logger.With("node", node),
		})
	}, nil
}

// runWorkers are the Temporal workers of the nodes an agent serves, each
// polling temporalx.NodeTaskQueue(node) for run activities.
type runWorkers struct {
	client  client.Client
	nodes   []string
	workers []worker.Worker
	logger  *slog.Logger
}

// newRunWorkers creates (without starting) one worker per node on c, with
// register adding the run activity. opts are process.WorkerOptions: how long
// Stop lets running jobs save, and how often heartbeats (which carry
// cancellations) are sent.
func newRunWorkers(c client.Client, nodes []string, register func(w worker.Registry, node string), opts worker.Options, logger *slog.Logger) *runWorkers {
	rw := &runWorkers{client: c, nodes: nodes, logger: logger}
	for _, node := range nodes {
		w := worker.New(c, temporalx.NodeTaskQueue(node), opts)
		register(w, node)
		rw.workers = append(rw.workers, w)
	}
	return rw
}

// Start starts every worker; on an error it stops those started and closes
// the client.
func (rw *runWorkers) Start() error {
	for i, w := range rw.workers {
		if err := w.Start(); err != nil {
			for _, started := range rw.workers[:i] {
				started.Stop()
			}
			rw.client.Close()
			return fmt.Errorf("start the run worker of node %s: %w", rw.nodes[i], err)
		}
	}
	rw.logger.Info("run workers polling", "task_queues", len(rw.workers), "first", temporalx.NodeTaskQueue(rw.nodes[0]))
	return nil
}

// Stop stops the workers — their running jobs are stopped gracefully and
// their attempts retried on the next agent — and closes the client.
func (rw *runWorkers) Stop() {
	for _, w := range rw.workers {
		w.Stop()
	}
	rw.client.Close()
}

// runAgent runs the node agent until ctx is done: the run workers (when
// runs is not nil) and the inventory refresh loop reporting to rep. It
// returns a worker start error or the first collection's error (e.g. no
// NVML), and nil on shutdown, after the workers have stopped.
func runAgent(ctx context.Context, o *agentOptions, src inventory.Source, rep inventory.Reporter, runs *runWorkers, logger *slog.Logger) error {
	logger.Info("agent starting", "inventory", inventorySourceName(o), "refresh", o.refresh, "executor", o.executor)
	if runs != nil {
		if err := runs.Start(); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		defer runs.Stop()
	}
	a := &inventory.Agent{Source: src, Reporter: rep, Refresh: o.refresh, Logger: logger}
	if err := a.Run(ctx); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	logger.Info("agent stopping")
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
