package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Source reads the current inventory of the nodes an agent speaks for: the local
// node (NVML) or the nodes of a static file. Collect returns an error naming what
// could not be read; it returns no partial inventory.
type Source interface {
	Collect(ctx context.Context) ([]NodeInventory, error)
}

// Reporter delivers what the agent observed to the gpugov service. Report sends
// one node's inventory; ReportSamples sends utilisation samples (never empty).
// Both return an error when the service did not accept the data; the agent logs
// it and sends fresh data at the next refresh.
type Reporter interface {
	Report(ctx context.Context, inv NodeInventory) error
	ReportSamples(ctx context.Context, samples []UtilizationSample) error
}

// LogReporter is a Reporter that only logs what it is given, for running an agent
// without a service and for seeing what an agent would send.
type LogReporter struct {
	Logger *slog.Logger
}

// Report logs a summary of the node's inventory and, at debug level, each GPU. It
// never fails.
func (r LogReporter) Report(ctx context.Context, inv NodeInventory) error {
	unhealthy := 0
	for _, g := range inv.GPUs {
		if !g.Healthy {
			unhealthy++
		}
	}
	r.Logger.InfoContext(ctx, "inventory", "node", inv.Node, "pool", inv.Pool, "source", inv.Source,
		"gpus", len(inv.GPUs), "unhealthy_gpus", unhealthy, "driver", inv.DriverVersion, "cuda", inv.CUDAVersion)
	for _, g := range inv.GPUs {
		r.Logger.DebugContext(ctx, "gpu", "node", inv.Node, "index", g.Index, "uuid", g.UUID, "model", g.Model,
			"memory_total_mib", g.MemoryTotalMiB, "nvlink_domain", g.NVLinkDomain, "healthy", g.Healthy,
			"health_notes", g.HealthNotes, "processes", len(g.Processes))
	}
	return nil
}

// ReportSamples logs each sample at debug level and their count at info level. It
// never fails.
func (r LogReporter) ReportSamples(ctx context.Context, samples []UtilizationSample) error {
	r.Logger.InfoContext(ctx, "utilization samples", "count", len(samples))
	for _, s := range samples {
		r.Logger.DebugContext(ctx, "utilization", "gpu", s.GPUUUID, "at", s.At,
			"gpu_percent", s.GPUPercent, "memory_used_mib", s.MemoryUsedMiB)
	}
	return nil
}

// Agent is the node agent's refresh loop: every Refresh it collects the inventory
// from Source and hands each node's inventory and utilisation samples to Reporter.
type Agent struct {
	Source   Source
	Reporter Reporter
	Refresh  time.Duration // time between refreshes; must be > 0
	Logger   *slog.Logger
}

// Run refreshes once at once and then every a.Refresh until ctx is done, when it
// returns nil. An error of the first collection is returned, because an agent
// that cannot read its inventory at start (no NVML, a bad file) is misconfigured;
// later collection errors and every Reporter error are logged and retried at the
// next refresh, because they are usually transient (a GPU reset, the service
// restarting).
func (a *Agent) Run(ctx context.Context) error {
	if a.Refresh <= 0 {
		return fmt.Errorf("agent refresh interval must be > 0, got %s", a.Refresh)
	}
	if err := a.collectAndReport(ctx); err != nil {
		return err
	}
	ticker := time.NewTicker(a.Refresh)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := a.collectAndReport(ctx); err != nil && ctx.Err() == nil {
				a.Logger.ErrorContext(ctx, "inventory refresh failed; retrying at the next refresh",
					"err", err, "refresh", a.Refresh)
			}
		}
	}
}

// collectAndReport runs one refresh. It returns only a collection error; reporter
// errors are logged here because the next refresh sends newer data anyway.
func (a *Agent) collectAndReport(ctx context.Context) error {
	nodes, err := a.Source.Collect(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := a.Reporter.Report(ctx, n); err != nil {
			a.Logger.ErrorContext(ctx, "reporting inventory failed", "node", n.Node, "err", err)
		}
		samples := n.Samples()
		if len(samples) == 0 {
			continue
		}
		if err := a.Reporter.ReportSamples(ctx, samples); err != nil {
			a.Logger.ErrorContext(ctx, "reporting utilization samples failed", "node", n.Node, "err", err)
		}
	}
	return nil
}

// Probe collects the inventory from src once and writes it to w as an indented
// JSON array of NodeInventory (one element for an NVML node; one per selected
// node of a static file). It returns the collection error unchanged, so that a
// missing NVML keeps its explanation.
func Probe(ctx context.Context, src Source, w io.Writer) error {
	nodes, err := src.Collect(ctx)
	if err != nil {
		return err
	}
	if nodes == nil {
		nodes = []NodeInventory{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(nodes); err != nil {
		return fmt.Errorf("writing the probe output: %w", err)
	}
	return nil
}
