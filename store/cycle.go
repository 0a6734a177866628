package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/accounting"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// notYetEvaluatedDetail is the detail of a vocab.ReasonNotYetEvaluated wait
// event.
const notYetEvaluatedDetail = "submitted or requeued; no scheduling cycle had evaluated the job yet"

// CycleOutcome is what ApplyCycle did with one scheduling cycle's result. It
// is stored with the cycle, so a replay returns the same value.
type CycleOutcome struct {
	CycleID string `json:"cycle_id"`
	// Replayed is true when the cycle had already been applied: nothing was
	// changed and the stored outcome was returned.
	Replayed bool `json:"-"`
	// OutOfShard counts the placements, proposals and wait statuses
	// ApplyShardCycle left out because their pool was no longer in the
	// cycle's shard (a pool moved while the cycle planned).
	OutOfShard int `json:"out_of_shard,omitempty"`
	// Placed lists the placements granted, in the result's order.
	Placed []PlacedJob `json:"placed"`
	// Conflicts lists the placements refused because the stored state no
	// longer allowed them (GPU capacity taken, job no longer pending, GPU
	// unhealthy or gone, …); the jobs stay pending for the next cycle.
	Conflicts []Conflict `json:"conflicts"`
	// Preemptions lists the preemptions started by this cycle (proposals with
	// Act set whose victim allocation had no preemption in progress); the
	// caller starts one PreemptionWorkflow for each.
	Preemptions []StartedPreemption `json:"preemptions"`
	// WaitTransitions counts the wait events opened (the reason changed, or
	// the job had no open event).
	WaitTransitions int `json:"wait_transitions"`
	// WaitTransitionsByReason splits WaitTransitions by the new reason (the
	// gpugov_wait_reason_transitions_total metric's counts, taken from the
	// stored waits rather than from a process's memory of the previous
	// cycle, which another replica may have run); nil when there were none.
	WaitTransitionsByReason map[string]int `json:"wait_transitions_by_reason,omitempty"`
	// WaitRefreshes counts open wait events whose detail, re-evaluation
	// condition or blocking job the cycle rewrote in place (same reason).
	WaitRefreshes int `json:"wait_refreshes"`
	// StaleWaits counts wait statuses ignored because their job was no longer
	// pending (cancelled, or placed by an earlier cycle).
	StaleWaits int `json:"stale_waits"`
	// ExplanationsKept counts waiting jobs whose stored explanation the
	// cycle left as it was: same reason, same stable part and younger than
	// ExplanationRefreshInterval (their rows are not written).
	ExplanationsKept int `json:"explanations_kept"`
}

// PlacedJob is one granted placement.
type PlacedJob struct {
	JobID        string                `json:"job_id"`
	AllocationID string                `json:"allocation_id"`
	Pool         string                `json:"pool"`
	Node         string                `json:"node"`
	GPUs         []scheduling.GPUShare `json:"gpus"`
}

// Conflict is one refused placement and why.
type Conflict struct {
	JobID  string `json:"job_id"`
	Reason string `json:"reason"`
}

// StartedPreemption is one victim allocation a preemption workflow must now
// checkpoint and release for ForJobID.
type StartedPreemption struct {
	PreemptionID string `json:"preemption_id"`
	ForJobID     string `json:"for_job_id"`
	VictimJobID  string `json:"victim_job_id"`
	AllocationID string `json:"allocation_id"`
}

// ApplyCycle persists one scheduling cycle's result in ONE transaction:
//
//   - placements become allocations (with allocation_gpus rows); the GPU rows
//     are locked in UUID order and a placement whose GPUs would pass 1000
//     milli-GPU (or whose job is no longer pending, or whose GPU is unhealthy,
//     cordoned or gone) is skipped and listed in Conflicts (accounting's
//     admission rules decide the capacity part; the gpu_usage CHECK
//     constraint is the backstop); placed jobs become
//     placed, their open wait event closes at now and their current eligible
//     stretch (aging_since to now) is added to AccruedAgingS;
//   - each wait status updates the job's reason and explanation (which names
//     the cycle, its instant, the next re-evaluation and the aging overtake)
//     when what it says changed or the stored one is
//     ExplanationRefreshInterval old (longer the deeper the job's rank;
//     otherwise the row is not written: CycleOutcome.ExplanationsKept),
//     and writes a wait-event transition only when the reason changed
//     (accounting.WaitChanged); with the same reason the open event takes the
//     new detail, re-evaluation condition and blocking job in place, keeping
//     its start (accounting.WaitRefreshed); a reason that earns no aging
//     (vocab.WaitReason.EarnsAging) stops the job's eligible stretch at now,
//     one that earns starts it (accounting.AgingClock.OnReason);
//   - a job this cycle places or gives a reason while it has no open wait
//     event (its first evaluation since it was submitted or requeued) first
//     gets a closed vocab.ReasonNotYetEvaluated event from then (jobs.waiting_since,
//     or the end of its previous event if later) to now, so that its wait
//     events cover every second from submit to placement;
//   - placements, refused placements and preemption proposals are recorded
//     as decisions, and so is a wait status whose reason or blocking job
//     differs from the open event's (the scheduler's action for the job
//     changed; LastDecision reads them); placements and proposals also go to
//     the audit log (actor "scheduler"); proposals with Act start preemptions.
//   - the submitter's notifications (docs/design.md §3, notifications) go
//     into the outbox in the same transaction: job.placed per granted
//     placement, job.wait_reason per wait transition whose reason changed to
//     one that asks the submitter to act (vocab.WaitReason.NotifiesSubmitter).
//
// When the last LoadSnapshot of this Store was at now (the scheduler's
// cycle), the waiting jobs whose stored explanation that load saw current
// are neither read nor written, and the due ones are rewritten without a
// read, so the cycle's cost follows what changed, not the number of
// waiting jobs (applyWaits, pendingWaits; docs/design.md §8, "The whole
// cycle at scale").
//
// It is idempotent by cycleID: when the cycle was already applied (a retried
// activity), it changes nothing and returns the stored outcome with Replayed
// set; two concurrent calls with one ID apply it once. Errors are wrapped with
// "apply cycle <id>"; on error nothing is stored. An empty cycleID or a nil
// res gives an error matching ErrInvalid.
func (s *Store) ApplyCycle(ctx context.Context, cycleID string, res *scheduling.Result, now time.Time) (*CycleOutcome, error) {
	return s.ApplyShardCycle(ctx, "", cycleID, res, now)
}

// ApplyShardCycle is ApplyCycle for a cycle of scheduler shard shard, planned
// on LoadShardSnapshot(shard): it takes that shard's wait memo, and, first in
// its transaction, locks the shard's pools rows (FOR SHARE, in name order:
// SetPoolShards' FOR UPDATE waits for it, and it for SetPoolShards) and
// leaves out every placement, preemption proposal and wait status of a job
// whose pool is not, at that instant, in the shard (CycleOutcome.OutOfShard):
// a cycle planned before its pool moved to another shard touches nothing of
// that pool once the move committed (docs/design.md §4 "Scheduler shards").
// "" is ApplyCycle (every pool, no check).
func (s *Store) ApplyShardCycle(ctx context.Context, shard, cycleID string, res *scheduling.Result, now time.Time) (*CycleOutcome, error) {
	if cycleID == "" {
		return nil, fmt.Errorf("store: apply cycle: %w", invalidf("cycle_id", "cycle ID is required"))
	}
	if res == nil {
		return nil, fmt.Errorf("store: apply cycle %s: %w", cycleID, invalidf("result", "result is required"))
	}
	var out *CycleOutcome
	memo := s.takeWaitMemo(shard, now)
	err := s.inTx(ctx, "apply cycle "+cycleID, func(tx pgx.Tx) error {
		if err := noJIT(ctx, tx); err != nil {
			return err
		}
		r, dropped := res, 0
		if shard != "" {
			var err error
			if r, dropped, err = shardResultTx(ctx, tx, shard, res); err != nil {
				return err
			}
		}
		var err error
		out, err = applyCycleTx(ctx, tx, cycleID, r, now, memo)
		if err == nil && !out.Replayed {
			out.OutOfShard = dropped
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// cycleJob is a job row locked by a cycle.
type cycleJob struct {
	state           vocab.JobState
	held, cancelled bool
	pool            string
	cpuMilli, memMi int64
	// seq is the job's job_queue.seq now: the version of its request, which
	// AmendJob renews (0 when the job is not live).
	seq int64
}

func applyCycleTx(ctx context.Context, tx pgx.Tx, cycleID string, res *scheduling.Result, now time.Time,
	memo map[string]storedWait) (*CycleOutcome, error) {
	tag, err := tx.Exec(ctx, `
		INSERT INTO scheduling_cycles (id, at, policy_version) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
		cycleID, now, res.PolicyVersion)
	if err != nil {
		return nil, fmt.Errorf("record cycle: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return storedOutcome(ctx, tx, cycleID)
	}
	out := &CycleOutcome{CycleID: cycleID, Placed: []PlacedJob{}, Conflicts: []Conflict{}, Preemptions: []StartedPreemption{}}
	// Waits first, then placements: every job row this transaction locks is
	// locked before the first GPU row (the package's lock order). A wait
	// status of a job the result also places is ignored, granted or not.
	inPlacements := make(map[string]bool, len(res.Placements))
	for _, p := range res.Placements {
		inPlacements[p.JobID] = true
	}
	var notes []noteRow
	if err := applyWaits(ctx, tx, cycleID, res.Waiting, inPlacements, now, memo, out, &notes); err != nil {
		return nil, err
	}
	jobs, err := lockCycleJobs(ctx, tx, res)
	if err != nil {
		return nil, err
	}
	if err := applyPlacements(ctx, tx, cycleID, res.Placements, jobs, now, out, &notes); err != nil {
		return nil, err
	}
	if err := applyPreemptions(ctx, tx, cycleID, res.Preemptions, now, out); err != nil {
		return nil, err
	}
	// Last: insertNotifications' per-project locks come after every row lock.
	if err := insertNotifications(ctx, tx, notes, now); err != nil {
		return nil, err
	}
	stats := map[string]int{
		"placements": len(out.Placed), "conflicts": len(out.Conflicts), "waiting": len(res.Waiting),
		"wait_transitions": out.WaitTransitions, "wait_refreshes": out.WaitRefreshes, "stale_waits": out.StaleWaits,
		"explanations_kept": out.ExplanationsKept,
		"proposals":         len(res.Preemptions), "preemptions_started": len(out.Preemptions),
	}
	if _, err := tx.Exec(ctx, `UPDATE scheduling_cycles SET stats = $2, outcome = $3 WHERE id = $1`,
		cycleID, mustJSON(stats), mustJSON(out)); err != nil {
		return nil, fmt.Errorf("record outcome: %w", err)
	}
	return out, nil
}

// storedOutcome returns the outcome saved by the first application of a cycle.
func storedOutcome(ctx context.Context, tx pgx.Tx, cycleID string) (*CycleOutcome, error) {
	var raw []byte
	if err := tx.QueryRow(ctx, `SELECT outcome FROM scheduling_cycles WHERE id = $1`, cycleID).Scan(&raw); err != nil {
		return nil, fmt.Errorf("read stored outcome: %w", err)
	}
	out := &CycleOutcome{}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("decode stored outcome: %w", err)
	}
	out.Replayed = true
	return out, nil
}

// lockCycleJobs locks, in ID order, the jobs the result places and returns
// their current state. Waiting jobs are not locked here: applyWaits' update
// locks the ones it changes.
func lockCycleJobs(ctx context.Context, tx pgx.Tx, res *scheduling.Result) (map[string]cycleJob, error) {
	ids := make([]string, 0, len(res.Placements))
	for _, p := range res.Placements {
		ids = append(ids, p.JobID)
	}
	jobs := make(map[string]cycleJob, len(ids))
	if len(ids) == 0 {
		return jobs, nil
	}
	err := forEachRow(ctx, tx, `
		SELECT id, state, held, cancel_requested, coalesce(request->>'pool', ''),
			coalesce((request->>'cpu_milli')::int8, 0), coalesce((request->>'memory_mib')::int8, 0),
			coalesce((SELECT q.seq FROM job_queue q WHERE q.job_id = jobs.id), 0)
		FROM jobs WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE`, []any{ids}, func(rows pgx.Rows) error {
		var id string
		var j cycleJob
		if err := rows.Scan(&id, &j.state, &j.held, &j.cancelled, &j.pool, &j.cpuMilli, &j.memMi, &j.seq); err != nil {
			return err
		}
		jobs[id] = j
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock jobs: %w", err)
	}
	return jobs, nil
}

// lockedGPU is a gpus row locked by a cycle, with its node's and pool's state
// and the milli-GPU its active allocations hold.
type lockedGPU struct {
	node, pool           string
	healthy, schedulable bool
	poolAvailable        bool
	used                 int
}

// lockGPUs locks the GPU rows of uuids in UUID order (the package's lock
// order, so concurrent cycles and releases cannot deadlock) and reads the
// milli-GPU already granted on each. Only after the locks are held is the
// usage read, so it cannot change before this transaction commits.
func lockGPUs(ctx context.Context, tx pgx.Tx, uuids []string) (map[string]*lockedGPU, error) {
	gpus := make(map[string]*lockedGPU, len(uuids))
	err := forEachRow(ctx, tx, `
		SELECT g.uuid, g.node, n.pool, g.healthy, n.schedulable, p.available
		FROM gpus g JOIN nodes n ON n.name = g.node JOIN pools p ON p.name = n.pool
		WHERE g.uuid = ANY($1) ORDER BY g.uuid FOR UPDATE OF g`, []any{uuids}, func(rows pgx.Rows) error {
		var uuid string
		g := &lockedGPU{}
		if err := rows.Scan(&uuid, &g.node, &g.pool, &g.healthy, &g.schedulable, &g.poolAvailable); err != nil {
			return err
		}
		gpus[uuid] = g
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock GPUs: %w", err)
	}
	err = forEachRow(ctx, tx, `
		SELECT gpu_uuid, sum(milli)::int4 FROM allocation_gpus WHERE active AND gpu_uuid = ANY($1) GROUP BY gpu_uuid`,
		[]any{uuids}, func(rows pgx.Rows) error {
			var uuid string
			var used int
			if err := rows.Scan(&uuid, &used); err != nil {
				return err
			}
			if g := gpus[uuid]; g != nil {
				g.used = used
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read GPU usage: %w", err)
	}
	return gpus, nil
}

// placementRows accumulates the rows of granted placements for bulk inserts.
type placementRows struct {
	allocIDs, jobIDs, pools, nodes []string
	cpu, mem                       []int64
	borrowed                       []bool
	explanations                   []string
	gpuAlloc, gpuUUIDs             []string
	gpuMilli                       []int32
	gpuOrd                         []int16
}

// applyPlacements admits each placement in order against the locked GPU
// capacity, then writes the granted ones in bulk.
func applyPlacements(ctx context.Context, tx pgx.Tx, cycleID string, ps []scheduling.Placement,
	jobs map[string]cycleJob, now time.Time, out *CycleOutcome, notes *[]noteRow) error {
	placed := make(map[string]bool, len(ps)) // jobs already seen in this result
	if len(ps) == 0 {
		return nil
	}
	var uuids []string
	for _, p := range ps {
		for _, g := range p.GPUs {
			uuids = append(uuids, g.UUID)
		}
	}
	slices.Sort(uuids)
	gpus, err := lockGPUs(ctx, tx, slices.Compact(uuids))
	if err != nil {
		return err
	}
	var rows placementRows
	var decisions []decisionRow
	var audits []AuditEntry
	for _, p := range ps {
		if why := admit(p, jobs, gpus, placed); why != "" {
			out.Conflicts = append(out.Conflicts, Conflict{JobID: p.JobID, Reason: why})
			decisions = append(decisions, decisionRow{p.JobID, "conflict", mustJSON(map[string]any{
				"reason": why, "pool": p.Pool, "node": p.Node, "gpus": gpuSharesJ(p.GPUs), "rank": p.Rank})})
			placed[p.JobID] = true
			continue
		}
		placed[p.JobID] = true
		allocID := newID("a-")
		grant(&rows, cycleID, now, allocID, p, jobs[p.JobID], gpus)
		out.Placed = append(out.Placed, PlacedJob{JobID: p.JobID, AllocationID: allocID, Pool: p.Pool, Node: p.Node,
			GPUs: slices.Clone(p.GPUs)})
		body := map[string]any{"allocation_id": allocID, "pool": p.Pool, "node": p.Node, "gpus": gpuSharesJ(p.GPUs),
			"borrowed": p.Borrowed, "rank": p.Rank, "priority": priorityParts(p.Priority)}
		decisions = append(decisions, decisionRow{p.JobID, "place", mustJSON(body)})
		*notes = append(*notes, noteRow{jobID: p.JobID, kind: vocab.NotifyPlaced, data: map[string]any{
			"allocation_id": allocID, "pool": p.Pool, "node": p.Node, "gpus": gpuSharesJ(p.GPUs)}})
		audits = append(audits, AuditEntry{At: now, Actor: vocab.ActorScheduler, Action: "place", Subject: p.JobID,
			Reason: fmt.Sprintf("rank %d, score %.1f: granted %s on node %s", p.Rank, p.Priority.Score,
				describeShares(p.GPUs), p.Node), Evidence: body})
	}
	if err := insertPlacements(ctx, tx, cycleID, &rows, now); err != nil {
		return err
	}
	if err := insertDecisions(ctx, tx, cycleID, decisions, now); err != nil {
		return err
	}
	if err := insertAudits(ctx, tx, audits); err != nil {
		return err
	}
	return nil
}

// admit checks one placement against the locked job and GPU rows and returns
// why it must be refused, or "" to grant it. The shares' shape and the GPUs'
// capacity are accounting's rules (CheckShapes, CheckCapacity), the ones the
// simulator applies to its grants; the job and inventory checks are the
// store's own.
func admit(p scheduling.Placement, jobs map[string]cycleJob, gpus map[string]*lockedGPU, placed map[string]bool) string {
	j, ok := jobs[p.JobID]
	switch {
	case !ok:
		return "job not found"
	case placed[p.JobID]:
		return "job placed twice in one cycle"
	case !j.state.Pending():
		return fmt.Sprintf("job is %s, not pending", j.state)
	case j.held:
		return "job is held"
	case j.cancelled:
		return "job has a cancel requested"
	case j.pool != p.Pool:
		return fmt.Sprintf("job asks for pool %q, placement is in %q", j.pool, p.Pool)
	case p.RequestVersion != 0 && p.RequestVersion != j.seq:
		// AmendJob changed the request after the cycle's snapshot: the
		// placement was planned on the old one, whatever field changed.
		return "the job's request was amended since the cycle's snapshot"
	}
	if why := accounting.CheckShapes(p.GPUs); why != "" {
		return why
	}
	for i, s := range p.GPUs {
		g := gpus[s.UUID]
		switch {
		case g == nil:
			return fmt.Sprintf("GPU %s not in inventory", s.UUID)
		case g.pool != p.Pool:
			return fmt.Sprintf("GPU %s is in pool %q, not %q", s.UUID, g.pool, p.Pool)
		case i == 0 && g.node != p.Node:
			return fmt.Sprintf("first GPU %s is on node %q, not %q", s.UUID, g.node, p.Node)
		case !g.healthy:
			return fmt.Sprintf("GPU %s is unhealthy", s.UUID)
		case !g.schedulable:
			return fmt.Sprintf("node %s is not schedulable", g.node)
		case !g.poolAvailable:
			return fmt.Sprintf("pool %s is unavailable", p.Pool)
		}
		if why := accounting.CheckCapacity(s, g.used); why != "" {
			return why
		}
	}
	return ""
}

// grant charges p's shares to the locked GPUs and appends its rows.
func grant(rows *placementRows, cycleID string, at time.Time, allocID string, p scheduling.Placement, j cycleJob,
	gpus map[string]*lockedGPU) {
	at = at.UTC()
	rows.allocIDs = append(rows.allocIDs, allocID)
	rows.jobIDs = append(rows.jobIDs, p.JobID)
	rows.pools = append(rows.pools, p.Pool)
	rows.nodes = append(rows.nodes, p.Node)
	rows.cpu = append(rows.cpu, j.cpuMilli)
	rows.mem = append(rows.mem, j.memMi)
	rows.borrowed = append(rows.borrowed, p.Borrowed)
	rows.explanations = append(rows.explanations, string(mustJSON(Explanation{Rank: p.Rank, CycleID: cycleID, EvaluatedAt: &at,
		Priority: priorityParts(p.Priority),
		Placed:   &PlacedOn{Pool: p.Pool, Node: p.Node, GPUs: gpuSharesJ(p.GPUs), Borrowed: p.Borrowed}})))
	for i, s := range p.GPUs {
		gpus[s.UUID].used += s.Milli
		rows.gpuAlloc = append(rows.gpuAlloc, allocID)
		rows.gpuUUIDs = append(rows.gpuUUIDs, s.UUID)
		rows.gpuMilli = append(rows.gpuMilli, int32(s.Milli))
		rows.gpuOrd = append(rows.gpuOrd, int16(i))
	}
}

// describeShares renders shares as "2 GPU(s), 2000 milli (GPU-a, GPU-b)".
func describeShares(gs []scheduling.GPUShare) string {
	ids := make([]string, len(gs))
	total := 0
	for i, g := range gs {
		ids[i] = g.UUID
		total += g.Milli
	}
	return fmt.Sprintf("%d GPU(s), %d milli (%s)", len(gs), total, strings.Join(ids, ", "))
}

// insertPlacements writes allocations and allocation_gpus (the trigger adds
// them to gpu_usage, whose CHECK is the backstop), marks the jobs placed,
// carries their current eligible stretch into accrued_aging_s
// (accounting.AgingClock.Stop) and closes their wait events.
func insertPlacements(ctx context.Context, tx pgx.Tx, cycleID string, r *placementRows, now time.Time) error {
	if len(r.allocIDs) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO allocations (id, job_id, pool, node, cpu_milli, memory_mib, borrowed, cycle_id, granted_at,
			gpu_uuids, gpu_milli)
		SELECT u.*, $8, $9, g.uuids, g.milli
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[], $7::bool[]) AS u(id)
		JOIN (SELECT a, array_agg(uuid ORDER BY o) AS uuids, array_agg(m ORDER BY o) AS milli
			FROM unnest($10::text[], $11::text[], $12::int4[], $13::int2[]) AS x(a, uuid, m, o) GROUP BY a) AS g
			ON g.a = u.id`,
		r.allocIDs, r.jobIDs, r.pools, r.nodes, r.cpu, r.mem, r.borrowed, cycleID, now,
		r.gpuAlloc, r.gpuUUIDs, r.gpuMilli, r.gpuOrd); err != nil {
		return fmt.Errorf("insert allocations: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO allocation_gpus (allocation_id, gpu_uuid, milli, ord, active)
		SELECT u.*, true FROM unnest($1::text[], $2::text[], $3::int4[], $4::int2[]) AS u(a, g, m, o) ORDER BY u.g`,
		r.gpuAlloc, r.gpuUUIDs, r.gpuMilli, r.gpuOrd); err != nil {
		return fmt.Errorf("insert allocation GPUs: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE jobs j SET state = 'placed', reason = NULL, explanation = u.expl::jsonb, explanation_digest = NULL,
			accrued_aging_s = j.accrued_aging_s + coalesce(greatest(0, extract(epoch FROM $3::timestamptz - j.aging_since))::float8, 0),
			aging_since = NULL, updated_at = $3
		FROM unnest($1::text[], $2::text[]) AS u(id, expl) WHERE j.id = u.id`,
		r.jobIDs, r.explanations, now); err != nil {
		return fmt.Errorf("mark jobs placed: %w", err)
	}
	if err := recordNotYetEvaluated(ctx, tx, r.jobIDs, now); err != nil {
		return err
	}
	return closeWaitEvents(ctx, tx, r.jobIDs, now)
}

// recordNotYetEvaluated writes, for each of jobIDs that
// accounting.NotYetEvaluatedSince finds due (no open wait event, and a start
// — waiting_since or the end of the job's previous wait event, if later —
// before now), an vocab.ReasonNotYetEvaluated event from that start,
// closed at now. These jobs are seen by a cycle for the first time since they
// were submitted or requeued: a waiting job keeps an open event from its
// first evaluation until it is placed. The state is read after the caller
// locked the job rows, so it cannot change before the insert.
func recordNotYetEvaluated(ctx context.Context, tx pgx.Tx, jobIDs []string, now time.Time) error {
	if len(jobIDs) == 0 {
		return nil
	}
	var ids []string
	var starts []time.Time
	// The lateral aggregate reads each job's events through
	// wait_events_job_idx; as EXISTS and scalar subqueries the planner
	// hashed every open event instead (100,000 rows, 20-45 ms a call at
	// 100,000 waiting jobs: docs/design.md §8, "The whole cycle at scale").
	err := forEachRow(ctx, tx, `
		SELECT j.id, j.waiting_since, coalesce(w.open, false), w.last
		FROM jobs j LEFT JOIN LATERAL (
			SELECT bool_or(w.ended_at IS NULL) AS open, max(w.ended_at) AS last FROM wait_events w WHERE w.job_id = j.id
		) w ON true
		WHERE j.id = ANY($1) ORDER BY j.id`, []any{jobIDs}, func(rows pgx.Rows) error {
		var id string
		var st accounting.WaitState
		var last *time.Time
		if err := rows.Scan(&id, &st.WaitingSince, &st.Open, &last); err != nil {
			return err
		}
		if last != nil {
			st.LastEnded = *last
		}
		// The database keeps microseconds: compare with now as it is stored.
		if since, ok := accounting.NotYetEvaluatedSince(st, now.Truncate(time.Microsecond)); ok {
			ids, starts = append(ids, id), append(starts, since)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read waits before the first evaluation: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO wait_events (job_id, reason, detail, next_action, started_at, ended_at)
		SELECT u.id, $3, $4, $5, u.since, $6 FROM unnest($1::text[], $2::timestamptz[]) AS u(id, since)`,
		ids, starts, string(vocab.ReasonNotYetEvaluated), notYetEvaluatedDetail, vocab.ReasonNotYetEvaluated.NextAction(), now); err != nil {
		return fmt.Errorf("record waits before the first evaluation: %w", err)
	}
	return nil
}

// applyWaits refreshes the reason and explanation of every job the result
// explains that is still pending, and writes its wait events: a transition
// (close the open event, open a new one) where the reason differs from the
// open event's or there is none, an in-place refresh of the open event's
// detail, re-evaluation condition and blocking job where only they differ.
// The jobs update locks the rows it changes, and the events are written only
// for rows it changed, so a job cancelled or placed concurrently gets no new
// wait event. A job's row is rewritten only when what its explanation says
// changed or the stored one is ExplanationRefreshInterval old (by the
// job's rank: deep jobs wait longer); with memo (the
// stored wait state the cycle's snapshot read, pendingWaits) the jobs whose
// explanation is current are not read either, so the cycle's cost follows
// what changed, not the number of waiting jobs.
func applyWaits(ctx context.Context, tx pgx.Tx, cycleID string, ws []scheduling.WaitStatus,
	placed map[string]bool, now time.Time, memo map[string]storedWait, out *CycleOutcome, notes *[]noteRow) error {
	at := now.UTC()
	ws, due, digests := pendingWaits(ws, placed, memo, at, out)
	if len(ws) == 0 && len(due) == 0 {
		return nil
	}
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.JobID
	}
	type current struct {
		pending, held                    bool
		open                             bool
		reason, detail, reeval, blocking string
		digest                           []byte
		explainedAt                      *time.Time
	}
	cur := make(map[string]current, len(ws))
	// w.job_id = ANY($1) lets the open events be read by their job IDs;
	// without it the planner merged the jobs with every open event (a scan
	// of 100,000 at 100,000 waiting jobs); the refresh below likewise.
	err := forEachRow(ctx, tx, `
		SELECT j.id, j.state IN ('submitted', 'waiting'), j.held, w.reason IS NOT NULL, coalesce(w.reason, ''),
			coalesce(w.detail, ''), coalesce(w.reevaluate, ''), coalesce(w.blocking_job_id, ''),
			j.explanation_digest, j.explained_at
		FROM jobs j LEFT JOIN wait_events w ON w.job_id = j.id AND w.ended_at IS NULL AND w.job_id = ANY($1)
		WHERE j.id = ANY($1)`, []any{ids}, func(rows pgx.Rows) error {
		var id string
		var c current
		if err := rows.Scan(&id, &c.pending, &c.held, &c.open, &c.reason, &c.detail, &c.reeval, &c.blocking,
			&c.digest, &c.explainedAt); err != nil {
			return err
		}
		cur[id] = c
		return nil
	})
	if err != nil {
		return fmt.Errorf("read wait state: %w", err)
	}
	var upd, updReason, updExpl []string
	var updEarns []bool
	var updDigest [][]byte
	expls := make([]string, len(ws)) // parallel to ws
	transition, refresh, decide := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, w := range ws {
		c := cur[w.JobID]
		// A held job given another reason was read before its hold
		// (SetHold): left to the next cycle, so that the hold's wait event
		// is not ended by a reason the hold overrides.
		if !c.pending || (c.held && w.Reason != vocab.ReasonHeld) {
			out.StaleWaits++
			continue
		}
		switch {
		case accounting.WaitChanged(c.open, vocab.WaitReason(c.reason), w.Reason):
			transition[w.JobID], decide[w.JobID] = true, true
		case w.Reason == vocab.ReasonHeld:
			// The held event's text is the hold's (who held it and why,
			// SetHold): the cycle, which knows neither, extends it as it is.
		case accounting.WaitRefreshed(c.detail, w.Detail) || c.reeval != w.ReEvaluate || c.blocking != w.BlockingJobID:
			refresh[w.JobID] = true
			decide[w.JobID] = c.blocking != w.BlockingJobID // held back by another job now
		}
		digest := digests[w.JobID]
		if !transition[w.JobID] && !refresh[w.JobID] && explanationCurrent(w.JobID, w.Rank, c.digest, c.explainedAt, digest, at) {
			out.ExplanationsKept++
			continue
		}
		expls[i] = string(mustJSON(waitExplanation(cycleID, at, &w)))
		upd, updReason, updExpl = append(upd, w.JobID), append(updReason, string(w.Reason)), append(updExpl, expls[i])
		updEarns, updDigest = append(updEarns, w.Reason.EarnsAging()), append(updDigest, digest)
	}
	// The due statuses: their explanation is rewritten only where the
	// stored digest is still the one the snapshot read (guard), so a job a
	// concurrent writer changed since is left to the next cycle.
	guard := make([]bool, len(upd), len(upd)+len(due))
	for i := range due {
		w := &due[i]
		upd, updReason = append(upd, w.JobID), append(updReason, string(w.Reason))
		updExpl = append(updExpl, string(mustJSON(waitExplanation(cycleID, at, w))))
		updEarns, updDigest = append(updEarns, w.Reason.EarnsAging()), append(updDigest, digests[w.JobID])
		guard = append(guard, true)
	}
	changed := make(map[string]bool, len(upd))
	err = forEachRow(ctx, tx, `
		UPDATE jobs j SET state = 'waiting', reason = u.reason, explanation = u.expl::jsonb, updated_at = $4,
			explanation_digest = u.digest, explained_at = $4,
			accrued_aging_s = CASE WHEN u.earns THEN j.accrued_aging_s
				ELSE j.accrued_aging_s + coalesce(greatest(0, extract(epoch FROM $4::timestamptz - j.aging_since))::float8, 0) END,
			aging_since = CASE WHEN u.earns THEN coalesce(j.aging_since, $4::timestamptz) ELSE NULL END
		FROM unnest($1::text[], $2::text[], $3::text[], $5::bool[], $6::bytea[], $7::bool[])
			AS u(id, reason, expl, earns, digest, guard)
		WHERE j.id = u.id AND j.state IN ('submitted', 'waiting')
			AND (NOT u.guard OR j.explanation_digest = u.digest)
		RETURNING j.id`, []any{upd, updReason, updExpl, now, updEarns, updDigest, guard}, func(rows pgx.Rows) error {
		var id string
		err := rows.Scan(&id)
		changed[id] = true
		return err
	})
	if err != nil {
		return fmt.Errorf("update waiting jobs: %w", err)
	}
	var tr, rf waitRows
	var decisions []decisionRow
	for i, w := range ws {
		if !transition[w.JobID] && !refresh[w.JobID] {
			continue
		}
		if !changed[w.JobID] { // no longer pending when the update ran
			out.StaleWaits++
			continue
		}
		if transition[w.JobID] {
			tr.add(w)
			if prev := vocab.WaitReason(cur[w.JobID].reason); prev != w.Reason && w.Reason.NotifiesSubmitter() {
				*notes = append(*notes, noteRow{jobID: w.JobID, kind: vocab.NotifyWaitReason, data: map[string]any{
					"reason": w.Reason, "previous_reason": prev, "detail": w.Detail, "next_action": w.Reason.NextAction()}})
			}
		} else {
			rf.add(w)
		}
		if decide[w.JobID] {
			decisions = append(decisions, decisionRow{w.JobID, "wait", []byte(expls[i])})
		}
	}
	out.WaitTransitions, out.WaitRefreshes = len(tr.jobIDs), len(rf.jobIDs)
	for _, r := range tr.reasons {
		if out.WaitTransitionsByReason == nil {
			out.WaitTransitionsByReason = map[string]int{}
		}
		out.WaitTransitionsByReason[r]++
	}
	if err := recordNotYetEvaluated(ctx, tx, tr.jobIDs, now); err != nil {
		return err
	}
	if err := closeWaitEvents(ctx, tx, tr.jobIDs, now); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO wait_events (job_id, reason, detail, next_action, reevaluate, blocking_job_id, started_at)
		SELECT u.j, u.r, u.d, u.n, u.e, nullif(u.b, ''), $7
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(j, r, d, n, e, b)`,
		tr.jobIDs, tr.reasons, tr.details, tr.next, tr.reeval, tr.blocking, now); err != nil {
		return fmt.Errorf("open wait events: %w", err)
	}
	if len(rf.jobIDs) > 0 {
		if _, err := tx.Exec(ctx, `
			UPDATE wait_events w SET detail = u.d, reevaluate = u.e, blocking_job_id = nullif(u.b, '')
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(j, d, e, b)
			WHERE w.job_id = u.j AND w.job_id = ANY($1) AND w.ended_at IS NULL`,
			rf.jobIDs, rf.details, rf.reeval, rf.blocking); err != nil {
			return fmt.Errorf("refresh wait events: %w", err)
		}
	}
	return insertDecisions(ctx, tx, cycleID, decisions, now)
}

// waitExplanation is the stored explanation of a wait status given by the
// cycle cycleID at at.
func waitExplanation(cycleID string, at time.Time, w *scheduling.WaitStatus) Explanation {
	e := Explanation{Reason: w.Reason, Detail: w.Detail, NextAction: w.Reason.NextAction(),
		ReEvaluate: w.ReEvaluate, BlockingJobID: w.BlockingJobID, Rank: w.Rank, Priority: priorityParts(w.Priority),
		CycleID: cycleID, EvaluatedAt: &at, Suggestions: suggestionsJ(w.Suggestions), Releases: releasesJ(w.Releases)}
	if n := w.Next; !n.At.IsZero() {
		e.NextEvaluation = &NextEvaluation{At: n.At.UTC(), Kind: n.Kind, Estimate: n.Estimate}
	}
	if o := w.Overtake; o != nil {
		e.Overtake = &OvertakeParts{AheadJobID: o.AheadJobID, GapPoints: o.GapPoints, HeadroomPoints: o.HeadroomPoints,
			AheadHeadroomPoints: o.AheadHeadroomPoints, BoundPoints: o.BoundPoints, Never: o.Never}
		if !o.Never {
			t := o.At.UTC()
			e.Overtake.At = &t
		}
	}
	return e
}

// ExplanationRefresh bounds how old the stored explanation of a waiting
// job among the first ExplanationRefreshDepth of its pool may grow while
// what it says stays the same: a cycle rewrites it only when its stable
// part (explanationDigest) changed or it is ExplanationRefreshFor old
// (between half of this and this; deeper jobs wait longer,
// ExplanationRefreshInterval), so a cycle's write cost follows what
// changed, not the number of waiting jobs (issue "Beyond one machine",
// item 5; docs/design.md §1 "The why record"). Its cycle_id, evaluated_at,
// rank and priority parts are then up to this old; every cycle still
// evaluates every pending job, and a change of reason, detail,
// re-evaluation condition or blocking job is written by the cycle that
// sees it. 60 s: a `gpugov why` reader sees a rank and score at most a
// minute old near the head (Kueue refreshes its pending-workload positions
// on an interval too), while with 10,000 waiting jobs and a cycle every 5 s
// a cycle rewrites about a ninth of the head's (the intervals average 45 s)
// instead of all.
const ExplanationRefresh = 60 * time.Second

// explanationDigest is the SHA-256 of the stable part of w's explanation:
// what a cycle that sees the same situation writes again (reason, detail,
// re-evaluation condition, blocking job, suggestions, releases, the kind of
// the next evaluation, the overtake target). Rank, priority, the next
// evaluation's instant and the overtake's points move with every cycle and
// are left out. Beyond rank ExplanationRefreshDepth the expected releases
// are left out too: they are other jobs' ends (the project's or the
// shape's earliest-ending runs), so each run that ends changed the digest
// of every deep job of its project, hundreds of rewrites a cycle at 10,000
// waiting for a list that concerns the head first; a deep job's releases
// are refreshed with its rank and score, at its depth's
// ExplanationRefreshInterval (docs/design.md §1 "The why record").
//
// Every cycle computes it for every waiting job, so it hashes a compact
// binary form (appendStable: each string length-prefixed, each number in
// 8 bytes) built in buf, which it returns for reuse, instead of a JSON
// document (docs/design.md §8, "The whole cycle at scale"): a few hundred
// nanoseconds per job with no allocation but the digest.
func explanationDigest(buf []byte, w *scheduling.WaitStatus) (digest, next []byte) {
	buf = appendStable(buf[:0], w)
	sum := sha256.Sum256(buf)
	return sum[:], buf
}

// digestVersion starts appendStable's encoding; it changes whenever the
// encoding does, so that no two encodings can give one digest (a stored
// digest of another encoding only makes the next cycle rewrite the
// explanation).
const digestVersion = 3

// appendStable appends the binary form of w's stable part that
// explanationDigest hashes.
func appendStable(b []byte, w *scheduling.WaitStatus) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	num := func(n int64) { b = binary.LittleEndian.AppendUint64(b, uint64(n)) }
	b = append(b, digestVersion)
	str(string(w.Reason))
	str(w.Detail)
	str(w.ReEvaluate)
	str(w.BlockingJobID)
	num(int64(len(w.Suggestions)))
	for _, g := range w.Suggestions {
		str(g.Field)
		str(g.Value)
		if g.Now {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		num(int64(g.MatchingGPUs))
		num(int64(g.FreeGPUs))
		num(int64(g.Nodes))
		str(g.Text)
	}
	if w.Rank <= ExplanationRefreshDepth { // beyond it releases move at the depth interval
		num(int64(len(w.Releases)))
		for _, r := range w.Releases {
			str(r.JobID)
			num(r.Milli)
			num(r.ExpectedEnd.UnixNano())
		}
	} else {
		num(-1)
	}
	str(string(w.Next.Kind))
	switch o := w.Overtake; {
	case o == nil:
		b = append(b, 0)
	case o.Never:
		b = append(b, 2)
		str(o.AheadJobID)
	default:
		b = append(b, 1)
		str(o.AheadJobID)
	}
	return b
}

// ExplanationRefreshFor is the age at which job jobID's unchanged
// explanation is rewritten: between ExplanationRefresh/2 and
// ExplanationRefresh, spread by an FNV-1a hash of the job ID, so that the
// explanations one cycle wrote (a burst of submissions, a restart) do not
// all fall due in the same later cycle.
func ExplanationRefreshFor(jobID string) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(jobID))
	half := ExplanationRefresh / 2
	// The hash scales onto [0, half) in microseconds; taken modulo half in
	// nanoseconds (30 s, above 2^32 ns) it spread the instants over only
	// the first 4.3 s (docs/design.md §8, "The whole cycle at scale").
	return half + time.Duration(uint64(h.Sum32())*uint64(half/time.Microsecond)>>32)*time.Microsecond
}

// ExplanationRefreshDepth is how many jobs at the head of each pool's
// serving order (WaitStatus.Rank 1 to this) keep the full refresh,
// ExplanationRefreshFor; a deeper job's unchanged explanation is rewritten
// ExplanationRefreshInterval apart, less often the deeper it sits. The
// head of the queue is where a rank, score and overtake instant matter to
// a reader (the next jobs to run, and the ones to ask about), and a deep
// job's moves little between cycles; Slurm likewise stops its main
// scheduler at default_queue_depth and its backfill at bf_max_job_test, so
// that deep jobs are not re-examined every pass (docs/design.md §1 "The why
// record"). Unlike Slurm, every cycle still evaluates every pending job,
// and a change of what the explanation says (its digest) is written by the
// cycle that sees it at any depth: only the rewrite of an unchanged one
// waits. 1,000: ten times Slurm's default_queue_depth default (100) and
// twice its bf_max_job_test one (500), so every job those passes would look
// at keeps the full refresh; beyond it the rewrites of unchanged rows no
// longer grow with the queue's length (at 100,000 waiting and a cycle every
// 5 s, about 1,300 a cycle instead of 11,000: docs/design.md §8, "The whole
// cycle at scale").
const ExplanationRefreshDepth = 1000

// ExplanationRefreshMax bounds ExplanationRefreshInterval: the oldest an
// unchanged explanation grows at any depth (the rank and score a `gpugov
// why` shows of a job deep in a long queue). 10 minutes: the deepest jobs
// are rewritten every 5–10 minutes (ExplanationRefreshFor × 10), a
// fifteenth of the rate at the head.
const ExplanationRefreshMax = 10 * time.Minute

// ExplanationRefreshInterval is the age at which the unchanged explanation
// of job jobID, at rank in its pool's serving order (WaitStatus.Rank;
// below 1: unknown, taken as the head), is rewritten: ExplanationRefreshFor
// (30–60 s, spread by a hash of the ID) within the first
// ExplanationRefreshDepth ranks, and beyond them that times the rank's tier,
// ⌈rank / ExplanationRefreshDepth⌉, at most ExplanationRefreshMax /
// ExplanationRefresh (10) times: rank 1,500 waits 60–120 s, rank 10,000
// and beyond 5–10 minutes, each still spread by its hash. The rank is the
// current cycle's, so a job that moved up (the jobs ahead were placed)
// comes due at its new depth's interval at once.
func ExplanationRefreshInterval(jobID string, rank int) time.Duration {
	d := ExplanationRefreshFor(jobID)
	if rank <= ExplanationRefreshDepth {
		return d
	}
	tier := (rank + ExplanationRefreshDepth - 1) / ExplanationRefreshDepth
	return d * time.Duration(min(tier, int(ExplanationRefreshMax/ExplanationRefresh)))
}

// explanationCurrent reports whether job jobID's stored explanation with
// digest stored, written at explainedAt, still says what digest says and is
// younger than ExplanationRefreshInterval(jobID, rank) at at.
func explanationCurrent(jobID string, rank int, stored []byte, explainedAt *time.Time, digest []byte, at time.Time) bool {
	return explainedAt != nil && bytes.Equal(stored, digest) && at.Sub(*explainedAt) < ExplanationRefreshInterval(jobID, rank)
}

// pendingWaits sorts out a cycle's wait statuses by what memo (the stored
// wait state LoadSnapshot read; nil: none) shows of their jobs:
//
//   - a status whose job the snapshot saw with its digest, explained less
//     than ExplanationRefreshInterval (by its rank) ago, changes nothing: it is counted in
//     out.ExplanationsKept and dropped;
//   - one whose job had its digest but an older explanation only needs its
//     explanation rewritten: it is returned in due;
//   - the others (the stable part changed, or the job was not in the
//     snapshot) are returned in ws, to be compared with the stored state
//     read again in the cycle's transaction.
//
// It drops the statuses of jobs the result also places and all but the
// first status of a job among those it returns (out.StaleWaits), sorts ws
// and due by job ID so that concurrent cycles lock rows in the same order,
// and returns the digests of both by job ID. Its cost per unchanged waiting
// job is one digest and two map lookups; only the statuses returned are
// copied (docs/design.md §8, "The whole cycle at scale").
func pendingWaits(all []scheduling.WaitStatus, placed map[string]bool, memo map[string]storedWait, at time.Time,
	out *CycleOutcome) (ws, due []scheduling.WaitStatus, digests map[string][]byte) {
	seen := map[string]struct{}{}
	digests = map[string][]byte{}
	var buf []byte
	for i := range all {
		w := &all[i]
		if placed[w.JobID] {
			out.StaleWaits++
			continue
		}
		var d []byte
		d, buf = explanationDigest(buf, w)
		m, inMemo := memo[w.JobID]
		sameDigest := inMemo && m.hasDigest && m.digest == [32]byte(d)
		if sameDigest && m.current(w.JobID, w.Rank, d, at) {
			out.ExplanationsKept++
			continue
		}
		if _, dup := seen[w.JobID]; dup {
			out.StaleWaits++
			continue
		}
		seen[w.JobID] = struct{}{}
		digests[w.JobID] = d
		if sameDigest && !m.explainedAt.IsZero() {
			due = append(due, *w)
		} else {
			ws = append(ws, *w)
		}
	}
	byID := func(a, b scheduling.WaitStatus) int { return cmpString(a.JobID, b.JobID) }
	slices.SortFunc(ws, byID)
	slices.SortFunc(due, byID)
	return ws, due, digests
}

// waitRows accumulates new wait events as column arrays.
type waitRows struct {
	jobIDs, reasons, details, next, reeval, blocking []string
}

func (w *waitRows) add(s scheduling.WaitStatus) {
	w.jobIDs = append(w.jobIDs, s.JobID)
	w.reasons = append(w.reasons, string(s.Reason))
	w.details = append(w.details, s.Detail)
	w.next = append(w.next, s.Reason.NextAction())
	w.reeval = append(w.reeval, s.ReEvaluate)
	w.blocking = append(w.blocking, s.BlockingJobID)
}

// applyPreemptions records every proposal as a decision and one audit entry
// per victim, and for proposals with Act opens a preemption per victim
// allocation that has none in progress.
func applyPreemptions(ctx context.Context, tx pgx.Tx, cycleID string, props []scheduling.PreemptionProposal,
	now time.Time, out *CycleOutcome) error {
	var decisions []decisionRow
	var audits []AuditEntry
	var ids, forJobs, victims, allocs, reasons, cands []string
	var losses []float64
	for _, p := range props {
		body := proposalBody(p)
		kind, action := "would_preempt", "would_preempt"
		if p.Act {
			kind, action = "preempt", "preempt"
		}
		decisions = append(decisions, decisionRow{p.ForJobID, kind, body})
		for _, v := range p.Victims {
			audits = append(audits, AuditEntry{At: now, Actor: vocab.ActorScheduler, Action: action, Subject: v.JobID,
				Reason:   fmt.Sprintf("for job %s: %s", p.ForJobID, p.Reason),
				Evidence: map[string]any{"proposal": json.RawMessage(body), "allocation_id": v.AllocationID}})
			if p.Act {
				ids = append(ids, newID("p-"))
				forJobs, victims = append(forJobs, p.ForJobID), append(victims, v.JobID)
				allocs, reasons = append(allocs, v.AllocationID), append(reasons, p.Reason)
				losses = append(losses, v.EstimatedLossGPUSeconds)
				cands = append(cands, string(mustJSON(candidateDocs(p.Candidates))))
			}
		}
	}
	if len(ids) > 0 {
		// Only live victim allocations of the named job qualify; the partial
		// unique index keeps one open preemption per allocation.
		err := forEachRow(ctx, tx, `
			INSERT INTO preemptions (id, cycle_id, for_job_id, victim_job_id, allocation_id, estimated_loss_gpu_s,
				reason, started_at, candidates)
			SELECT u.id, $1, u.f, u.v, u.a, u.l, u.r, $2, u.c::jsonb
			FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::float8[], $8::text[], $9::text[])
				AS u(id, f, v, a, l, r, c)
			JOIN allocations al ON al.id = u.a AND al.job_id = u.v AND al.released_at IS NULL
			ORDER BY u.a
			ON CONFLICT (allocation_id) WHERE ended_at IS NULL DO NOTHING
			RETURNING id, for_job_id, victim_job_id, allocation_id`,
			[]any{cycleID, now, ids, forJobs, victims, allocs, losses, reasons, cands}, func(rows pgx.Rows) error {
				var sp StartedPreemption
				if err := rows.Scan(&sp.PreemptionID, &sp.ForJobID, &sp.VictimJobID, &sp.AllocationID); err != nil {
					return err
				}
				out.Preemptions = append(out.Preemptions, sp)
				return nil
			})
		if err != nil {
			return fmt.Errorf("start preemptions: %w", err)
		}
		slices.SortFunc(out.Preemptions, func(a, b StartedPreemption) int { return cmpString(a.AllocationID, b.AllocationID) })
	}
	if err := insertDecisions(ctx, tx, cycleID, decisions, now); err != nil {
		return err
	}
	return insertAudits(ctx, tx, audits)
}

func proposalBody(p scheduling.PreemptionProposal) []byte {
	type victim struct {
		JobID        string  `json:"job_id"`
		AllocationID string  `json:"allocation_id"`
		GPUs         int     `json:"gpus"`
		LossGPUS     float64 `json:"estimated_loss_gpu_s"`
	}
	vs := make([]victim, len(p.Victims))
	for i, v := range p.Victims {
		vs[i] = victim{v.JobID, v.AllocationID, v.GPUs, v.EstimatedLossGPUSeconds}
	}
	return mustJSON(map[string]any{"for_job_id": p.ForJobID, "pool": p.Pool, "node": p.Node, "victims": vs,
		"act": p.Act, "estimated_loss_gpu_s": p.EstimatedLossGPUSeconds, "reason": p.Reason})
}

// decisionRow is one decisions row of a cycle.
type decisionRow struct {
	jobID, kind string
	body        []byte
}

func insertDecisions(ctx context.Context, tx pgx.Tx, cycleID string, ds []decisionRow, at time.Time) error {
	if len(ds) == 0 {
		return nil
	}
	jobIDs := make([]string, len(ds))
	kinds := make([]string, len(ds))
	bodies := make([]string, len(ds))
	for i, d := range ds {
		jobIDs[i], kinds[i], bodies[i] = d.jobID, d.kind, string(d.body)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO decisions (cycle_id, job_id, kind, body, at)
		SELECT $1, u.j, u.k, u.b::jsonb, $2 FROM unnest($3::text[], $4::text[], $5::text[]) AS u(j, k, b)`,
		cycleID, at, jobIDs, kinds, bodies); err != nil {
		return fmt.Errorf("insert decisions: %w", err)
	}
	return nil
}

func insertAudits(ctx context.Context, tx pgx.Tx, es []AuditEntry) error {
	if len(es) == 0 {
		return nil
	}
	ats := make([]time.Time, len(es))
	actors := make([]string, len(es))
	actions := make([]string, len(es))
	subjects := make([]string, len(es))
	reasons := make([]string, len(es))
	evidence := make([]string, len(es))
	for i, e := range es {
		ats[i], actors[i], actions[i], subjects[i], reasons[i] = e.At, e.Actor, e.Action, e.Subject, e.Reason
		evidence[i] = string(evidenceJSON(e.Evidence))
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO audit_log (at, actor, action, subject, reason, evidence)
		SELECT u.t, u.a, u.c, u.s, u.r, u.e::jsonb
		FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(t, a, c, s, r, e)`,
		ats, actors, actions, subjects, reasons, evidence); err != nil {
		return fmt.Errorf("insert audit entries: %w", err)
	}
	return nil
}

// shardResultTx locks the shard's pools rows and returns res without the
// placements, proposals and wait statuses of jobs outside them, and how many
// it left out (ApplyShardCycle). A job whose pool has no pools row is the
// default shard's (LoadShardSnapshot's rule): its wait status is kept there.
func shardResultTx(ctx context.Context, tx pgx.Tx, shard string, res *scheduling.Result) (*scheduling.Result, int, error) {
	pools := map[string]bool{}
	err := forEachRow(ctx, tx, `SELECT name FROM pools WHERE scheduler_shard = $1 ORDER BY name FOR SHARE`, []any{shard},
		func(rows pgx.Rows) error {
			var name string
			err := rows.Scan(&name)
			pools[name] = true
			return err
		})
	if err != nil {
		return nil, 0, fmt.Errorf("lock shard %s pools: %w", shard, err)
	}
	// A pool with no pools row is in DefaultShard (LoadShardSnapshot's rule):
	// its jobs' wait statuses (pool_unavailable) are the default shard's.
	known := map[string]bool{}
	if shard == DefaultShard {
		err = forEachRow(ctx, tx, `SELECT name FROM pools`, nil, func(rows pgx.Rows) error {
			var name string
			err := rows.Scan(&name)
			known[name] = true
			return err
		})
		if err != nil {
			return nil, 0, fmt.Errorf("read pools: %w", err)
		}
	}
	out := *res
	out.Placements = slices.DeleteFunc(slices.Clone(res.Placements), func(p scheduling.Placement) bool { return !pools[p.Pool] })
	out.Preemptions = slices.DeleteFunc(slices.Clone(res.Preemptions), func(p scheduling.PreemptionProposal) bool { return !pools[p.Pool] })
	dropped := len(res.Placements) + len(res.Preemptions) - len(out.Placements) - len(out.Preemptions)
	// The default shard holding every known pool (the one scheduler, no
	// `shards:`) keeps every wait status: a job's pool is either one of its
	// pools or has no pools row. Then the waiting jobs' pools are not read,
	// a read of every waiting job per cycle (docs/design.md §8, "The whole
	// cycle at scale").
	if shard == DefaultShard && allKnownIn(known, pools) {
		return &out, dropped, nil
	}
	ids := make([]string, len(res.Waiting))
	for i, w := range res.Waiting {
		ids[i] = w.JobID
	}
	poolOf := make(map[string]string, len(ids))
	if len(ids) > 0 {
		err = forEachRow(ctx, tx, `SELECT id, coalesce(request->>'pool', '') FROM jobs WHERE id = ANY($1)`, []any{ids},
			func(rows pgx.Rows) error {
				var id, pool string
				err := rows.Scan(&id, &pool)
				poolOf[id] = pool
				return err
			})
		if err != nil {
			return nil, 0, fmt.Errorf("pools of waiting jobs: %w", err)
		}
	}
	out.Waiting = slices.DeleteFunc(slices.Clone(res.Waiting), func(w scheduling.WaitStatus) bool {
		pool := poolOf[w.JobID]
		return !pools[pool] && !(shard == DefaultShard && !known[pool])
	})
	return &out, dropped + len(res.Waiting) - len(out.Waiting), nil
}

// noJIT turns PostgreSQL's JIT compilation off for the rest of tx. The
// cycle's statements over every pending job cross jit_above_cost, and
// compiling them cost more than it saved: up to 220 ms of a 100,000-job
// snapshot's server time went to inlining and optimising its expressions
// (docs/design.md §8, "The whole cycle at scale").
func noJIT(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return fmt.Errorf("turn JIT off: %w", err)
	}
	return nil
}

// allKnownIn reports whether every pool in known is in pools.
func allKnownIn(known, pools map[string]bool) bool {
	for name := range known {
		if !pools[name] {
			return false
		}
	}
	return true
}
