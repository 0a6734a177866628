package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Node-agent routes: what `gpugov agent` calls. They need an agent, operator
// or admin token (routeAccess); an agent token may call nothing else but
// PUT /v1/jobs/{id}/prerequisites/{name} (actions.go), and only for the node
// its token names: its own node's inventory and samples, the runs placed on
// it and their checkpoints.
//
//	POST /v1/nodes/{name}/inventory           the node's inventory (inventory.NodeInventory), every refresh
//	POST /v1/nodes/{name}/samples             GPU utilisation samples, the evidence for idle reclaim
//	GET  /v1/nodes/{name}/runs/{run}          the command, environment and resume checkpoint of a run placed there
//	POST /v1/jobs/{id}/runs/{run}/checkpoints a checkpoint the run's process reported
const (
	routeNodeInventory  = "/v1/nodes/:name/inventory"
	routeNodeSamples    = "/v1/nodes/:name/samples"
	routeNodeRun        = "/v1/nodes/:name/runs/:run"
	routeRunCheckpoints = "/v1/jobs/:id/runs/:run/checkpoints"
)

// Limits of node-agent requests.
const (
	// MaxSamplesPerReport bounds the samples of one POST …/samples: an agent
	// sends one per GPU per refresh, so 4096 leaves room for a backlog.
	MaxSamplesPerReport = vocab.MaxSamplesPerReport
	// MaxSampleClockSkew is how far in the future (by the server's clock) a
	// sample's time may be before it is rejected as a clock error.
	MaxSampleClockSkew = 5 * time.Minute
)

// namePattern is what a node or pool name must look like: a DNS-label-like
// name, as NVML host names and the static inventory's names are.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// NodeStore is the part of *store.Store the node-agent routes use. The Store
// given to New must implement it for those routes to work (StoreFrom's value
// does); otherwise they answer 500.
type NodeStore interface {
	UpsertNode(ctx context.Context, pool string, node scheduling.Node, actor string) (*store.NodeChange, error)
	InsertGPUSamples(ctx context.Context, node string, samples []store.GPUSample) (int64, error)
	GetRunSpec(ctx context.Context, runID string) (*store.RunSpec, error)
	RecordCheckpoint(ctx context.Context, jobID, runID string, cp scheduling.Checkpoint) error
	GPUNodes(ctx context.Context, uuids []string) (map[string]string, error)
	NodePool(ctx context.Context, name string) (string, error)
}

// NodeReportResult answers POST /v1/nodes/{name}/inventory: what the report
// changed in the stored inventory. GPU lists hold UUIDs.
type NodeReportResult struct {
	Node            string   `json:"node"`
	Pool            string   `json:"pool"`
	GPUs            int      `json:"gpus"`    // GPUs reported
	Changed         bool     `json:"changed"` // false when the report matched the stored inventory
	PoolCreated     bool     `json:"pool_created,omitempty"`
	NodeCreated     bool     `json:"node_created,omitempty"`
	PreviousPool    string   `json:"previous_pool,omitempty"`
	Added           []string `json:"added,omitempty"`
	Removed         []string `json:"removed,omitempty"`
	Retained        []string `json:"retained,omitempty"` // not reported but still allocated: kept, unhealthy
	Updated         []string `json:"updated,omitempty"`
	BecameHealthy   []string `json:"became_healthy,omitempty"`
	BecameUnhealthy []string `json:"became_unhealthy,omitempty"`
	LabelsChanged   bool     `json:"labels_changed,omitempty"` // the node's labels differ from the stored ones
}

// SamplesReport is the body of POST /v1/nodes/{name}/samples.
type SamplesReport struct {
	Samples []inventory.UtilizationSample `json:"samples"`
}

// SamplesResult answers POST /v1/nodes/{name}/samples.
type SamplesResult struct {
	Received int   `json:"received"` // samples in the request
	Stored   int64 `json:"stored"`   // samples new to the store (a retried report stores none again)
}

// RunSpec answers GET /v1/nodes/{name}/runs/{run}: what the node agent needs
// to start the run as a process.
type RunSpec struct {
	JobID   string            `json:"job_id"`
	RunID   string            `json:"run_id"`
	Node    string            `json:"node"`
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	// StartStep is the step the run was started to resume from.
	StartStep int64 `json:"start_step"`
	// ResumeFrom is the job's last valid checkpoint (the run's start point,
	// or a newer one an earlier attempt of the run recorded); absent when none.
	ResumeFrom *Checkpoint `json:"resume_from,omitempty"`
	// Ended is true once the run has finished; an agent must not start it.
	Ended bool `json:"ended"`
}

// CheckpointResult answers POST /v1/jobs/{id}/runs/{run}/checkpoints.
type CheckpointResult struct {
	JobID      string     `json:"job_id"`
	RunID      string     `json:"run_id"`
	Checkpoint Checkpoint `json:"checkpoint"`
}

// nodeRoutes adds the node-agent routes to the authenticated /v1 group.
func (s *Server) nodeRoutes(v1 *gin.RouterGroup) {
	v1.POST(strings.TrimPrefix(routeNodeInventory, "/v1"), s.reportInventory)
	v1.POST(strings.TrimPrefix(routeNodeSamples, "/v1"), s.reportSamples)
	v1.GET(strings.TrimPrefix(routeNodeRun, "/v1"), s.getRunSpec)
	v1.POST(strings.TrimPrefix(routeRunCheckpoints, "/v1"), s.recordCheckpoint)
}

// nodeStore returns the server's store as a NodeStore, or answers 500 and
// returns false when it is not one (a wiring bug, logged with its cause).
func (s *Server) nodeStore(c *gin.Context) (NodeStore, bool) {
	return implements[NodeStore](c, s.store)
}

// nodeName returns the path's node name, or writes a 422 and returns false.
func nodeName(c *gin.Context) (string, bool) {
	name := c.Param("name")
	if !namePattern.MatchString(name) {
		writeError(c, invalid([]FieldError{{Field: "name", Message: fmt.Sprintf(
			"node name %q must be 1-253 letters, digits, '.', '_' or '-', starting with a letter or digit", name)}}))
		return "", false
	}
	return name, true
}

// reportInventory handles POST /v1/nodes/{name}/inventory: the node's GPUs
// replace the stored ones (store.UpsertNode, which audits real changes with
// the token's name as actor).
func (s *Server) reportInventory(c *gin.Context) {
	name, ok := nodeName(c)
	if !ok {
		return
	}
	var inv inventory.NodeInventory
	if apiErr := decodeStrict(c.Request.Body, &inv, false); apiErr != nil {
		writeError(c, apiErr)
		return
	}
	if errs := ValidateNodeInventory(name, &inv); len(errs) > 0 {
		writeError(c, invalid(errs))
		return
	}
	ns, ok := s.nodeStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	if principal(c).Role == vocab.RoleAgent {
		// An agent reports its own node's GPUs: one that lists another node's
		// GPU would move it (and its samples' evidence) to itself. Moving a GPU
		// between nodes is an operator's inventory import.
		uuids := make([]string, len(inv.GPUs))
		for i, g := range inv.GPUs {
			uuids[i] = g.UUID
		}
		owners, err := ns.GPUNodes(ctx, uuids)
		if err != nil {
			writeError(c, err)
			return
		}
		for i, u := range uuids {
			if owner, ok := owners[u]; ok && owner != name {
				writeError(c, newError(http.StatusConflict, CodeConflict, fmt.Sprintf("gpus[%d].uuid", i),
					"GPU %s is on node %s: an agent reports its own node's GPUs; an operator moves a GPU between nodes (gpugov inventory import)", u, owner))
				return
			}
		}
	}
	change, err := ns.UpsertNode(ctx, inv.Pool, schedulingNode(&inv), principal(c).Name)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, nodeReportResult(change, len(inv.GPUs)))
}

// ValidateNodeInventory checks an inventory report for node name and returns
// every problem found, each naming its field; nil means valid.
func ValidateNodeInventory(name string, inv *inventory.NodeInventory) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if inv.Node != name {
		add("node", "is %q but the path names node %q", inv.Node, name)
	}
	if !namePattern.MatchString(inv.Pool) {
		add("pool", "is required: 1-253 letters, digits, '.', '_' or '-'")
	}
	if inv.Source != inventory.SourceNVML && inv.Source != inventory.SourceStatic {
		add("source", "is %q; want %q or %q", inv.Source, inventory.SourceNVML, inventory.SourceStatic)
	}
	if inv.CPUMilli < 0 || inv.CPUMilli > vocab.MaxCPUMilli {
		add("cpu_milli", "must be 0..%d milli-cores (0 = not tracked), got %d", vocab.MaxCPUMilli, inv.CPUMilli)
	}
	if inv.MemoryMiB < 0 || inv.MemoryMiB > vocab.MaxMemoryMiB {
		add("memory_mib", "must be 0..%d MiB (0 = not tracked), got %d", vocab.MaxMemoryMiB, inv.MemoryMiB)
	}
	if len(inv.GPUs) > vocab.MaxGPUsPerNode {
		add("gpus", "%d GPUs, at most %d per node", len(inv.GPUs), vocab.MaxGPUsPerNode)
		return errs
	}
	if key, err := inventory.CheckLabels(inv.Labels); err != nil {
		add(strings.TrimSuffix("labels."+key, "."), "%v", err)
	}
	uuids := map[string]int{}
	indexes := map[int]int{}
	for i, g := range inv.GPUs {
		f := fmt.Sprintf("gpus[%d].", i)
		switch j, dup := uuids[g.UUID]; {
		case !validUUID(g.UUID):
			add(f+"uuid", "%q must be a non-empty NVML UUID without commas or spaces", g.UUID)
		case dup:
			add(f+"uuid", "%q is also gpus[%d].uuid", g.UUID, j)
		}
		uuids[g.UUID] = i
		switch j, dup := indexes[g.Index]; {
		case g.Index < 0 || g.Index > vocab.MaxGPUIndex:
			add(f+"index", "must be 0..%d, got %d", vocab.MaxGPUIndex, g.Index)
		case dup:
			add(f+"index", "%d is also gpus[%d].index", g.Index, j)
		}
		indexes[g.Index] = i
		if g.Model == "" {
			add(f+"model", "is required")
		}
		if g.MemoryTotalMiB <= 0 || g.MemoryTotalMiB > vocab.MaxGPUMemoryMiB {
			add(f+"memory_total_mib", "must be 1..%d MiB, got %d", vocab.MaxGPUMemoryMiB, g.MemoryTotalMiB)
		}
		if g.MemoryUsedMiB < 0 || (g.MemoryTotalMiB > 0 && g.MemoryUsedMiB > g.MemoryTotalMiB) {
			add(f+"memory_used_mib", "must be between 0 and memory_total_mib")
		}
		if g.UtilizationGPUPercent < 0 || g.UtilizationGPUPercent > 100 {
			add(f+"utilization_gpu_percent", "must be between 0 and 100")
		}
		if g.UtilizationMemoryPercent < 0 || g.UtilizationMemoryPercent > 100 {
			add(f+"utilization_memory_percent", "must be between 0 and 100")
		}
	}
	return errs
}

// validUUID reports whether u can name a GPU (and be listed in
// CUDA_VISIBLE_DEVICES).
func validUUID(u string) bool {
	return u != "" && len(u) <= 256 && !strings.ContainsAny(u, ", \t\r\n")
}

// schedulingNode converts a validated report into the store's node, GPUs in
// NVML index order (the store numbers them by position).
func schedulingNode(inv *inventory.NodeInventory) scheduling.Node {
	gpus := slices.Clone(inv.GPUs)
	slices.SortStableFunc(gpus, func(a, b inventory.GPUInfo) int { return a.Index - b.Index })
	sorted := *inv
	sorted.GPUs = gpus
	return sorted.SchedulingNode()
}

func nodeReportResult(c *store.NodeChange, gpus int) NodeReportResult {
	return NodeReportResult{
		Node: c.Node, Pool: c.Pool, GPUs: gpus, Changed: c.Changed(),
		PoolCreated: c.PoolCreated, NodeCreated: c.NodeCreated, PreviousPool: c.PreviousPool,
		Added: c.Added, Removed: c.Removed, Retained: c.Retained, Updated: c.Updated,
		BecameHealthy: c.BecameHealthy, BecameUnhealthy: c.BecameUnhealthy, LabelsChanged: c.LabelsChanged,
	}
}

// reportSamples handles POST /v1/nodes/{name}/samples. Samples are
// measurements, not governance actions, so they are stored (idempotently)
// rather than audited; they are themselves the evidence a reclaim's audit
// entry points to.
func (s *Server) reportSamples(c *gin.Context) {
	name, ok := nodeName(c)
	if !ok {
		return
	}
	var rep SamplesReport
	if apiErr := decodeStrict(c.Request.Body, &rep, false); apiErr != nil {
		writeError(c, apiErr)
		return
	}
	if errs := ValidateSamples(rep.Samples, s.now()); len(errs) > 0 {
		writeError(c, invalid(errs))
		return
	}
	ns, ok := s.nodeStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	stored, err := ns.InsertGPUSamples(ctx, name, storeSamples(rep.Samples))
	var unknown *store.UnknownGPUError
	if errors.As(err, &unknown) {
		writeError(c, invalid(unknownGPUErrors(rep.Samples, unknown)))
		return
	}
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, SamplesResult{Received: len(rep.Samples), Stored: stored})
}

// ValidateSamples checks a samples report against the server's clock now and
// returns every problem found, each naming its field; nil means valid.
func ValidateSamples(samples []inventory.UtilizationSample, now time.Time) []FieldError {
	switch {
	case len(samples) == 0:
		return []FieldError{{Field: "samples", Message: "at least one sample is required"}}
	case len(samples) > MaxSamplesPerReport:
		return []FieldError{{Field: "samples", Message: fmt.Sprintf("%d samples; at most %d per request", len(samples), MaxSamplesPerReport)}}
	}
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	for i, sm := range samples {
		f := fmt.Sprintf("samples[%d].", i)
		if !validUUID(sm.GPUUUID) {
			add(f+"gpu_uuid", "%q must be a non-empty NVML UUID without commas or spaces", sm.GPUUUID)
		}
		switch {
		case sm.At.IsZero():
			add(f+"at", "is required (RFC 3339 time of the measurement)")
		case sm.At.After(now.Add(MaxSampleClockSkew)):
			add(f+"at", "%s is more than %s ahead of the server's clock", sm.At.Format(time.RFC3339), MaxSampleClockSkew)
		}
		if sm.GPUPercent < 0 || sm.GPUPercent > 100 {
			add(f+"gpu_percent", "must be between 0 and 100")
		}
		if sm.MemoryUsedMiB < 0 || sm.MemoryUsedMiB > vocab.MaxGPUMemoryMiB {
			add(f+"memory_used_mib", "must be 0..%d MiB, got %d", vocab.MaxGPUMemoryMiB, sm.MemoryUsedMiB)
		}
	}
	return errs
}

func storeSamples(in []inventory.UtilizationSample) []store.GPUSample {
	out := make([]store.GPUSample, len(in))
	for i, sm := range in {
		out[i] = store.GPUSample{GPUUUID: sm.GPUUUID, At: sm.At, GPUPercent: sm.GPUPercent, MemoryUsedMiB: sm.MemoryUsedMiB}
	}
	return out
}

// unknownGPUErrors names every sample whose GPU is not on the node.
func unknownGPUErrors(samples []inventory.UtilizationSample, e *store.UnknownGPUError) []FieldError {
	var errs []FieldError
	for i, sm := range samples {
		if _, found := slices.BinarySearch(e.UUIDs, sm.GPUUUID); found {
			errs = append(errs, FieldError{Field: fmt.Sprintf("samples[%d].gpu_uuid", i),
				Message: fmt.Sprintf("GPU %q is not in the inventory of node %s (report the inventory first)", sm.GPUUUID, e.Node)})
		}
	}
	return errs
}

// getRunSpec handles GET /v1/nodes/{name}/runs/{run}. A run placed on
// another node is 404, so an agent never starts another node's run.
func (s *Server) getRunSpec(c *gin.Context) {
	name, ok := nodeName(c)
	if !ok {
		return
	}
	ns, ok := s.nodeStore(c)
	if !ok {
		return
	}
	runID := c.Param("run")
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	rs, err := ns.GetRunSpec(ctx, runID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "", "run %s not found", runID))
		return
	case err != nil:
		writeError(c, err)
		return
	case rs.Node != name:
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "", "run %s is not placed on node %s", runID, name))
		return
	}
	out := RunSpec{JobID: rs.JobID, RunID: rs.RunID, Node: rs.Node, Command: rs.Command, Env: rs.Env,
		StartStep: rs.StartStep, Ended: rs.Ended}
	if out.Command == nil {
		out.Command = []string{}
	}
	if cp := rs.ResumeFrom; cp != nil {
		out.ResumeFrom = &Checkpoint{At: cp.At, Step: cp.Step, Location: cp.Location}
	}
	c.JSON(http.StatusOK, out)
}

// MaxCheckpointClockSkew is how far in the future (by the server's clock) a
// reported checkpoint's time may be before it is refused (422 on at): an
// agent's clock a little ahead is tolerated, a time that has not come is not
// evidence. store.CheckpointClockSkew allows the same before the run's start.
const MaxCheckpointClockSkew = store.CheckpointClockSkew

// staleText is store.ErrStaleCheckpoint's own text before ErrConflict's,
// which a stale answer's message leaves out (its code says it).
var staleText = strings.TrimSuffix(store.ErrStaleCheckpoint.Error(), ": "+store.ErrConflict.Error())

// recordCheckpoint handles POST /v1/jobs/{id}/runs/{run}/checkpoints: the
// checkpoint becomes the run's last one and the job's recovery evidence
// once it is checked (docs/design.md §5 "Checked evidence"): 422 naming the
// field for a time more than MaxCheckpointClockSkew ahead of the server's
// clock, or one the store refuses (before the run started, a step past the
// job's declared work or going backwards); 409 conflict when the run's
// allocation was released; 409 stale for a checkpoint older than the
// current one. A refused report changes nothing; the same one again is 200.
func (s *Server) recordCheckpoint(c *gin.Context) {
	ns, ok := s.nodeStore(c)
	if !ok {
		return
	}
	jobID, runID := c.Param("id"), c.Param("run")
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	if p := principal(c); p.Role == vocab.RoleAgent {
		// An agent reports checkpoints of the runs on its own node only,
		// checked before the body: another node's run is 403 whatever it says.
		rs, err := ns.GetRunSpec(ctx, runID)
		switch {
		case errors.Is(err, store.ErrNotFound) || (err == nil && rs.JobID != jobID):
			writeError(c, newError(http.StatusNotFound, CodeNotFound, "", "run %s of job %s not found", runID, jobID))
			return
		case err != nil:
			writeError(c, err)
			return
		case rs.Node != p.Node:
			writeError(c, forbiddenNode(p, rs.Node))
			return
		}
	}
	var cp Checkpoint
	if apiErr := decodeStrict(c.Request.Body, &cp, false); apiErr != nil {
		writeError(c, apiErr)
		return
	}
	errs := ValidateCheckpoint(&cp)
	if now := s.now(); cp.At.After(now.Add(MaxCheckpointClockSkew)) {
		errs = append(errs, FieldError{Field: "at", Message: fmt.Sprintf("%s is in the future (server time %s, %s of clock skew allowed)",
			cp.At.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339), MaxCheckpointClockSkew)})
	}
	if len(errs) > 0 {
		writeError(c, invalid(errs))
		return
	}
	err := ns.RecordCheckpoint(ctx, jobID, runID, scheduling.Checkpoint{At: cp.At, Step: cp.Step, Location: cp.Location})
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "", "run %s of job %s not found", runID, jobID))
		return
	case errors.Is(err, store.ErrStaleCheckpoint):
		writeError(c, newError(http.StatusConflict, CodeStale, "", "%s", strings.TrimSuffix(conflictMessage(err), ": "+staleText)))
		return
	}
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, CheckpointResult{JobID: jobID, RunID: runID, Checkpoint: cp})
}

// ValidateCheckpoint checks a reported checkpoint and returns every problem
// found, each naming its field; nil means valid.
func ValidateCheckpoint(cp *Checkpoint) []FieldError {
	var errs []FieldError
	if cp.At.IsZero() {
		errs = append(errs, FieldError{Field: "at", Message: "is required (RFC 3339 time the checkpoint was complete)"})
	}
	if cp.Step < 0 || cp.Step > MaxTotalSteps {
		errs = append(errs, FieldError{Field: "step", Message: fmt.Sprintf("must be 0..%d, got %d", int64(MaxTotalSteps), cp.Step)})
	}
	if cp.Location == "" {
		errs = append(errs, FieldError{Field: "location", Message: "is required: where the checkpoint can be read from"})
	}
	return errs
}
