package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// querier is what both *pgxpool.Pool and pgx.Tx offer for reads.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// UpsertInventory makes the stored nodes and GPUs of each given pool exactly
// those in pools (pools not listed are untouched). A GPU that disappeared but
// still holds an active allocation is kept and marked unhealthy, and its node
// kept but unschedulable, so that the allocation can be released normally;
// other vanished GPUs and nodes are deleted. A GPU UUID that reappears on a
// different node moves there. Calling it again with the same pools changes
// nothing, so retries are safe. Errors: duplicate node names or GPU UUIDs in
// the input, or database errors, wrapped with "upsert inventory".
func (s *Store) UpsertInventory(ctx context.Context, pools []scheduling.Pool) error {
	inv, err := flattenInventory(pools)
	if err != nil {
		return fmt.Errorf("store: upsert inventory: %w", err)
	}
	return s.inTx(ctx, "upsert inventory", func(tx pgx.Tx) error {
		return upsertInventoryTx(ctx, tx, inv)
	})
}

// flatInventory is the input of UpsertInventory as column arrays.
type flatInventory struct {
	poolNames, poolStages      []string
	poolAvailable              []bool
	nodeNames, nodePools       []string
	nodeCPU, nodeMem           []int64
	nodeSched                  []bool
	nodeLabels                 []string // JSON objects
	gpuUUIDs, gpuNodes, models []string
	domains                    []string
	gpuIndex                   []int32
	gpuMem                     []int64
	gpuHealthy                 []bool
}

// flattenInventory checks the input for duplicates and turns it into arrays
// for unnest; GPUs are sorted by UUID so that their row locks follow the
// package's lock order.
func flattenInventory(pools []scheduling.Pool) (*flatInventory, error) {
	inv := &flatInventory{}
	seenNode := map[string]string{}
	type gpuRow struct {
		g    scheduling.GPU
		node string
		idx  int32
	}
	var gpus []gpuRow
	seenGPU := map[string]bool{}
	for pi, p := range pools {
		if p.Name == "" {
			return nil, invalidf(fmt.Sprintf("pools[%d].name", pi), "pool with empty name")
		}
		if slices.Contains(inv.poolNames, p.Name) {
			return nil, invalidf(fmt.Sprintf("pools[%d].name", pi), "pool %q listed twice", p.Name)
		}
		stage := p.Stage
		if stage == "" {
			stage = vocab.StageObserve
		}
		inv.poolNames = append(inv.poolNames, p.Name)
		inv.poolAvailable = append(inv.poolAvailable, p.Available)
		inv.poolStages = append(inv.poolStages, string(stage))
		for ni, n := range p.Nodes {
			if other, dup := seenNode[n.Name]; dup {
				return nil, invalidf(fmt.Sprintf("pools[%d].nodes[%d].name", pi, ni),
					"node %q listed in pools %q and %q", n.Name, other, p.Name)
			}
			seenNode[n.Name] = p.Name
			inv.nodeNames = append(inv.nodeNames, n.Name)
			inv.nodePools = append(inv.nodePools, p.Name)
			inv.nodeCPU = append(inv.nodeCPU, n.CPUMilli)
			inv.nodeMem = append(inv.nodeMem, n.MemoryMiB)
			inv.nodeSched = append(inv.nodeSched, n.Schedulable)
			labels, err := labelsJSON(fmt.Sprintf("pools[%d].nodes[%d].labels", pi, ni), n.Labels)
			if err != nil {
				return nil, err
			}
			inv.nodeLabels = append(inv.nodeLabels, labels)
			for i, g := range n.GPUs {
				if g.UUID == "" || seenGPU[g.UUID] {
					return nil, invalidf(fmt.Sprintf("pools[%d].nodes[%d].gpus[%d].uuid", pi, ni, i),
						"node %q: GPU UUID %q empty or listed twice", n.Name, g.UUID)
				}
				seenGPU[g.UUID] = true
				gpus = append(gpus, gpuRow{g: g, node: n.Name, idx: int32(i)})
			}
		}
	}
	slices.SortFunc(gpus, func(a, b gpuRow) int { return cmpString(a.g.UUID, b.g.UUID) })
	for _, r := range gpus {
		inv.gpuUUIDs = append(inv.gpuUUIDs, r.g.UUID)
		inv.gpuNodes = append(inv.gpuNodes, r.node)
		inv.gpuIndex = append(inv.gpuIndex, r.idx)
		inv.models = append(inv.models, r.g.Model)
		inv.gpuMem = append(inv.gpuMem, r.g.MemoryMiB)
		inv.domains = append(inv.domains, r.g.NVLinkDomain)
		inv.gpuHealthy = append(inv.gpuHealthy, r.g.Healthy)
	}
	return inv, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func upsertInventoryTx(ctx context.Context, tx pgx.Tx, inv *flatInventory) error {
	if _, err := tx.Exec(ctx, `
		INSERT INTO pools (name, available, stage, updated_at)
		SELECT u.name, u.available, u.stage, now() FROM unnest($1::text[], $2::bool[], $3::text[]) AS u(name, available, stage)
		ON CONFLICT (name) DO UPDATE SET available = EXCLUDED.available, stage = EXCLUDED.stage, updated_at = now()`,
		inv.poolNames, inv.poolAvailable, inv.poolStages); err != nil {
		return fmt.Errorf("pools: %w", err)
	}
	// Lock every GPU this call may change, in UUID order, before reading which
	// of them hold active allocations: ApplyCycle takes the same locks, so the
	// busy set cannot change under us.
	existing, err := collectStrings(tx.Query(ctx, `
		SELECT g.uuid FROM gpus g JOIN nodes n ON n.name = g.node
		WHERE n.pool = ANY($1) OR g.uuid = ANY($2)
		ORDER BY g.uuid FOR UPDATE OF g`, inv.poolNames, inv.gpuUUIDs))
	if err != nil {
		return fmt.Errorf("lock GPUs: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO nodes (name, pool, cpu_milli, memory_mib, schedulable, labels, updated_at)
		SELECT u.name, u.pool, u.cpu_milli, u.memory_mib, u.schedulable, u.labels::jsonb, now()
		FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::bool[], $6::text[])
			AS u(name, pool, cpu_milli, memory_mib, schedulable, labels)
		ORDER BY u.name
		ON CONFLICT (name) DO UPDATE SET pool = EXCLUDED.pool, cpu_milli = EXCLUDED.cpu_milli,
			memory_mib = EXCLUDED.memory_mib, schedulable = EXCLUDED.schedulable, labels = EXCLUDED.labels,
			updated_at = now()`,
		inv.nodeNames, inv.nodePools, inv.nodeCPU, inv.nodeMem, inv.nodeSched, inv.nodeLabels); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO gpus (uuid, node, device_index, model, memory_mib, nvlink_domain, healthy)
		SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::int8[], $6::text[], $7::bool[])
		ON CONFLICT (uuid) DO UPDATE SET node = EXCLUDED.node, device_index = EXCLUDED.device_index,
			model = EXCLUDED.model, memory_mib = EXCLUDED.memory_mib,
			nvlink_domain = EXCLUDED.nvlink_domain, healthy = EXCLUDED.healthy`,
		inv.gpuUUIDs, inv.gpuNodes, inv.gpuIndex, inv.models, inv.gpuMem, inv.domains, inv.gpuHealthy); err != nil {
		return fmt.Errorf("GPUs: %w", err)
	}
	return removeVanished(ctx, tx, inv, existing)
}

// removeVanished deletes the GPUs and nodes of the given pools that are no
// longer reported, except those still holding active allocations, which are
// marked unhealthy (GPUs) and unschedulable (nodes).
func removeVanished(ctx context.Context, tx pgx.Tx, inv *flatInventory, existing []string) error {
	var vanished []string
	for _, u := range existing {
		if _, found := slices.BinarySearch(inv.gpuUUIDs, u); !found {
			vanished = append(vanished, u)
		}
	}
	if _, err := tx.Exec(ctx, `
		UPDATE gpus SET healthy = false
		WHERE uuid = ANY($1) AND EXISTS (SELECT 1 FROM allocation_gpus a WHERE a.gpu_uuid = gpus.uuid AND a.active)`,
		vanished); err != nil {
		return fmt.Errorf("mark vanished GPUs unhealthy: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM gpu_usage WHERE gpu_uuid = ANY($1) AND used_milli = 0`, vanished); err != nil {
		return fmt.Errorf("delete usage of vanished GPUs: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM gpus WHERE uuid = ANY($1)
			AND NOT EXISTS (SELECT 1 FROM allocation_gpus a WHERE a.gpu_uuid = gpus.uuid AND a.active)`,
		vanished); err != nil {
		return fmt.Errorf("delete vanished GPUs: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		DELETE FROM nodes WHERE pool = ANY($1) AND NOT (name = ANY($2))
			AND NOT EXISTS (SELECT 1 FROM gpus g WHERE g.node = nodes.name)`,
		inv.poolNames, inv.nodeNames); err != nil {
		return fmt.Errorf("delete vanished nodes: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE nodes SET schedulable = false, updated_at = now()
		WHERE pool = ANY($1) AND NOT (name = ANY($2)) AND schedulable`,
		inv.poolNames, inv.nodeNames); err != nil {
		return fmt.Errorf("cordon vanished nodes: %w", err)
	}
	return nil
}

// collectStrings scans a one-column text result.
func collectStrings(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// GetInventory returns every pool with its nodes and GPUs, pools and nodes by
// name and GPUs by device index. Errors are wrapped with "get inventory".
func (s *Store) GetInventory(ctx context.Context) ([]scheduling.Pool, error) {
	var inv inventoryLoader
	if err := runQueries(ctx, s.pool, inv.queries()); err != nil {
		return nil, fmt.Errorf("store: get inventory: %w", err)
	}
	return inv.pools(), nil
}

// inventoryLoader reads pools, nodes and GPUs with one query per table and
// assembles them, sorted in Go (byte order, independent of the database
// collation).
type inventoryLoader struct {
	poolRows []scheduling.Pool
	nodeRows []nodeRow
	gpuRows  []gpuRow
}

type nodeRow struct {
	pool string
	node scheduling.Node
}

type gpuRow struct {
	node  string
	index int32
	gpu   scheduling.GPU
}

func (l *inventoryLoader) queries() []rowQuery {
	return []rowQuery{
		{sql: `SELECT name, available, stage FROM pools`, fn: func(rows pgx.Rows) error {
			var p scheduling.Pool
			err := rows.Scan(&p.Name, &p.Available, &p.Stage)
			l.poolRows = append(l.poolRows, p)
			return err
		}},
		{sql: `SELECT name, pool, cpu_milli, memory_mib, schedulable, labels FROM nodes`, fn: func(rows pgx.Rows) error {
			var r nodeRow
			err := rows.Scan(&r.node.Name, &r.pool, &r.node.CPUMilli, &r.node.MemoryMiB, &r.node.Schedulable, &r.node.Labels)
			if len(r.node.Labels) == 0 {
				r.node.Labels = nil // '{}' reads as no labels
			}
			l.nodeRows = append(l.nodeRows, r)
			return err
		}},
		{sql: `SELECT uuid, node, device_index, model, memory_mib, nvlink_domain, healthy FROM gpus`, fn: func(rows pgx.Rows) error {
			var r gpuRow
			err := rows.Scan(&r.gpu.UUID, &r.node, &r.index, &r.gpu.Model, &r.gpu.MemoryMiB, &r.gpu.NVLinkDomain, &r.gpu.Healthy)
			l.gpuRows = append(l.gpuRows, r)
			return err
		}},
	}
}

// pools assembles the rows: pools and nodes by name, GPUs by device index
// then UUID.
func (l *inventoryLoader) pools() []scheduling.Pool {
	slices.SortFunc(l.poolRows, func(a, b scheduling.Pool) int { return cmpString(a.Name, b.Name) })
	slices.SortFunc(l.nodeRows, func(a, b nodeRow) int { return cmpString(a.node.Name, b.node.Name) })
	slices.SortFunc(l.gpuRows, func(a, b gpuRow) int {
		if c := cmpString(a.node, b.node); c != 0 {
			return c
		}
		if a.index != b.index {
			return int(a.index - b.index)
		}
		return cmpString(a.gpu.UUID, b.gpu.UUID)
	})
	nodeIdx := make(map[string]int, len(l.nodeRows))
	for i := range l.nodeRows {
		nodeIdx[l.nodeRows[i].node.Name] = i
	}
	for _, g := range l.gpuRows {
		n := &l.nodeRows[nodeIdx[g.node]].node
		n.GPUs = append(n.GPUs, g.gpu)
	}
	poolIdx := make(map[string]int, len(l.poolRows))
	for i := range l.poolRows {
		poolIdx[l.poolRows[i].Name] = i
	}
	for _, n := range l.nodeRows {
		p := &l.poolRows[poolIdx[n.pool]]
		p.Nodes = append(p.Nodes, n.node)
	}
	return l.poolRows
}

// rowQuery is one query of a pipelined batch and the function run on each row.
type rowQuery struct {
	sql  string
	args []any
	fn   func(pgx.Rows) error
}

// batcher is what *pgxpool.Pool and pgx.Tx offer for pipelining.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// runQueries sends every query in one pipelined round trip and runs each
// query's row function in order.
func runQueries(ctx context.Context, db batcher, qs []rowQuery) error {
	b := &pgx.Batch{}
	for _, q := range qs {
		b.Queue(q.sql, q.args...).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := q.fn(rows); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	}
	return db.SendBatch(ctx, b).Close()
}

// forEachRow runs sql and calls fn for each row, closing the rows on every path.
func forEachRow(ctx context.Context, q querier, sql string, args []any, fn func(pgx.Rows) error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// UpsertQueues inserts or updates each queue by name; queues not listed are
// kept (with their stored shares). Repeating the call changes nothing. A
// share out of range (MinShare outside 0..1, MaxShare outside 0..1, MinShare
// above a non-zero MaxShare) is a *ValidationError (ErrInvalid) naming
// queues[i].min_share or queues[i].max_share, and nothing is stored; other
// errors are wrapped with "upsert queues".
func (s *Store) UpsertQueues(ctx context.Context, queues []scheduling.Queue) error {
	for i, q := range queues {
		switch {
		case !(q.MinShare >= 0 && q.MinShare <= 1):
			return invalidf(fmt.Sprintf("queues[%d].min_share", i), "%v is outside 0..1", q.MinShare)
		case !(q.MaxShare >= 0 && q.MaxShare <= 1):
			return invalidf(fmt.Sprintf("queues[%d].max_share", i), "%v is outside 0..1 (0: no cap)", q.MaxShare)
		case q.MaxShare > 0 && q.MinShare > q.MaxShare:
			return invalidf(fmt.Sprintf("queues[%d].max_share", i), "%v is below min_share %v", q.MaxShare, q.MinShare)
		}
	}
	names := make([]string, len(queues))
	tiers := make([]string, len(queues))
	shares := make([]float64, len(queues))
	maxWait := make([]float64, len(queues))
	lowRisk := make([]bool, len(queues))
	protected := make([]bool, len(queues))
	minShare := make([]float64, len(queues))
	maxShare := make([]float64, len(queues))
	for i, q := range queues {
		names[i], tiers[i], shares[i] = q.Name, q.Tier.String(), q.ServiceShare
		maxWait[i], lowRisk[i], protected[i] = q.MaxWait.Seconds(), q.LowRisk, q.Protected
		minShare[i], maxShare[i] = q.MinShare, q.MaxShare
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO queues (name, tier, service_share, max_wait_s, low_risk, protected, min_share, max_share, updated_at)
		SELECT u.*, now() FROM unnest($1::text[], $2::text[], $3::float8[], $4::float8[], $5::bool[], $6::bool[],
			$7::float8[], $8::float8[])
			AS u(name, tier, service_share, max_wait_s, low_risk, protected, min_share, max_share)
		ORDER BY u.name
		ON CONFLICT (name) DO UPDATE SET tier = EXCLUDED.tier, service_share = EXCLUDED.service_share,
			max_wait_s = EXCLUDED.max_wait_s, low_risk = EXCLUDED.low_risk, protected = EXCLUDED.protected,
			min_share = EXCLUDED.min_share, max_share = EXCLUDED.max_share,
			updated_at = now()`, names, tiers, shares, maxWait, lowRisk, protected, minShare, maxShare)
	if err != nil {
		return fmt.Errorf("store: upsert queues: %w", err)
	}
	return nil
}

// ListQueues returns every queue ordered by name. Errors are wrapped with "list queues".
func (s *Store) ListQueues(ctx context.Context) ([]scheduling.Queue, error) {
	qs, err := loadQueues(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("store: list queues: %w", err)
	}
	return qs, nil
}

func loadQueues(ctx context.Context, q querier) ([]scheduling.Queue, error) {
	var out []scheduling.Queue
	qq := queuesQuery(&out)
	err := forEachRow(ctx, q, qq.sql, nil, qq.fn)
	return out, err
}

// queuesQuery reads every queue into *out, ordered by name.
func queuesQuery(out *[]scheduling.Queue) rowQuery {
	return rowQuery{sql: `SELECT name, tier, service_share, max_wait_s, low_risk, protected, min_share, max_share
		FROM queues ORDER BY name COLLATE "C"`,
		fn: func(rows pgx.Rows) error {
			var qu scheduling.Queue
			var tier string
			var maxWait float64
			err := rows.Scan(&qu.Name, &tier, &qu.ServiceShare, &maxWait, &qu.LowRisk, &qu.Protected, &qu.MinShare, &qu.MaxShare)
			if err != nil {
				return err
			}
			if qu.Tier, err = vocab.ParseTier(tier); err != nil {
				return fmt.Errorf("queue %q: %w", qu.Name, err)
			}
			qu.MaxWait = time.Duration(maxWait * float64(time.Second))
			*out = append(*out, qu)
			return nil
		}}
}

// UpsertQuotas inserts or updates each quota by (project, pool); quotas not
// listed are kept. Repeating the call changes nothing. Errors are wrapped with
// "upsert quotas".
func (s *Store) UpsertQuotas(ctx context.Context, quotas []scheduling.Quota) error {
	projects := make([]string, len(quotas))
	pools := make([]string, len(quotas))
	nominal := make([]int64, len(quotas))
	borrow := make([]int64, len(quotas))
	for i, q := range quotas {
		projects[i], pools[i], nominal[i], borrow[i] = q.Project, q.Pool, q.NominalMilli, q.BorrowingLimitMilli
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO quotas (project, pool, nominal_milli, borrowing_limit_milli, updated_at)
		SELECT u.*, now() FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[])
			AS u(project, pool, nominal_milli, borrowing_limit_milli)
		ORDER BY u.project, u.pool
		ON CONFLICT (project, pool) DO UPDATE SET nominal_milli = EXCLUDED.nominal_milli,
			borrowing_limit_milli = EXCLUDED.borrowing_limit_milli, updated_at = now()`,
		projects, pools, nominal, borrow)
	if err != nil {
		return fmt.Errorf("store: upsert quotas: %w", err)
	}
	return nil
}

// quotasQuery reads every quota into *out, ordered by project then pool.
func quotasQuery(out *[]scheduling.Quota) rowQuery {
	return rowQuery{sql: `SELECT project, pool, nominal_milli, borrowing_limit_milli FROM quotas ORDER BY project COLLATE "C", pool COLLATE "C"`,
		fn: func(rows pgx.Rows) error {
			var qu scheduling.Quota
			err := rows.Scan(&qu.Project, &qu.Pool, &qu.NominalMilli, &qu.BorrowingLimitMilli)
			*out = append(*out, qu)
			return err
		}}
}

// CheckNodeLabels checks a node's labels (inventory.CheckLabels: at most
// inventory.MaxLabels, keys and values 1..inventory.MaxLabelLength bytes). It
// returns a *ValidationError (ErrInvalid) naming field, or field + "." + key
// for a bad value, or nil.
func CheckNodeLabels(field string, labels map[string]string) error {
	key, err := inventory.CheckLabels(labels)
	if err == nil {
		return nil
	}
	if key != "" {
		field += "." + key
	}
	return invalidf(field, "%s", err.Error())
}

// labelsJSON checks a node's labels (CheckNodeLabels) and encodes them as a
// JSON object ("{}" for none) for the nodes.labels column.
func labelsJSON(field string, labels map[string]string) (string, error) {
	if err := CheckNodeLabels(field, labels); err != nil {
		return "", err
	}
	if len(labels) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(labels)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return string(b), nil
}
