package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Audit action of an inventory change reported by a node agent.
const AuditInventoryChange = "inventory_change"

// NodeChange is what UpsertNode changed. GPU lists hold UUIDs in UUID order.
type NodeChange struct {
	Node        string
	Pool        string
	PoolCreated bool // the pool was not stored before; it was created available, in the observe stage
	NodeCreated bool // the node was not stored before
	// PreviousPool is the pool the node was in before, when it moved; "" otherwise.
	PreviousPool string
	Added        []string // GPUs new to this node (new, or moved from another node)
	Removed      []string // GPUs no longer reported, deleted
	// Retained are GPUs no longer reported that still hold an active
	// allocation: kept, and marked unhealthy until the allocation is released.
	Retained        []string
	Updated         []string // GPUs whose model, memory, index or NVLink domain changed
	BecameHealthy   []string
	BecameUnhealthy []string // GPUs that turned unhealthy (Retained ones included)
	// HostChanged is true when the node's CPU or host memory changed.
	HostChanged bool
	// LabelsChanged is true when the node's labels changed (a new node with
	// labels included).
	LabelsChanged bool
}

// Changed reports whether the call changed the stored inventory (beyond the
// node's last-report time).
func (c *NodeChange) Changed() bool {
	return c.PoolCreated || c.NodeCreated || c.PreviousPool != "" || c.HostChanged || c.LabelsChanged ||
		len(c.Added)+len(c.Removed)+len(c.Updated)+len(c.BecameHealthy)+len(c.BecameUnhealthy) > 0
}

// storedGPU is a gpus row as UpsertNode compares it.
type storedGPU struct {
	uuid, node, model, domain string
	index                     int32
	memoryMiB                 int64
	healthy                   bool
}

// lockedGPURow is one gpus row as lockNodeGPUs reads it.
type lockedGPURow struct {
	UUID      string `db:"uuid"`
	Node      string `db:"node"`
	Index     int32  `db:"device_index"`
	Model     string `db:"model"`
	MemoryMiB int64  `db:"memory_mib"`
	Domain    string `db:"nvlink_domain"`
	Healthy   bool   `db:"healthy"`
}

// UpsertNode makes the stored GPUs of one node exactly node.GPUs, leaving every
// other node alone: the write of a node agent's inventory report, where
// UpsertInventory would drop the pool's other nodes. The node is created in
// pool, or moved there; a pool not stored yet is created available and in the
// observe stage, and an existing pool's availability and stage are kept (they
// are the service's configuration, not the agent's). The node's CPU, host
// memory and schedulable flag are set from node, and its updated_at is the
// time of the report, so it doubles as the agent's last-seen time. GPUs are
// matched by UUID: a UUID stored on another node moves here; a GPU of this
// node no longer reported is deleted, unless it holds an active allocation,
// when it is kept and marked unhealthy so that the allocation can be released
// normally. When anything changed, an AuditInventoryChange entry by actor
// about "node/<name>" with the change as evidence is written in the same
// transaction. Repeating a report changes and audits nothing, so retries are
// safe. Errors: an empty pool or node name, empty or duplicate GPU UUIDs, or
// database errors, wrapped with "upsert node".
func (s *Store) UpsertNode(ctx context.Context, pool string, node scheduling.Node, actor string) (*NodeChange, error) {
	if err := checkNodeInput(pool, node); err != nil {
		return nil, fmt.Errorf("store: upsert node: %w", err)
	}
	var change *NodeChange
	err := s.inTx(ctx, "upsert node "+node.Name, func(tx pgx.Tx) error {
		var err error
		change, err = upsertNodeTx(ctx, tx, pool, node)
		if err != nil || !change.Changed() {
			return err
		}
		return appendAuditTx(ctx, tx, AuditEntry{
			At: time.Now(), Actor: actor, Action: AuditInventoryChange, Subject: "node/" + node.Name,
			Reason: "node agent inventory report", Evidence: change.evidence(),
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: upsert node: %w", err)
	}
	return change, nil
}

// NodePool returns the pool node name is in. Errors: ErrNotFound when no
// such node is stored; a query error.
func (s *Store) NodePool(ctx context.Context, name string) (string, error) {
	var pool string
	err := s.pool.QueryRow(ctx, `SELECT pool FROM nodes WHERE name = $1`, name).Scan(&pool)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	return pool, err
}

// GPUNodes returns, for each of uuids stored in the inventory, the node it is
// on (uuid → node name); UUIDs not stored are absent. The API checks a node
// agent's report with it: an agent reports its own node's GPUs and never
// moves another node's (docs/design.md §2 "Roles and tenancy").
func (s *Store) GPUNodes(ctx context.Context, uuids []string) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT uuid, node FROM gpus WHERE uuid = ANY($1)`, uuids)
	if err != nil {
		return nil, fmt.Errorf("store: GPU nodes: %w", err)
	}
	out := make(map[string]string, len(uuids))
	var uuid, node string
	if _, err := pgx.ForEachRow(rows, []any{&uuid, &node}, func() error { out[uuid] = node; return nil }); err != nil {
		return nil, fmt.Errorf("store: GPU nodes: %w", err)
	}
	return out, nil
}

// checkNodeInput rejects what the tables' keys would reject less clearly,
// with a *ValidationError (ErrInvalid).
func checkNodeInput(pool string, node scheduling.Node) error {
	if err := required("pool", pool, "node.name", node.Name); err != nil {
		return err
	}
	if err := CheckNodeLabels("node.labels", node.Labels); err != nil {
		return err
	}
	seen := make(map[string]bool, len(node.GPUs))
	for i, g := range node.GPUs {
		if g.UUID == "" || seen[g.UUID] {
			return invalidf(fmt.Sprintf("node.gpus[%d].uuid", i), "node %q: GPU UUID %q empty or listed twice", node.Name, g.UUID)
		}
		seen[g.UUID] = true
	}
	return nil
}

// upsertNodeTx follows the package's lock order: it locks the GPU rows it may
// change (this node's and the reported ones, in UUID order) before writing.
func upsertNodeTx(ctx context.Context, tx pgx.Tx, pool string, node scheduling.Node) (*NodeChange, error) {
	change := &NodeChange{Node: node.Name, Pool: pool}
	tag, err := tx.Exec(ctx, `INSERT INTO pools (name, available, stage, updated_at) VALUES ($1, true, $2, now())
		ON CONFLICT (name) DO NOTHING`, pool, string(vocab.StageObserve))
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	change.PoolCreated = tag.RowsAffected() == 1
	reported := make([]string, len(node.GPUs))
	for i, g := range node.GPUs {
		reported[i] = g.UUID
	}
	before, err := lockNodeGPUs(ctx, tx, node.Name, reported)
	if err != nil {
		return nil, err
	}
	if err := upsertNodeRow(ctx, tx, pool, node, change); err != nil {
		return nil, err
	}
	if err := upsertNodeGPURows(ctx, tx, node); err != nil {
		return nil, err
	}
	diffGPUs(node, before, change)
	if err := removeVanishedFromNode(ctx, tx, before, change); err != nil {
		return nil, err
	}
	return change, nil
}

// lockNodeGPUs locks and reads the GPUs stored on node or carrying one of the
// reported UUIDs, by UUID.
func lockNodeGPUs(ctx context.Context, tx pgx.Tx, node string, reported []string) (map[string]storedGPU, error) {
	rows, err := queryAll[lockedGPURow](ctx, tx, `
		SELECT uuid, node, device_index, model, memory_mib, nvlink_domain, healthy FROM gpus
		WHERE node = $1 OR uuid = ANY($2) ORDER BY uuid FOR UPDATE`, node, reported)
	if err != nil {
		return nil, fmt.Errorf("lock GPUs: %w", err)
	}
	before := make(map[string]storedGPU, len(rows))
	for _, g := range rows {
		before[g.UUID] = storedGPU{uuid: g.UUID, node: g.Node, model: g.Model, domain: g.Domain, index: g.Index,
			memoryMiB: g.MemoryMiB, healthy: g.Healthy}
	}
	return before, nil
}

// upsertNodeRow inserts or updates the node row and records in change whether
// it was created, moved pool or changed its host resources.
func upsertNodeRow(ctx context.Context, tx pgx.Tx, pool string, node scheduling.Node, change *NodeChange) error {
	var oldPool string
	var oldCPU, oldMem int64
	var oldLabels map[string]string
	labels, err := labelsJSON("node.labels", node.Labels)
	if err != nil {
		return err
	}
	err = tx.QueryRow(ctx, `SELECT pool, cpu_milli, memory_mib, labels FROM nodes WHERE name = $1 FOR UPDATE`, node.Name).
		Scan(&oldPool, &oldCPU, &oldMem, &oldLabels)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		change.NodeCreated = true
		change.LabelsChanged = len(node.Labels) > 0
	case err != nil:
		return fmt.Errorf("read node: %w", err)
	default:
		if oldPool != pool {
			change.PreviousPool = oldPool
		}
		change.HostChanged = oldCPU != node.CPUMilli || oldMem != node.MemoryMiB
		change.LabelsChanged = !maps.Equal(oldLabels, node.Labels)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO nodes (name, pool, cpu_milli, memory_mib, schedulable, labels, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb, now())
		ON CONFLICT (name) DO UPDATE SET pool = EXCLUDED.pool, cpu_milli = EXCLUDED.cpu_milli,
			memory_mib = EXCLUDED.memory_mib, schedulable = EXCLUDED.schedulable, labels = EXCLUDED.labels,
			updated_at = now()`,
		node.Name, pool, node.CPUMilli, node.MemoryMiB, node.Schedulable, labels); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// upsertNodeGPURows writes the reported GPUs; rows already equal are not
// rewritten, so a repeated report leaves no dead tuples behind.
func upsertNodeGPURows(ctx context.Context, tx pgx.Tx, node scheduling.Node) error {
	n := len(node.GPUs)
	uuids, nodes, models, domains := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	index, mem, healthy := make([]int32, n), make([]int64, n), make([]bool, n)
	for i, g := range node.GPUs {
		uuids[i], nodes[i], models[i], domains[i] = g.UUID, node.Name, g.Model, g.NVLinkDomain
		index[i], mem[i], healthy[i] = int32(i), g.MemoryMiB, g.Healthy
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO gpus (uuid, node, device_index, model, memory_mib, nvlink_domain, healthy)
		SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::int8[], $6::text[], $7::bool[])
			AS u(uuid, node, device_index, model, memory_mib, nvlink_domain, healthy)
		ORDER BY u.uuid
		ON CONFLICT (uuid) DO UPDATE SET node = EXCLUDED.node, device_index = EXCLUDED.device_index,
			model = EXCLUDED.model, memory_mib = EXCLUDED.memory_mib,
			nvlink_domain = EXCLUDED.nvlink_domain, healthy = EXCLUDED.healthy
		WHERE (gpus.node, gpus.device_index, gpus.model, gpus.memory_mib, gpus.nvlink_domain, gpus.healthy)
			IS DISTINCT FROM (EXCLUDED.node, EXCLUDED.device_index, EXCLUDED.model, EXCLUDED.memory_mib,
				EXCLUDED.nvlink_domain, EXCLUDED.healthy)`,
		uuids, nodes, index, models, mem, domains, healthy)
	if err != nil {
		return fmt.Errorf("GPUs: %w", err)
	}
	return nil
}

// diffGPUs fills change's GPU lists from the rows before the report. GPUs of
// the node not reported are put in Removed; removeVanishedFromNode moves
// those it must keep to Retained.
func diffGPUs(node scheduling.Node, before map[string]storedGPU, change *NodeChange) {
	reported := make(map[string]bool, len(node.GPUs))
	for i, g := range node.GPUs {
		reported[g.UUID] = true
		old, ok := before[g.UUID]
		switch {
		case !ok || old.node != node.Name:
			change.Added = append(change.Added, g.UUID)
			continue
		case old.model != g.Model || old.memoryMiB != g.MemoryMiB || old.domain != g.NVLinkDomain || old.index != int32(i):
			change.Updated = append(change.Updated, g.UUID)
		}
		switch {
		case old.healthy && !g.Healthy:
			change.BecameUnhealthy = append(change.BecameUnhealthy, g.UUID)
		case !old.healthy && g.Healthy:
			change.BecameHealthy = append(change.BecameHealthy, g.UUID)
		}
	}
	for uuid, old := range before {
		if old.node == node.Name && !reported[uuid] {
			change.Removed = append(change.Removed, uuid)
		}
	}
	for _, l := range [][]string{change.Added, change.Updated, change.BecameHealthy, change.BecameUnhealthy, change.Removed} {
		slices.Sort(l)
	}
}

// removeVanishedFromNode deletes the node's GPUs no longer reported, except
// those holding an active allocation, which are marked unhealthy and moved
// from change.Removed to change.Retained (and to change.BecameUnhealthy when
// they were healthy before).
func removeVanishedFromNode(ctx context.Context, tx pgx.Tx, before map[string]storedGPU, change *NodeChange) error {
	if len(change.Removed) == 0 {
		return nil
	}
	busy, err := collectStrings(tx.Query(ctx, `
		UPDATE gpus SET healthy = false
		WHERE uuid = ANY($1) AND EXISTS (SELECT 1 FROM allocation_gpus a WHERE a.gpu_uuid = gpus.uuid AND a.active)
		RETURNING uuid`, change.Removed))
	if err != nil {
		return fmt.Errorf("mark vanished GPUs unhealthy: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM gpu_usage WHERE gpu_uuid = ANY($1) AND used_milli = 0`, change.Removed); err != nil {
		return fmt.Errorf("delete usage of vanished GPUs: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM gpus WHERE uuid = ANY($1)
			AND NOT EXISTS (SELECT 1 FROM allocation_gpus a WHERE a.gpu_uuid = gpus.uuid AND a.active)`,
		change.Removed); err != nil {
		return fmt.Errorf("delete vanished GPUs: %w", err)
	}
	slices.Sort(busy)
	change.Retained = busy
	change.Removed = slices.DeleteFunc(change.Removed, func(u string) bool {
		_, kept := slices.BinarySearch(busy, u)
		return kept
	})
	for _, u := range busy {
		if before[u].healthy {
			change.BecameUnhealthy = append(change.BecameUnhealthy, u)
		}
	}
	slices.Sort(change.BecameUnhealthy)
	return nil
}

// evidence is the change as audit evidence; empty lists are left out.
func (c *NodeChange) evidence() map[string]any {
	ev := map[string]any{"node": c.Node, "pool": c.Pool}
	flags := map[string]bool{"pool_created": c.PoolCreated, "node_created": c.NodeCreated, "host_changed": c.HostChanged,
		"labels_changed": c.LabelsChanged}
	for k, v := range flags {
		if v {
			ev[k] = true
		}
	}
	if c.PreviousPool != "" {
		ev["previous_pool"] = c.PreviousPool
	}
	lists := map[string][]string{
		"added": c.Added, "removed": c.Removed, "retained": c.Retained, "updated": c.Updated,
		"became_healthy": c.BecameHealthy, "became_unhealthy": c.BecameUnhealthy,
	}
	for k, l := range lists {
		if len(l) > 0 {
			ev[k] = l
		}
	}
	return ev
}

// GPUSample is one utilisation measurement of one GPU, reported by its node's
// agent: the evidence the reclaim scan reads to classify an allocation as
// idle.
type GPUSample struct {
	GPUUUID       string
	At            time.Time
	GPUPercent    int   // NVML utilization.gpu, 0..100
	MemoryUsedMiB int64 // device memory in use, MiB
}

// UnknownGPUError is returned by InsertGPUSamples when samples name GPUs that
// are not stored on the reporting node. It wraps ErrNotFound.
type UnknownGPUError struct {
	Node  string
	UUIDs []string // the unknown UUIDs, in UUID order
}

// Error names the node and the GPUs.
func (e *UnknownGPUError) Error() string {
	return fmt.Sprintf("GPUs %s are not in the inventory of node %s", strings.Join(e.UUIDs, ", "), e.Node)
}

// Unwrap makes errors.Is(err, ErrNotFound) hold.
func (e *UnknownGPUError) Unwrap() error { return ErrNotFound }

// InsertGPUSamples stores samples reported by node's agent and returns how
// many were new. Every sample must name a GPU stored on node (so an agent
// cannot write evidence about another node's GPUs); otherwise nothing is
// stored and the error is an *UnknownGPUError. A sample already stored (same
// GPU and instant, a retried report) is skipped, so retries are safe. Other
// errors are database errors (a percent outside 0..100 or a negative memory
// violates the table's checks), wrapped with "insert GPU samples".
func (s *Store) InsertGPUSamples(ctx context.Context, node string, samples []GPUSample) (int64, error) {
	n := len(samples)
	uuids, at := make([]string, n), make([]time.Time, n)
	pct, mem := make([]int16, n), make([]int64, n)
	for i, sm := range samples {
		uuids[i], at[i], pct[i], mem[i] = sm.GPUUUID, sm.At, int16(sm.GPUPercent), sm.MemoryUsedMiB
	}
	var inserted int64
	err := s.inTx(ctx, "insert GPU samples of "+node, func(tx pgx.Tx) error {
		unknown, err := collectStrings(tx.Query(ctx, `
			SELECT DISTINCT u FROM unnest($1::text[]) AS u
			WHERE NOT EXISTS (SELECT 1 FROM gpus g WHERE g.uuid = u AND g.node = $2) ORDER BY u`, uuids, node))
		if err != nil {
			return err
		}
		if len(unknown) > 0 {
			return &UnknownGPUError{Node: node, UUIDs: unknown}
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO gpu_samples (gpu_uuid, at, gpu_percent, memory_used_mib)
			SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int2[], $4::int8[])
			ON CONFLICT (gpu_uuid, at) DO NOTHING`, uuids, at, pct, mem)
		inserted = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: insert GPU samples: %w", err)
	}
	return inserted, nil
}

// GPUSamples returns the stored samples of the given GPUs taken at or after
// since, by GPU then time. Errors are wrapped with "GPU samples".
func (s *Store) GPUSamples(ctx context.Context, uuids []string, since time.Time) ([]GPUSample, error) {
	var out []GPUSample
	err := forEachRow(ctx, s.pool, `
		SELECT gpu_uuid, at, gpu_percent, memory_used_mib FROM gpu_samples
		WHERE gpu_uuid = ANY($1) AND at >= $2 ORDER BY gpu_uuid, at`, []any{uuids, since},
		func(rows pgx.Rows) error {
			var sm GPUSample
			var pct int16
			if err := rows.Scan(&sm.GPUUUID, &sm.At, &pct, &sm.MemoryUsedMiB); err != nil {
				return err
			}
			sm.At, sm.GPUPercent = sm.At.UTC(), int(pct)
			out = append(out, sm)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("store: GPU samples: %w", err)
	}
	return out, nil
}

// DefaultPruneBatch is how many gpu_samples rows one statement of
// PruneGPUSamples deletes when the caller gives no batch size: small enough
// that each statement holds its row locks and writes its WAL briefly, large
// enough that a day of samples of a 1,000-GPU pool (2.9 million rows at one
// sample per 30 s) goes in a few hundred statements.
const DefaultPruneBatch = 10000

// PruneGPUSamples deletes the samples taken before before and returns how
// many it deleted; the service runs it periodically to bound the table (one
// sample per GPU per agent refresh, 2,880 a day per GPU at 30 s). It deletes
// in statements of at most batch rows (≤ 0 means DefaultPruneBatch), each
// its own transaction, oldest first through the btree index on at
// (migration 00120), until one deletes fewer than batch; a cancelled ctx
// stops it between statements, keeping what earlier ones deleted. Errors are
// wrapped with "prune GPU samples" and come with the count deleted so far.
func (s *Store) PruneGPUSamples(ctx context.Context, before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	var deleted int64
	for {
		tag, err := s.pool.Exec(ctx, `
			DELETE FROM gpu_samples WHERE (gpu_uuid, at) IN (
				SELECT gpu_uuid, at FROM gpu_samples WHERE at < $1 ORDER BY at LIMIT $2)`, before, batch)
		if err != nil {
			return deleted, fmt.Errorf("store: prune GPU samples: %w", err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return deleted, nil
		}
	}
}

// RunSpec is what a node agent needs to start a run as a process: the job's
// command and environment and the checkpoint to resume from.
type RunSpec struct {
	JobID     string
	RunID     string
	Node      string // node of the run's allocation
	Command   []string
	Env       map[string]string
	StartStep int64 // the step the run was started to resume from (MarkRunning's startStep)
	// ResumeFrom is the job's last valid checkpoint — the one the run resumes
	// from, or a newer one recorded by an earlier attempt of this run; nil
	// when the job has none.
	ResumeFrom *scheduling.Checkpoint
	Ended      bool // the run has ended (FinishRun); a late attempt must not start it
}

// runSpecRow is GetRunSpec's row.
type runSpecRow struct {
	JobID          string         `db:"job_id"`
	Node           string         `db:"node"`
	Spec           specDoc        `db:"spec"`
	LastCheckpoint *checkpointDoc `db:"last_checkpoint"`
	StartStep      int64          `db:"start_step"`
	EndedAt        *time.Time     `db:"ended_at"`
}

// GetRunSpec returns the spec of run runID. Errors wrap ErrNotFound (no such
// run) or database errors, with "get run spec".
func (s *Store) GetRunSpec(ctx context.Context, runID string) (*RunSpec, error) {
	r, err := queryOne[runSpecRow](ctx, s.pool, `
		SELECT r.job_id, a.node, j.spec, j.recovery->'last_checkpoint' AS last_checkpoint, r.start_step, r.ended_at
		FROM runs r JOIN jobs j ON j.id = r.job_id JOIN allocations a ON a.id = r.allocation_id
		WHERE r.id = $1`, runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: get run spec: run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get run spec %s: %w", runID, err)
	}
	rs := &RunSpec{JobID: r.JobID, RunID: runID, Node: r.Node, Command: r.Spec.Command, Env: r.Spec.Env,
		StartStep: r.StartStep, Ended: r.EndedAt != nil}
	rs.ResumeFrom = r.LastCheckpoint.checkpoint()
	return rs, nil
}
