package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/vocab"
)

// LastDecision is the last scheduling action for a job (docs/design.md §1,
// "last scheduling action"): the latest cycle that decided about it and what
// it did, read from the cycle's decisions rows and the job's explanation.
type LastDecision struct {
	CycleID string
	At      time.Time // the cycle's instant
	Action  vocab.SchedulingAction
	// Reason is the wait reason of left_waiting, held_by_reservation and
	// skipped; empty otherwise.
	Reason vocab.WaitReason
	// JobID is the job the action names: the holder of the reservation
	// (held_by_reservation); empty otherwise.
	JobID string
	// Victims are the running jobs a started or proposed preemption stops.
	Victims []string
	// Detail is the refusal of a refused placement, or the reason of a
	// preemption proposal, with its quantities; empty otherwise.
	Detail string
	// Rank is the job's rank in its pool in that cycle (0: not recorded).
	Rank int
	// Since is when cycles began taking this action for the job without a
	// break: the decision that recorded it (a wait decision is recorded
	// only when the reason or the blocking job changes); At otherwise.
	Since time.Time
	// Policy is the hash of the policy version the deciding cycle ran with
	// (scheduling_cycles.policy_version; "" when it recorded none).
	Policy string
}

// decisionBody is what LastDecision reads of a decisions row's body: the
// stored Explanation of a wait, the place and conflict bodies, and
// proposalBody.
type decisionBody struct {
	Reason        string `json:"reason"`
	BlockingJobID string `json:"blocking_job_id"`
	Rank          int    `json:"rank"`
	Victims       []struct {
		JobID string `json:"job_id"`
	} `json:"victims"`
}

// decisionRank orders the kinds of one cycle's decisions for a job: the
// most consequential one is its action.
var decisionRank = map[string]int{"preempt": 5, "would_preempt": 4, "conflict": 3, "place": 2, "wait": 1}

// LastDecision returns the last scheduling action for job (as GetJob
// returned it), or nil when no cycle has decided about it. A cycle
// rewrites a pending job's explanation with the cycle's ID and instant when
// it changed or is ExplanationRefreshInterval old, but records a wait decision only
// when the reason or the blocking job changes;
// so a job whose latest evaluation is newer than its latest decision was
// left as it was, and its action comes from the explanation, since the
// latest wait decision. Otherwise the latest decision cycle's rows give it
// (preemption started > proposed > placement refused > placed > wait).
// Policy is the deciding cycle's policy version. It costs one or two
// probes of decisions_job_idx (and one of scheduling_cycles' key). Errors are wrapped with
// "last decision of <id>".
func (s *Store) LastDecision(ctx context.Context, job *Job) (*LastDecision, error) {
	type row struct {
		CycleID string          `db:"cycle_id"`
		Kind    string          `db:"kind"`
		Body    json.RawMessage `db:"body"`
		At      time.Time       `db:"at"`
		Policy  string          `db:"policy"`
	}
	rows, err := queryAll[row](ctx, s.pool, `
		SELECT d.cycle_id, d.kind, d.body, d.at, coalesce(c.policy_version, '') AS policy
		FROM decisions d LEFT JOIN scheduling_cycles c ON c.id = d.cycle_id
		WHERE d.job_id = $1 AND d.at = (SELECT max(at) FROM decisions WHERE job_id = $1) ORDER BY d.id`, job.ID)
	if err != nil {
		return nil, fmt.Errorf("store: last decision of %s: %w", job.ID, err)
	}
	e := job.Explanation
	if e != nil && e.CycleID != "" && e.EvaluatedAt != nil && e.Placed == nil &&
		(len(rows) == 0 || e.EvaluatedAt.After(rows[0].At)) {
		d := &LastDecision{CycleID: e.CycleID, At: e.EvaluatedAt.UTC(), Rank: e.Rank, Since: e.EvaluatedAt.UTC()}
		d.fromWait(e.Reason, e.BlockingJobID)
		var since time.Time
		err := s.pool.QueryRow(ctx, `
			SELECT at FROM decisions WHERE job_id = $1 AND kind = 'wait' ORDER BY at DESC LIMIT 1`, job.ID).Scan(&since)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("store: last decision of %s: %w", job.ID, err)
		case !since.After(d.At):
			d.Since = since.UTC()
		}
		err = s.pool.QueryRow(ctx, `SELECT policy_version FROM scheduling_cycles WHERE id = $1`, e.CycleID).Scan(&d.Policy)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("store: last decision of %s: %w", job.ID, err)
		}
		return d, nil
	}
	if len(rows) == 0 {
		return nil, nil
	}
	top := rows[0]
	for _, r := range rows[1:] {
		if decisionRank[r.Kind] > decisionRank[top.Kind] {
			top = r
		}
	}
	var body decisionBody
	if err := json.Unmarshal(top.Body, &body); err != nil {
		return nil, fmt.Errorf("store: last decision of %s: decode %s decision: %w", job.ID, top.Kind, err)
	}
	d := &LastDecision{CycleID: top.CycleID, At: top.At.UTC(), Rank: body.Rank, Since: top.At.UTC(), Policy: top.Policy}
	switch top.Kind {
	case "preempt", "would_preempt":
		d.Action, d.Detail = vocab.ActionPreemptionStarted, body.Reason
		if top.Kind == "would_preempt" {
			d.Action = vocab.ActionPreemptionProposed
		}
		for _, v := range body.Victims {
			d.Victims = append(d.Victims, v.JobID)
		}
	case "conflict":
		d.Action, d.Detail = vocab.ActionPlacementRefused, body.Reason
	case "place":
		d.Action = vocab.ActionPlaced
	default:
		d.fromWait(vocab.WaitReason(body.Reason), body.BlockingJobID)
	}
	return d, nil
}

// fromWait sets the action a wait status with reason and blocking job
// stands for.
func (d *LastDecision) fromWait(reason vocab.WaitReason, blocking string) {
	d.Reason = reason
	switch reason {
	case vocab.ReasonReservedForHigherPriority:
		d.Action, d.JobID = vocab.ActionHeldByReservation, blocking
	case vocab.ReasonHeld, vocab.ReasonEnvironmentNotReady, vocab.ReasonPoolUnavailable:
		d.Action = vocab.ActionSkipped
	default:
		d.Action = vocab.ActionLeftWaiting
	}
}

// DefaultDecisionRetention is how long decisions rows are kept when the
// caller gives no retention (service: --decision-retention).
const DefaultDecisionRetention = 7 * 24 * time.Hour

// PruneDecisions deletes the decisions rows recorded before before and
// returns how many it deleted, in statements of at most batch rows (≤ 0
// means DefaultPruneBatch), oldest first through decisions_at_idx
// (migration 00150), until one deletes fewer than batch; a cancelled ctx
// stops it between statements. It keeps, for every job not yet final, its
// latest decision of any kind (a job running for longer than the retention
// keeps its placement, which LastDecision reports) and its latest wait
// decision, which LastDecision reads as the start of the current action. A cycle writes one row per placement, refused placement
// and preemption proposal and one per waiting job whose reason or blocking
// job changed, so the table grows with changes and proposals, not with
// waiting jobs × cycles. Errors are wrapped with "prune decisions" and come
// with the count deleted so far.
func (s *Store) PruneDecisions(ctx context.Context, before time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	var deleted int64
	for {
		tag, err := s.pool.Exec(ctx, `
			DELETE FROM decisions WHERE id IN (
				SELECT d.id FROM decisions d
				WHERE d.at < $1 AND NOT (EXISTS (SELECT 1 FROM job_queue q WHERE q.job_id = d.job_id)
					AND (d.at = (SELECT max(x.at) FROM decisions x WHERE x.job_id = d.job_id)
						OR (d.kind = 'wait'
							AND d.at = (SELECT max(x.at) FROM decisions x WHERE x.job_id = d.job_id AND x.kind = 'wait'))))
				ORDER BY d.at LIMIT $2)`, before, batch)
		if err != nil {
			return deleted, fmt.Errorf("store: prune decisions: %w", err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return deleted, nil
		}
	}
}
