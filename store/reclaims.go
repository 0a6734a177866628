package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Audit actions of reclaims (subject: the job; docs/design.md invariant 6).
const (
	AuditReclaimOpen          = "reclaim_open"           // evidence: reclaim_id, allocation_id, class, mode, configured_mode, stage, mode_reason, the finding's evidence
	AuditReclaimNotice        = "reclaim_notice"         // evidence: reclaim_id, allocation_id, class, deadline
	AuditReclaimClose         = "reclaim_close"          // evidence: reclaim_id, allocation_id, class, mode, state (reported or expired)
	AuditReclaimRelease       = "reclaim_release"        // evidence: reclaim_id, allocation_id, gpus_released, mode, job_state_after
	AuditReclaimDispute       = "reclaim_dispute"        // evidence: reclaim_id, allocation_id, class, mode, after_release; released_at and dispute_window_s after a release
	AuditReclaimConfirm       = "reclaim_confirm"        // evidence: reclaim_id, allocation_id
	AuditReclaimDisputeReject = "reclaim_dispute_reject" // evidence: reclaim_id, allocation_id, class, disputed_by, disputed_at, dispute_reason
)

// Reclaim is one row of reclaims.
type Reclaim struct {
	ID             string                `db:"id"`
	AllocationID   string                `db:"allocation_id"`
	JobID          string                `db:"job_id"`
	Project        string                `db:"project"`
	Queue          string                `db:"queue"`
	Pool           string                `db:"pool"`
	Node           string                `db:"node"`
	Class          vocab.ReclaimClass    `db:"class"`
	Mode           vocab.ReclaimMode     `db:"mode"`
	ConfiguredMode vocab.ReclaimMode     `db:"configured_mode"`
	Stage          vocab.AutomationStage `db:"stage"`
	Basis          string                `db:"basis"`
	Evidence       map[string]any        `db:"evidence"`
	GPUs           float64               `db:"gpus"`
	State          vocab.ReclaimState    `db:"state"`
	WorkflowID     string                `db:"workflow_id"`
	DetectedAt     time.Time             `db:"detected_at"`
	NoticeAt       *time.Time            `db:"notice_at"`
	NoticeDeadline *time.Time            `db:"notice_deadline"`
	DecidedBy      string                `db:"decided_by"`
	DecidedAt      *time.Time            `db:"decided_at"`
	ReleasedAt     *time.Time            `db:"released_at"`
	GPUsReleased   float64               `db:"gpus_released"`
	// Disputed is true when the owner disputed the reclaim: kept the
	// allocation before its release, or disputed the release within the
	// policy's reclaim.dispute_window_s (DisputeAfterRelease). A dispute is
	// a false reclaim unless an operator rejected it (DisputeRejectedAt).
	Disputed            bool       `db:"disputed"`
	DisputeBy           string     `db:"dispute_by"`
	DisputeReason       string     `db:"dispute_reason"`
	DisputedAt          *time.Time `db:"disputed_at"`
	DisputeAfterRelease bool       `db:"dispute_after_release"`
	DisputeRejectedBy   string     `db:"dispute_rejected_by"`
	DisputeRejectedAt   *time.Time `db:"dispute_rejected_at"`
	DisputeRejection    string     `db:"dispute_rejection"` // the operator's reason
	Detail              string     `db:"detail"`
	UpdatedAt           time.Time  `db:"updated_at"`
}

// FalseReclaim reports whether r counts as a false reclaim: disputed by its
// owner and the dispute not rejected by an operator.
func (r *Reclaim) FalseReclaim() bool { return r.Disputed && r.DisputeRejectedAt == nil }

const reclaimColumns = `id, allocation_id, job_id, project, queue, pool, node, class, mode, configured_mode, stage, basis,
	evidence, gpus, state, workflow_id, detected_at, notice_at, notice_deadline, decided_by, decided_at, released_at,
	gpus_released, disputed, dispute_by, dispute_reason, disputed_at, dispute_after_release, dispute_rejected_by,
	dispute_rejected_at, dispute_rejection, detail, updated_at`

// queryReclaim reads one row of reclaimColumns (evidence, jsonb, decodes into
// the map) and returns it with its times in UTC; pgx.ErrNoRows (wrapped) when
// the query selects none.
func queryReclaim(ctx context.Context, q querier, sql string, args ...any) (*Reclaim, error) {
	r, err := queryOne[Reclaim](ctx, q, sql, args...)
	if err != nil {
		return nil, err
	}
	r.utc()
	return &r, nil
}

// utc converts r's times to UTC.
func (r *Reclaim) utc() {
	r.DetectedAt, r.UpdatedAt = r.DetectedAt.UTC(), r.UpdatedAt.UTC()
	r.NoticeAt, r.NoticeDeadline, r.DecidedAt, r.ReleasedAt = utcPtr(r.NoticeAt), utcPtr(r.NoticeDeadline),
		utcPtr(r.DecidedAt), utcPtr(r.ReleasedAt)
	r.DisputedAt, r.DisputeRejectedAt = utcPtr(r.DisputedAt), utcPtr(r.DisputeRejectedAt)
}

// evidenceRow is one row of ReclaimEvidence's allocation query.
type evidenceRow struct {
	AllocationID     string                `db:"allocation_id"`
	JobID            string                `db:"job_id"`
	Project          string                `db:"project"`
	Queue            string                `db:"queue"`
	Tier             string                `db:"tier"`
	Pool             string                `db:"pool"`
	Node             string                `db:"node"`
	JobState         vocab.JobState        `db:"job_state"`
	Protected        bool                  `db:"protected"`
	GrantedAt        time.Time             `db:"granted_at"`
	RunID            string                `db:"run_id"`
	RunStartedAt     *time.Time            `db:"run_started_at"`
	RunEndedAt       *time.Time            `db:"run_ended_at"`
	RunOutcome       vocab.RunOutcome      `db:"run_outcome"`
	LastCheckpointAt *time.Time            `db:"last_checkpoint_at"`
	LastProgressAt   *time.Time            `db:"last_progress_at"`
	CompletedAt      *time.Time            `db:"completed_at"`
	CompletedBy      string                `db:"completed_by"`
	CompletedReason  string                `db:"completed_reason"`
	GPUUUIDs         []string              `db:"gpu_uuids"`
	Milli            int64                 `db:"milli"`
	Stage            vocab.AutomationStage `db:"stage"`
	Reclaimed        bool                  `db:"reclaimed"`
}

// ReclaimEvidence returns the evidence of every active allocation for the
// reclaim scan: job (with its queue and tier), queue protection, run, its
// newest checkpoint and its last observed progress (ObserveRunSteps), the
// owner's completion declaration (CompleteJob), and the utilisation and
// memory samples of its GPUs taken at or after since (the start of the
// observation window). Errors are wrapped with "reclaim evidence".
func (s *Store) ReclaimEvidence(ctx context.Context, since time.Time) ([]governance.Evidence, error) {
	rows, err := queryAll[evidenceRow](ctx, s.pool, `
		SELECT a.id AS allocation_id, a.job_id, j.project, j.queue, j.tier, a.pool, a.node, j.state AS job_state,
			j.protected OR coalesce(q.protected, false) AS protected,
			a.granted_at, coalesce(r.id, '') AS run_id, r.started_at AS run_started_at, r.ended_at AS run_ended_at,
			coalesce(r.outcome, '') AS run_outcome,
			(r.last_checkpoint->>'at')::timestamptz AS last_checkpoint_at, r.progress_at AS last_progress_at,
			a.completed_at, a.completed_by, a.completed_reason,
			coalesce((SELECT array_agg(g.gpu_uuid ORDER BY g.gpu_uuid) FROM allocation_gpus g WHERE g.allocation_id = a.id AND g.active), '{}') AS gpu_uuids,
			coalesce((SELECT sum(g.milli) FROM allocation_gpus g WHERE g.allocation_id = a.id AND g.active), 0) AS milli,
			coalesce(p.stage, 'observe') AS stage, EXISTS (SELECT 1 FROM reclaims rc WHERE rc.allocation_id = a.id) AS reclaimed
		FROM allocations a JOIN jobs j ON j.id = a.job_id LEFT JOIN queues q ON q.name = j.queue
			LEFT JOIN pools p ON p.name = a.pool
			LEFT JOIN runs r ON r.id = a.run_id
		WHERE a.released_at IS NULL ORDER BY a.id`)
	if err != nil {
		return nil, fmt.Errorf("store: reclaim evidence: %w", err)
	}
	out := make([]governance.Evidence, len(rows))
	byGPU := map[string][]int{}
	for i, r := range rows {
		out[i] = governance.Evidence{AllocationID: r.AllocationID, JobID: r.JobID, Project: r.Project, Queue: r.Queue,
			Tier: r.Tier, Pool: r.Pool, Node: r.Node, JobState: r.JobState, Protected: r.Protected,
			GrantedAt: r.GrantedAt, RunID: r.RunID, RunEndedAt: r.RunEndedAt, RunOutcome: r.RunOutcome,
			LastCheckpointAt: r.LastCheckpointAt, LastProgressAt: r.LastProgressAt, GPUUUIDs: r.GPUUUIDs, GPUs: float64(r.Milli) / 1000,
			Stage: r.Stage, Reclaimed: r.Reclaimed}
		if r.CompletedAt != nil {
			out[i].Completion = &governance.Completion{By: r.CompletedBy, At: r.CompletedAt.UTC(), Reason: r.CompletedReason}
		}
		if r.RunStartedAt != nil {
			out[i].RunStartedAt = *r.RunStartedAt
		}
		for _, u := range r.GPUUUIDs {
			byGPU[u] = append(byGPU[u], i)
		}
	}
	uuids := make([]string, 0, len(byGPU))
	for u := range byGPU {
		uuids = append(uuids, u)
	}
	samples, err := s.GPUSamples(ctx, uuids, since)
	if err != nil {
		return nil, fmt.Errorf("store: reclaim evidence: %w", err)
	}
	for _, sm := range samples {
		for _, i := range byGPU[sm.GPUUUID] {
			out[i].Samples = append(out[i].Samples, governance.Sample{GPUUUID: sm.GPUUUID, At: sm.At, GPUPercent: sm.GPUPercent,
				MemoryUsedMiB: sm.MemoryUsedMiB})
		}
	}
	return out, nil
}

// NewReclaim is a finding a ReclaimWorkflow records.
type NewReclaim struct {
	Evidence   governance.Evidence
	Finding    governance.Finding
	Decision   governance.ModeDecision
	WorkflowID string
	At         time.Time
}

// OpenReclaim records a finding for its allocation (one reclaim per
// allocation: a second call returns the first record and false) and, in the
// same transaction, its reclaim_open audit entry on the job. The evidence
// stored is the basis, the run, the checkpoint time, the run's last
// observed progress, the owner's completion declaration, the run's last
// heartbeat and its age at nr.At (when known), a summary of the samples and,
// for an idle finding, each GPU's window (mean, peak, bursts, memory) and why
// it is notify-at-most. Errors are database errors.
func (s *Store) OpenReclaim(ctx context.Context, nr NewReclaim) (*Reclaim, bool, error) {
	e := nr.Evidence
	evidence := map[string]any{"job_state": e.JobState, "run_id": e.RunID, "run_outcome": e.RunOutcome,
		"granted_at": e.GrantedAt.UTC(), "gpu_uuids": e.GPUUUIDs, "samples": len(e.Samples), "protected": e.Protected,
		"mode_reason": nr.Decision.Why}
	if !e.RunStartedAt.IsZero() {
		evidence["run_started_at"] = e.RunStartedAt.UTC()
	}
	if e.LastCheckpointAt != nil {
		evidence["last_checkpoint_at"] = e.LastCheckpointAt.UTC()
	}
	if e.LastProgressAt != nil {
		evidence["last_progress_at"] = e.LastProgressAt.UTC()
	}
	if c := e.Completion; c != nil {
		evidence["completion"] = map[string]any{"by": c.By, "at": c.At.UTC(), "reason": c.Reason}
	}
	if age, ok := e.HeartbeatAge(nr.At); ok {
		evidence["last_heartbeat_at"] = e.LastHeartbeatAt.UTC()
		evidence["heartbeat_age_s"] = age.Seconds()
	}
	if len(e.Samples) > 0 {
		peak := 0
		var memory int64
		for _, sm := range e.Samples {
			peak, memory = max(peak, sm.GPUPercent), max(memory, sm.MemoryUsedMiB)
		}
		evidence["peak_gpu_percent"] = peak
		evidence["max_memory_mib"] = memory
	}
	if len(nr.Finding.GPUs) > 0 {
		gpus := make([]map[string]any, len(nr.Finding.GPUs))
		for i, w := range nr.Finding.GPUs {
			gpus[i] = map[string]any{"gpu_uuid": w.GPUUUID, "samples": w.Samples, "mean_gpu_percent": w.MeanPercent,
				"peak_gpu_percent": w.PeakPercent, "bursts": w.Bursts, "max_memory_mib": w.MaxMemoryMiB}
		}
		evidence["gpu_windows"] = gpus
	}
	if nr.Finding.NotifyAtMost != "" {
		evidence["notify_at_most"] = nr.Finding.NotifyAtMost
	}
	var inserted bool
	id := newID("rc-")
	err := s.inTx(ctx, "open reclaim of "+e.AllocationID, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			INSERT INTO reclaims (id, allocation_id, job_id, project, queue, pool, node, class, mode, configured_mode, stage,
				basis, evidence, gpus, workflow_id, detected_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16)
			ON CONFLICT (allocation_id) DO NOTHING`,
			id, e.AllocationID, e.JobID, e.Project, e.Queue, e.Pool, e.Node, string(nr.Finding.Class),
			string(nr.Decision.Mode), string(nr.Decision.Configured), string(nr.Decision.Stage), nr.Finding.Basis,
			evidenceJSON(evidence), e.GPUs, nr.WorkflowID, nr.At)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		inserted = true
		audit := map[string]any{"reclaim_id": id, "allocation_id": e.AllocationID, "class": nr.Finding.Class,
			"mode": nr.Decision.Mode, "configured_mode": nr.Decision.Configured, "stage": nr.Decision.Stage}
		for k, v := range evidence {
			audit[k] = v
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: nr.At, Actor: vocab.ActorReclaim, Action: AuditReclaimOpen, Subject: e.JobID,
			Reason:   fmt.Sprintf("allocation %s is %s (mode %s): %s", e.AllocationID, nr.Finding.Class, nr.Decision.Mode, nr.Finding.Basis),
			Evidence: audit})
	})
	if err != nil {
		return nil, false, err
	}
	r, err := queryReclaim(ctx, s.pool, `SELECT `+reclaimColumns+` FROM reclaims WHERE allocation_id = $1`, e.AllocationID)
	if err != nil {
		return nil, false, fmt.Errorf("store: open reclaim of %s: %w", e.AllocationID, err)
	}
	return r, inserted, nil
}

// GetReclaim returns one reclaim. Errors wrap ErrNotFound or database errors.
func (s *Store) GetReclaim(ctx context.Context, id string) (*Reclaim, error) {
	r, err := queryReclaim(ctx, s.pool, `SELECT `+reclaimColumns+` FROM reclaims WHERE id = $1`, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: reclaim %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get reclaim %s: %w", id, err)
	}
	return r, nil
}

// ReclaimFilter selects reclaims for ListReclaims; empty fields match all.
// Limit 0 means DefaultListLimit, capped at MaxListLimit.
type ReclaimFilter struct {
	Class vocab.ReclaimClass
	Mode  vocab.ReclaimMode
	Pool  string
	State vocab.ReclaimState
	// Project keeps the reclaims of this project's allocations (a
	// submitter's view); "" keeps all.
	Project string
	Limit   int
}

// ListReclaims returns the newest reclaims matching f first. Errors are
// wrapped with "list reclaims".
func (s *Store) ListReclaims(ctx context.Context, f ReclaimFilter) ([]Reclaim, error) {
	limit := pageLimit(f.Limit)
	out, err := queryAll[Reclaim](ctx, s.pool, `SELECT `+reclaimColumns+` FROM reclaims
		WHERE ($1 = '' OR class = $1) AND ($2 = '' OR mode = $2) AND ($3 = '' OR pool = $3) AND ($4 = '' OR state = $4)
			AND ($6 = '' OR project = $6)
		ORDER BY detected_at DESC, id DESC LIMIT $5`, f.Class, f.Mode, f.Pool, f.State, limit, f.Project)
	for i := range out {
		out[i].utc()
	}
	if err != nil {
		return nil, fmt.Errorf("store: list reclaims: %w", err)
	}
	return out, nil
}

// SetReclaimState moves an undecided reclaim (open, notified or
// awaiting_confirmation) to state with a detail; a reclaim already in a
// final state is left alone, so retries are safe. A move to reported or
// expired (the reclaim ends without a release) is audited as reclaim_close
// in the same transaction. Errors are database errors.
func (s *Store) SetReclaimState(ctx context.Context, id string, state vocab.ReclaimState, detail string, at time.Time) error {
	return s.inTx(ctx, "set reclaim "+id+" "+string(state), func(tx pgx.Tx) error {
		var jobID, alloc, class, mode string
		err := tx.QueryRow(ctx, `
			UPDATE reclaims SET state = $2, detail = $3, updated_at = $4
			WHERE id = $1 AND state IN ('open', 'notified', 'awaiting_confirmation')
			RETURNING job_id, allocation_id, class, mode`, id, state, detail, at).Scan(&jobID, &alloc, &class, &mode)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && state != vocab.ReclaimReported && state != vocab.ReclaimExpired) {
			return nil
		}
		if err != nil {
			return err
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: vocab.ActorReclaim, Action: AuditReclaimClose, Subject: jobID,
			Reason:   fmt.Sprintf("allocation %s (%s, mode %s) %s without release: %s", alloc, class, mode, state, detail),
			Evidence: map[string]any{"reclaim_id": id, "allocation_id": alloc, "class": class, "mode": mode, "state": state}})
	})
}

// NoticeReclaim records the owner's notice of a notify-mode reclaim: the
// notice time and the deadline by which the owner may keep the GPUs, state
// notified, and an audit entry on the job (actor reclaim) with the class,
// basis and deadline — the notice the owner sees with `gpugov reclaims` and
// the job's audit — and, in the notice's transaction, the owner's
// job.reclaim_notice notification with the deadline (docs/design.md §3
// step 7). The first notice is kept, so retries are safe.
func (s *Store) NoticeReclaim(ctx context.Context, id string, deadline, at time.Time) (*Reclaim, error) {
	var noticed bool
	err := s.inTx(ctx, "notice reclaim "+id, func(tx pgx.Tx) error {
		var jobID, alloc, class, basis string
		err := tx.QueryRow(ctx, `
			UPDATE reclaims SET notice_at = $3, notice_deadline = $2, state = 'notified', updated_at = $3
			WHERE id = $1 AND notice_at IS NULL AND state = 'open'
			RETURNING job_id, allocation_id, class, basis`, id, deadline, at).Scan(&jobID, &alloc, &class, &basis)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		noticed = true
		// The owner's submitter learns the deadline and how to keep the GPUs.
		return insertNotifications(ctx, tx, []noteRow{{jobID: jobID, kind: vocab.NotifyReclaimNotice, data: map[string]any{
			"reclaim_id": id, "allocation_id": alloc, "class": class, "basis": basis, "deadline": deadline.UTC(),
			"keep": "POST /v1/reclaims/" + id + "/keep"}}}, at)
	})
	if err != nil {
		return nil, err
	}
	r, err := s.GetReclaim(ctx, id)
	if err != nil || !noticed {
		return r, err
	}
	return r, s.AppendAudit(ctx, AuditEntry{At: at, Actor: vocab.ActorReclaim, Action: AuditReclaimNotice, Subject: r.JobID,
		Reason: fmt.Sprintf("allocation %s is %s: %s; released at %s unless the owner keeps it", r.AllocationID, r.Class,
			r.Basis, deadline.UTC().Format(time.RFC3339)),
		Evidence: map[string]any{"reclaim_id": id, "allocation_id": r.AllocationID, "class": r.Class, "deadline": deadline.UTC()}})
}

// DisputeReclaim records that the owner (by) kept the allocation with
// reason: a false reclaim. Nothing is released. Only an undecided reclaim is
// changed; it returns the reclaim and whether this call recorded the
// dispute. Errors are database errors.
func (s *Store) DisputeReclaim(ctx context.Context, id, by, reason string, at time.Time) (*Reclaim, bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE reclaims SET state = 'kept', disputed = true, dispute_by = $2, dispute_reason = $3, disputed_at = $4,
			decided_by = $2, decided_at = $4, detail = 'kept by the owner: ' || $3, updated_at = $4
		WHERE id = $1 AND state IN ('open', 'notified', 'awaiting_confirmation')`, id, by, reason, at)
	if err != nil {
		return nil, false, fmt.Errorf("store: dispute reclaim %s: %w", id, err)
	}
	r, err := s.GetReclaim(ctx, id)
	if err != nil || tag.RowsAffected() == 0 {
		return r, false, err
	}
	return r, true, s.AppendAudit(ctx, AuditEntry{At: at, Actor: by, Action: AuditReclaimDispute, Subject: r.JobID,
		Reason: reason, Evidence: map[string]any{"reclaim_id": id, "allocation_id": r.AllocationID, "class": r.Class,
			"mode": r.Mode, "after_release": false}})
}

// ConfirmReclaim records an operator's (by) approval of a confirm-mode
// reclaim. Only an undecided reclaim is changed; retries are safe.
func (s *Store) ConfirmReclaim(ctx context.Context, id, by, reason string, at time.Time) (*Reclaim, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE reclaims SET decided_by = $2, decided_at = $3, updated_at = $3
		WHERE id = $1 AND decided_at IS NULL AND state IN ('open', 'notified', 'awaiting_confirmation')`, id, by, at)
	if err != nil {
		return nil, fmt.Errorf("store: confirm reclaim %s: %w", id, err)
	}
	r, err := s.GetReclaim(ctx, id)
	if err != nil || tag.RowsAffected() == 0 {
		return r, err
	}
	return r, s.AppendAudit(ctx, AuditEntry{At: at, Actor: by, Action: AuditReclaimConfirm, Subject: r.JobID,
		Reason: reason, Evidence: map[string]any{"reclaim_id": id, "allocation_id": r.AllocationID}})
}

// ReleaseReclaimed releases the allocation of reclaim id in one
// transaction: a run still going ends cancelled (detail names the reclaim)
// and its job is cancelled; a job whose run ended takes that run's outcome
// (succeeded, failed, cancelled; preempted requeues); a job with no run is
// requeued. The reclaim records the release time and GPUs released, and the
// job's audit the action. When the allocation was already released by its
// own job, the reclaim is resolved instead and 0 is returned. Retries are
// safe. Errors wrap ErrNotFound or database errors.
func (s *Store) ReleaseReclaimed(ctx context.Context, id, by string, at time.Time) (*Reclaim, error) {
	r, err := s.GetReclaim(ctx, id)
	if err != nil || r.ReleasedAt != nil || r.State == vocab.ReclaimResolved {
		return r, err
	}
	err = s.inTx(ctx, "release reclaim "+id, func(tx pgx.Tx) error {
		if _, _, _, err := lockJob(ctx, tx, r.JobID); err != nil {
			return err
		}
		var runID string
		var outcome vocab.RunOutcome
		var ended bool
		err := tx.QueryRow(ctx, `
			SELECT coalesce(a.run_id, ''), coalesce(ru.outcome, ''), ru.ended_at IS NOT NULL
			FROM allocations a LEFT JOIN runs ru ON ru.id = a.run_id WHERE a.id = $1`, r.AllocationID).Scan(&runID, &outcome, &ended)
		if err != nil {
			return err
		}
		milli, err := releaseAllocation(ctx, tx, r.AllocationID, "reclaimed ("+string(r.Class)+")", at)
		if err != nil {
			return err
		}
		if milli == 0 {
			_, err := tx.Exec(ctx, `UPDATE reclaims SET state = 'resolved', detail = 'released by its job before the reclaim acted',
				updated_at = $2 WHERE id = $1 AND released_at IS NULL`, id, at)
			return err
		}
		next := outcome
		switch {
		case runID == "":
			next = vocab.RunRequeued
		case !ended:
			next = vocab.RunCancelled
			if _, err := tx.Exec(ctx, `UPDATE runs SET ended_at = greatest($2, started_at), outcome = 'cancelled', detail = $3 WHERE id = $1`,
				runID, at, "reclaimed as "+string(r.Class)+" by "+id); err != nil {
				return err
			}
		case outcome == vocab.RunPreempted:
			next = vocab.RunRequeued
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs SET cancel_requested = cancel_requested OR $2 WHERE id = $1`, r.JobID, next == vocab.RunCancelled); err != nil {
			return err
		}
		if err := setJobAfterRelease(ctx, tx, r.JobID, next, at); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE reclaims SET state = 'released', released_at = $2, gpus_released = $3, updated_at = $2,
			decided_by = CASE WHEN decided_by = '' THEN $4 ELSE decided_by END WHERE id = $1`,
			id, at, float64(milli)/1000, by); err != nil {
			return err
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: by, Action: AuditReclaimRelease, Subject: r.JobID,
			Reason: fmt.Sprintf("%s allocation %s released: %s", r.Class, r.AllocationID, r.Basis),
			Evidence: map[string]any{"reclaim_id": id, "allocation_id": r.AllocationID, "gpus_released": float64(milli) / 1000,
				"mode": r.Mode, "job_state_after": next}})
	})
	if err != nil {
		return nil, err
	}
	return s.GetReclaim(ctx, id)
}

// MarkReclaimReleased records that reclaim id's allocation was released by
// its own job after the reclaim cancelled it (an idle run stopped through its
// job workflow): state released with the GPUs the reclaim found, audited
// with by. A reclaim already released is left alone, so retries are safe.
func (s *Store) MarkReclaimReleased(ctx context.Context, id, by string, at time.Time) (*Reclaim, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE reclaims r SET state = 'released', released_at = coalesce(a.released_at, $3), gpus_released = r.gpus,
			decided_by = CASE WHEN r.decided_by = '' THEN $2 ELSE r.decided_by END, updated_at = $3
		FROM allocations a WHERE r.id = $1 AND a.id = r.allocation_id AND a.released_at IS NOT NULL AND r.released_at IS NULL`,
		id, by, at)
	if err != nil {
		return nil, fmt.Errorf("store: mark reclaim %s released: %w", id, err)
	}
	r, err := s.GetReclaim(ctx, id)
	if err != nil || tag.RowsAffected() == 0 {
		return r, err
	}
	return r, s.AppendAudit(ctx, AuditEntry{At: at, Actor: by, Action: AuditReclaimRelease, Subject: r.JobID,
		Reason:   fmt.Sprintf("%s allocation %s released by stopping its run: %s", r.Class, r.AllocationID, r.Basis),
		Evidence: map[string]any{"reclaim_id": id, "allocation_id": r.AllocationID, "gpus_released": r.GPUs, "mode": r.Mode}})
}
