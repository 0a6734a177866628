package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/vocab"
)

// AuditCompleteJob is the audit action of an owner's business-complete
// declaration (subject: the job; evidence: allocation_id, run_id, state,
// gpus).
const AuditCompleteJob = "complete_job"

// RunStep is the step a run's executor last heartbeated, as the reclaim scan
// read it from the run activity's heartbeat.
type RunStep struct {
	RunID string
	Step  int64
}

// ObserveRunSteps records the steps the reclaim scan read at at, and returns
// for every run given the instant its progress was last seen (runs that were
// never seen to progress are absent). The rule (docs/design.md §3 "The idle
// rule"): a step above the one stored, or, at the first observation, above
// the step the run started from, is progress observed at at; an equal or
// lower step changes nothing. So progress_at is when the scan first saw the
// step advance, at most one scan interval after the progress itself; a run
// first observed after it progressed counts as progressing at that first
// observation (the scan cannot tell when, and assumes recent work). Steps of
// runs that ended or do not exist are ignored. Errors are database errors.
func (s *Store) ObserveRunSteps(ctx context.Context, steps []RunStep, at time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(steps) == 0 {
		return out, nil
	}
	ids, vals := make([]string, len(steps)), make([]int64, len(steps))
	for i, st := range steps {
		ids[i], vals[i] = st.RunID, st.Step
	}
	err := forEachRow(ctx, s.pool, `
		WITH seen AS (SELECT DISTINCT ON (id) id, step FROM unnest($1::text[], $2::bigint[]) AS u (id, step) ORDER BY id, step DESC),
		upd AS (
			UPDATE runs r SET
				progress_at = CASE WHEN seen.step > coalesce(r.progress_step, r.start_step) THEN $3 ELSE r.progress_at END,
				progress_step = greatest(seen.step, coalesce(r.progress_step, seen.step))
			FROM seen WHERE r.id = seen.id AND r.ended_at IS NULL
			RETURNING r.id, r.progress_at)
		SELECT id, progress_at FROM upd WHERE progress_at IS NOT NULL`, []any{ids, vals, at},
		func(rows pgx.Rows) error {
			var id string
			var p time.Time
			if err := rows.Scan(&id, &p); err != nil {
				return err
			}
			out[id] = p.UTC()
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("store: observe run steps: %w", err)
	}
	return out, nil
}

// JobCompletion is an owner's business-complete declaration of a job's
// current allocation: the work is done, cleanup still holds the GPUs.
type JobCompletion struct {
	JobID        string    `db:"job_id"`
	AllocationID string    `db:"allocation_id"`
	RunID        string    `db:"run_id"` // "" when the allocation has no run
	DeclaredBy   string    `db:"completed_by"`
	DeclaredAt   time.Time `db:"completed_at"`
	Reason       string    `db:"completed_reason"`
}

// CompleteJob records the business-complete declaration of job jobID by
// actor (the job's project token or an operator) with reason, on the job's
// active allocation, and audits it (AuditCompleteJob) in the same
// transaction; the next reclaim scan classifies that allocation completed
// and handles it in the mode the policy gives (docs/design.md §3 step 5). A
// second declaration of the same allocation changes nothing and returns the
// first with false, so retries are safe. Errors wrap ErrNotFound (no such
// job), ErrConflict (the job holds no GPUs: pending or final) or database
// errors.
func (s *Store) CompleteJob(ctx context.Context, jobID, actor, reason string, at time.Time) (*JobCompletion, bool, error) {
	if err := required("actor", actor); err != nil {
		return nil, false, fmt.Errorf("store: complete job %s: %w", jobID, err)
	}
	var out JobCompletion
	var first bool
	err := s.inTx(ctx, "complete job "+jobID, func(tx pgx.Tx) error {
		state, _, _, err := lockJob(ctx, tx, jobID)
		if err != nil {
			return err
		}
		if state != vocab.JobPlaced && state != vocab.JobRunning {
			return fmt.Errorf("job is %s; only a placed or running job holds GPUs to declare complete: %w", state, ErrConflict)
		}
		var gpus float64
		err = tx.QueryRow(ctx, `
			SELECT a.id, coalesce(a.run_id, ''), a.completed_at IS NULL,
				coalesce((SELECT sum(g.milli) FROM allocation_gpus g WHERE g.allocation_id = a.id AND g.active), 0) / 1000.0
			FROM allocations a WHERE a.job_id = $1 AND a.released_at IS NULL ORDER BY a.granted_at DESC LIMIT 1 FOR UPDATE OF a`,
			jobID).Scan(&out.AllocationID, &out.RunID, &first, &gpus)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job is %s but holds no active allocation: %w", state, ErrConflict)
		}
		if err != nil {
			return err
		}
		if first {
			if _, err := tx.Exec(ctx, `UPDATE allocations SET completed_at = $2, completed_by = $3, completed_reason = $4 WHERE id = $1`,
				out.AllocationID, at, actor, reason); err != nil {
				return err
			}
		}
		row, err := queryOne[JobCompletion](ctx, tx, `
			SELECT job_id, id AS allocation_id, coalesce(run_id, '') AS run_id, completed_by, completed_at, completed_reason
			FROM allocations WHERE id = $1`, out.AllocationID)
		if err != nil {
			return err
		}
		out = row
		if !first {
			return nil
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: actor, Action: AuditCompleteJob, Subject: jobID,
			Reason: reason, Evidence: map[string]any{"allocation_id": out.AllocationID, "run_id": out.RunID,
				"state": string(state), "gpus": gpus}})
	})
	if err != nil {
		return nil, false, err
	}
	out.DeclaredAt = out.DeclaredAt.UTC()
	return &out, first, nil
}

// DisputeReleasedReclaim records the owner's (by) dispute of reclaim id's
// release with reason: a false reclaim ("the job was working"), counted by
// FalseReclaims unless an operator rejects it (RejectDispute). The reclaim
// must be released and the dispute made within window of its release (the
// policy's reclaim.dispute_window_s). The dispute and its audit entry
// (AuditReclaimDispute, after_release true) are written in one transaction.
// A reclaim already disputed is returned unchanged with false, so retries
// are safe. Errors wrap ErrNotFound, ErrInvalid (reason empty), ErrConflict
// (not released, or the window has closed) or database errors.
func (s *Store) DisputeReleasedReclaim(ctx context.Context, id, by, reason string, window time.Duration, at time.Time) (*Reclaim, bool, error) {
	return s.disputeChange(ctx, "dispute reclaim "+id, id, by, reason, func(tx pgx.Tx, r *Reclaim) (bool, error) {
		switch {
		case r.Disputed:
			return false, nil
		case r.State != vocab.ReclaimReleased || r.ReleasedAt == nil:
			return false, fmt.Errorf("reclaim %s is %s: only a released reclaim can be disputed (one that awaits a decision is kept with POST /v1/reclaims/%s/keep): %w",
				id, r.State, id, ErrConflict)
		case at.After(r.ReleasedAt.Add(window)):
			return false, fmt.Errorf("reclaim %s was released at %s: its dispute window of %s closed at %s: %w", id,
				r.ReleasedAt.Format(time.RFC3339), window, r.ReleasedAt.Add(window).Format(time.RFC3339), ErrConflict)
		}
		if _, err := tx.Exec(ctx, `
			UPDATE reclaims SET disputed = true, dispute_by = $2, dispute_reason = $3, disputed_at = $4, dispute_after_release = true,
				updated_at = $4
			WHERE id = $1`, id, by, reason, at); err != nil {
			return false, err
		}
		return true, appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: by, Action: AuditReclaimDispute, Subject: r.JobID, Reason: reason,
			Evidence: map[string]any{"reclaim_id": id, "allocation_id": r.AllocationID, "class": r.Class, "mode": r.Mode,
				"after_release": true, "released_at": r.ReleasedAt.UTC(), "gpus_released": r.GPUsReleased,
				"dispute_window_s": window.Seconds(), "basis": r.Basis}})
	})
}

// RejectDispute records an operator's (by) rejection of reclaim id's
// dispute with reason: the reclaim was right, and it no longer counts as a
// false reclaim. Rejection and its audit entry (AuditReclaimDisputeReject)
// are written in one transaction. A dispute already rejected is returned
// unchanged with false. Errors wrap ErrNotFound, ErrInvalid (reason empty),
// ErrConflict (no dispute to reject) or database errors.
func (s *Store) RejectDispute(ctx context.Context, id, by, reason string, at time.Time) (*Reclaim, bool, error) {
	return s.disputeChange(ctx, "reject dispute of reclaim "+id, id, by, reason, func(tx pgx.Tx, r *Reclaim) (bool, error) {
		switch {
		case !r.Disputed:
			return false, fmt.Errorf("reclaim %s is not disputed: %w", id, ErrConflict)
		case r.DisputeRejectedAt != nil:
			return false, nil
		}
		if _, err := tx.Exec(ctx, `
			UPDATE reclaims SET dispute_rejected_by = $2, dispute_rejection = $3, dispute_rejected_at = $4, updated_at = $4
			WHERE id = $1`, id, by, reason, at); err != nil {
			return false, err
		}
		ev := map[string]any{"reclaim_id": id, "allocation_id": r.AllocationID, "class": r.Class,
			"disputed_by": r.DisputeBy, "dispute_reason": r.DisputeReason, "after_release": r.DisputeAfterRelease}
		if r.DisputedAt != nil {
			ev["disputed_at"] = r.DisputedAt.UTC()
		}
		return true, appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: by, Action: AuditReclaimDisputeReject, Subject: r.JobID,
			Reason: reason, Evidence: ev})
	})
}

// disputeChange is the frame of a change to reclaim id's dispute by actor
// by with reason (what names it in errors: "dispute reclaim R1"): both are
// required (ErrInvalid), then change runs on the reclaim locked in a
// transaction (ErrNotFound when there is none) and says whether it
// recorded anything; the reclaim is then read again.
func (s *Store) disputeChange(ctx context.Context, what, id, by, reason string, change func(tx pgx.Tx, r *Reclaim) (bool, error)) (*Reclaim, bool, error) {
	if err := required("actor", by, "reason", strings.TrimSpace(reason)); err != nil {
		return nil, false, fmt.Errorf("store: %s: %w", what, err)
	}
	var recorded bool
	err := s.inTx(ctx, what, func(tx pgx.Tx) error {
		r, err := queryReclaim(ctx, tx, `SELECT `+reclaimColumns+` FROM reclaims WHERE id = $1 FOR UPDATE`, id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("reclaim %s: %w", id, ErrNotFound)
		case err != nil:
			return err
		}
		recorded, err = change(tx, r)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	r, err := s.GetReclaim(ctx, id)
	return r, recorded, err
}

// falseReclaimInWindow is the SQL predicate of a false reclaim of table
// reclaims disputed in [$1, $2): FalseReclaims and GovernanceMetrics share it.
const falseReclaimInWindow = `disputed AND dispute_rejected_at IS NULL AND disputed_at >= $1 AND disputed_at < $2`

// FalseReclaims counts the false reclaims of pools (every pool when pools
// is empty) disputed in [from, to): reclaims their owner disputed — kept
// before the release or disputed after it within the window — whose
// dispute no operator has rejected (as of the call). Errors are database
// errors.
func (s *Store) FalseReclaims(ctx context.Context, from, to time.Time, pools []string) (int, error) {
	if pools == nil {
		pools = []string{}
	}
	var n int
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FROM reclaims WHERE `+falseReclaimInWindow+`
			AND (cardinality($3::text[]) = 0 OR pool = ANY($3))`, from, to, pools).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: false reclaims: %w", err)
	}
	return n, nil
}
