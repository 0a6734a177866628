package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// PreemptionRecord is one row of preemptions: a preemption carried out by a
// PreemptionWorkflow, or a "would preempt" record of an observe-stage pool.
// Times are nil until the step ran; seconds and GPU-seconds are nil until
// measured.
type PreemptionRecord struct {
	ID string `db:"id"`
	// Kind is preemption (for ForJobID, opened by cycle CycleID) or drill
	// (a resume drill: ForJobID and CycleID are "", DrillActor started it).
	Kind         vocab.PreemptionKind    `db:"kind"`
	DrillActor   string                  `db:"drill_actor"`
	CycleID      string                  `db:"cycle_id"`
	WorkflowID   string                  `db:"workflow_id"`
	ForJobID     string                  `db:"for_job_id"`
	ForQueue     string                  `db:"for_queue"`
	VictimJobID  string                  `db:"victim_job_id"`
	VictimQueue  string                  `db:"victim_queue"`
	AllocationID string                  `db:"allocation_id"`
	Pool         string                  `db:"pool"`
	Reason       string                  `db:"reason"`
	State        vocab.PreemptionState   `db:"state"`
	Outcome      vocab.PreemptionOutcome `db:"outcome"` // "" while running
	Detail       string                  `db:"detail"`
	RunID        string                  `db:"run_id"`
	GPUs         float64                 `db:"gpus"` // GPU equivalents of the victim allocation
	// EstimatedLossGPUSeconds is the plan's estimate; EffectiveLossGPUSeconds the measured loss.
	EstimatedLossGPUSeconds float64                `db:"estimated_loss_gpu_s"`
	EffectiveLossGPUSeconds *float64               `db:"effective_loss_gpu_s"`
	RunStartedAt            *time.Time             `db:"run_started_at"`
	AccruedAgingS           *float64               `db:"accrued_aging_s"` // the victim's aging credit at the notice, seconds
	CheckpointAtNotice      *scheduling.Checkpoint `db:"-"`
	SavedCheckpoint         *scheduling.Checkpoint `db:"-"` // the checkpoint the next run must resume from
	CheckpointInGrace       *bool                  `db:"checkpoint_in_grace"`
	StepAtNotice            *int64                 `db:"step_at_notice"`
	StartedAt               time.Time              `db:"started_at"`
	NotifiedAt              *time.Time             `db:"notified_at"`
	SavedAt                 *time.Time             `db:"saved_at"`
	ReleasedAt              *time.Time             `db:"released_at"`
	RescheduledAt           *time.Time             `db:"rescheduled_at"`
	ResumedAt               *time.Time             `db:"resumed_at"`
	PassedAt                *time.Time             `db:"passed_at"`
	EndedAt                 *time.Time             `db:"ended_at"`
	FinishedAt              *time.Time             `db:"finished_at"`
	ResumedRunID            string                 `db:"resumed_run_id"`
	ResumedFromStep         *int64                 `db:"resumed_from_step"`
	ResumedCorrectly        *bool                  `db:"resumed_correctly"`
	LostSeconds             *float64               `db:"lost_s"`
	SaveRestoreSeconds      *float64               `db:"save_restore_s"`
	RecomputeSeconds        *float64               `db:"recompute_s"`
	Failures                []string               `db:"failures"`
	// ResumeVerified is true when the next run started at the saved step and
	// was seen progressing past it (counted as a verified resume of the
	// victim's recovery profile); false when it started elsewhere or did not
	// progress; nil while unknown or when no next run was seen.
	ResumeVerified *bool `db:"resume_verified"`
	// Candidates are the running jobs the plan weighed on the chosen
	// target, in the search's order (docs/design.md §5 "The preemption
	// record"); empty for records stored before they were kept.
	Candidates []PreemptionCandidate `db:"-"`
	// FinalState, FinalAt, FailuresSinceResume, OutputAffected and
	// OutputNote are the victim's outcome after the resume, filled when its
	// job ends (gpugov_fill_preemption_final): its final state and when;
	// its failed runs and failed or wrong-step resumes since the resume; and
	// whether the final output was affected (a failed or non-progressing
	// resume, or a failure of the job after it) with the reason. Empty or
	// nil until the job has ended, and for records that released nothing.
	FinalState          vocab.JobState `db:"final_state"`
	FinalAt             *time.Time     `db:"final_at"`
	FailuresSinceResume *int           `db:"failures_since_resume"`
	OutputAffected      *bool          `db:"output_affected"`
	OutputNote          string         `db:"output_note"`
}

// PreemptionCandidate is one running job a preemption's victim search
// weighed on the chosen target (scheduling.Candidate): its queue and
// whether that queue is low-risk, the GPUs it holds there, its estimated
// loss in GPU-seconds, whether it was chosen, and Gate, why it could not be
// a victim ("" when it could).
type PreemptionCandidate struct {
	JobID                   string  `json:"job_id"`
	Queue                   string  `json:"queue"`
	LowRisk                 bool    `json:"low_risk"`
	GPUs                    int     `json:"gpus"`
	EstimatedLossGPUSeconds float64 `json:"estimated_loss_gpu_s"`
	Chosen                  bool    `json:"chosen"`
	Gate                    string  `json:"gate,omitempty"`
}

// candidateDocs converts a proposal's candidates to their stored shape
// (preemptions.candidates); never nil.
func candidateDocs(cs []scheduling.Candidate) []PreemptionCandidate {
	out := make([]PreemptionCandidate, len(cs))
	for i, c := range cs {
		out[i] = PreemptionCandidate{JobID: c.JobID, Queue: c.Queue, LowRisk: c.LowRisk, GPUs: c.GPUs,
			EstimatedLossGPUSeconds: c.EstimatedLossGPUSeconds, Chosen: c.Chosen, Gate: c.Gate}
	}
	return out
}

// preemptionColumns is the select list of preemptionRow: the preemptions
// columns, with NULL text columns read as "" (a drill has no cycle and no
// trigger job).
const preemptionColumns = `id, kind, drill_actor, coalesce(cycle_id, '') AS cycle_id, coalesce(workflow_id, '') AS workflow_id,
	coalesce(for_job_id, '') AS for_job_id, for_queue, victim_job_id,
	victim_queue, allocation_id, pool, reason, state, coalesce(outcome, '') AS outcome, detail,
	coalesce(run_id, '') AS run_id, coalesce(gpus, 0) AS gpus, estimated_loss_gpu_s, effective_loss_gpu_s,
	run_started_at, accrued_aging_s, checkpoint_at_notice, saved_checkpoint, checkpoint_in_grace, step_at_notice,
	started_at, notified_at, saved_at, released_at, rescheduled_at, resumed_at, passed_at, ended_at, finished_at,
	coalesce(resumed_run_id, '') AS resumed_run_id, resumed_from_step, resumed_correctly, lost_s, save_restore_s,
	recompute_s, failures, resume_verified, candidates, coalesce(final_state, '') AS final_state, final_at,
	failures_since_resume, output_affected, output_note`

// preemptionRow is one row of preemptionColumns: the record's own columns
// plus the two checkpoint documents in their stored shape. failures (jsonb)
// decodes straight into Failures.
type preemptionRow struct {
	PreemptionRecord
	CheckpointAtNotice *checkpointDoc        `db:"checkpoint_at_notice"`
	SavedCheckpoint    *checkpointDoc        `db:"saved_checkpoint"`
	Candidates         []PreemptionCandidate `db:"candidates"`
}

// record converts the row to a PreemptionRecord with its times in UTC.
func (r *preemptionRow) record() PreemptionRecord {
	p := r.PreemptionRecord
	p.CheckpointAtNotice, p.SavedCheckpoint = r.CheckpointAtNotice.checkpoint(), r.SavedCheckpoint.checkpoint()
	p.Candidates = r.Candidates
	if p.Candidates == nil {
		p.Candidates = []PreemptionCandidate{}
	}
	p.StartedAt = p.StartedAt.UTC()
	for _, t := range []**time.Time{&p.RunStartedAt, &p.NotifiedAt, &p.SavedAt, &p.ReleasedAt, &p.RescheduledAt,
		&p.ResumedAt, &p.PassedAt, &p.EndedAt, &p.FinishedAt, &p.FinalAt} {
		*t = utcPtr(*t)
	}
	return p
}

// GetPreemption returns one preemption record. Errors wrap ErrNotFound or
// database errors.
func (s *Store) GetPreemption(ctx context.Context, id string) (*PreemptionRecord, error) {
	row, err := queryOne[preemptionRow](ctx, s.pool, `SELECT `+preemptionColumns+` FROM preemptions WHERE id = $1`, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: preemption %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get preemption %s: %w", id, err)
	}
	p := row.record()
	return &p, nil
}

// PreemptionFilter selects preemptions for ListPreemptions; empty fields
// match everything. Limit 0 means DefaultListLimit, capped at MaxListLimit.
type PreemptionFilter struct {
	State   vocab.PreemptionState
	Outcome vocab.PreemptionOutcome
	Pool    string
	JobID   string               // trigger or victim
	Kind    vocab.PreemptionKind // preemption or drill
	// Project keeps the preemptions whose trigger or victim job is of this
	// project (a submitter's view); "" keeps all.
	Project string
	Limit   int
}

// ListPreemptions returns the newest preemptions matching f first. Errors
// are wrapped with "list preemptions".
func (s *Store) ListPreemptions(ctx context.Context, f PreemptionFilter) ([]PreemptionRecord, error) {
	limit := pageLimit(f.Limit)
	rows, err := queryAll[preemptionRow](ctx, s.pool, `SELECT `+preemptionColumns+` FROM preemptions
		WHERE ($1 = '' OR state = $1) AND ($2 = '' OR outcome = $2) AND ($3 = '' OR pool = $3)
			AND ($4 = '' OR for_job_id = $4 OR victim_job_id = $4) AND ($6 = '' OR kind = $6)
			AND ($7 = '' OR EXISTS (SELECT 1 FROM jobs pj WHERE pj.id IN (for_job_id, victim_job_id) AND pj.project = $7))
		ORDER BY started_at DESC, id DESC LIMIT $5`, f.State, f.Outcome, f.Pool, f.JobID, limit, f.Kind, f.Project)
	if err != nil {
		return nil, fmt.Errorf("store: list preemptions: %w", err)
	}
	var out []PreemptionRecord
	for i := range rows {
		out = append(out, rows[i].record())
	}
	return out, nil
}

// RecordWouldPreempt stores the proposals of cycleID that the pool's stage
// does not let act (Act false) as "would preempt" records — state observed,
// closed at once so they never count as in progress — with the plan's
// estimated loss, one per (trigger job, victim allocation) however many
// cycles repeat it. The cycle must be applied first (its row is referenced).
// It returns how many records were new. Retries are safe.
func (s *Store) RecordWouldPreempt(ctx context.Context, cycleID string, props []scheduling.PreemptionProposal, now time.Time) (int, error) {
	var ids, forJobs, victims, allocs, reasons, pools, cands []string
	var losses []float64
	for _, p := range props {
		if p.Act {
			continue
		}
		cand := string(mustJSON(candidateDocs(p.Candidates)))
		for _, v := range p.Victims {
			ids = append(ids, newID("p-"))
			forJobs, victims, allocs = append(forJobs, p.ForJobID), append(victims, v.JobID), append(allocs, v.AllocationID)
			reasons, pools, losses = append(reasons, p.Reason), append(pools, p.Pool), append(losses, v.EstimatedLossGPUSeconds)
			cands = append(cands, cand)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO preemptions (id, cycle_id, for_job_id, victim_job_id, allocation_id, estimated_loss_gpu_s, reason,
			pool, for_queue, victim_queue, state, outcome, started_at, ended_at, finished_at, gpus, candidates)
		SELECT u.id, $1, u.f, u.v, u.a, u.l, u.r, u.p, fj.queue, vj.queue, 'observed', 'would_preempt', $2, $2, $2,
			(SELECT coalesce(sum(milli), 0) / 1000.0 FROM allocation_gpus g WHERE g.allocation_id = u.a), u.c::jsonb
		FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::float8[], $8::text[], $9::text[], $10::text[])
			AS u(id, f, v, a, l, r, p, c)
		JOIN allocations al ON al.id = u.a AND al.job_id = u.v
		JOIN jobs fj ON fj.id = u.f JOIN jobs vj ON vj.id = u.v
		ON CONFLICT (for_job_id, allocation_id) WHERE state = 'observed' DO NOTHING`,
		cycleID, now, ids, forJobs, victims, allocs, losses, reasons, pools, cands)
	if err != nil {
		return 0, fmt.Errorf("store: record would-preempt of cycle %s: %w", cycleID, err)
	}
	return int(tag.RowsAffected()), nil
}

// PreemptionRunIDs returns the run of each of the given allocations that
// has one (a placed allocation whose run has not started has none).
func (s *Store) PreemptionRunIDs(ctx context.Context, allocationIDs []string) (map[string]string, error) {
	out := map[string]string{}
	err := forEachRow(ctx, s.pool, `SELECT id, run_id FROM allocations WHERE id = ANY($1) AND run_id IS NOT NULL`,
		[]any{allocationIDs}, func(rows pgx.Rows) error {
			var a, r string
			err := rows.Scan(&a, &r)
			out[a] = r
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: runs of preempted allocations: %w", err)
	}
	return out, nil
}

// PreemptionVictim is the victim of a preemption as stored now: what the
// workflow's first step re-checks before touching it.
type PreemptionVictim struct {
	JobID            string         `db:"job_id"`
	State            vocab.JobState `db:"state"`
	Queue            string         `db:"queue"`
	Tier             string         `db:"tier"`      // the job's tier name
	Pool             string         `db:"pool"`      // the preempted allocation's pool
	Protected        bool           `db:"protected"` // the job is protected
	QueueProtected   bool           `db:"queue_protected"`
	Checkpointable   bool           `db:"checkpointable"`
	ResumeDowngraded bool           `db:"resume_downgraded"` // a resume from the wrong step was seen and no verified resume since
	AllocationLive   bool           `db:"allocation_live"`   // the preempted allocation is still held
	RunID            string         `db:"run_id"`
	RunEnded         bool           `db:"run_ended"`
}

// GetPreemptionVictim reads the victim of preemption id. Errors wrap
// ErrNotFound or database errors.
func (s *Store) GetPreemptionVictim(ctx context.Context, id string) (*PreemptionVictim, error) {
	v, err := queryOne[PreemptionVictim](ctx, s.pool, `
		SELECT j.id AS job_id, j.state, j.queue, j.tier, a.pool, j.protected,
			coalesce(q.protected, false) AS queue_protected,
			coalesce((j.recovery->>'checkpointable')::boolean, false) AS checkpointable,
			j.recovery ? 'resume_downgraded' AS resume_downgraded, a.released_at IS NULL AS allocation_live,
			coalesce(a.run_id, '') AS run_id, coalesce(r.ended_at IS NOT NULL, false) AS run_ended
		FROM preemptions p JOIN jobs j ON j.id = p.victim_job_id JOIN allocations a ON a.id = p.allocation_id
		LEFT JOIN queues q ON q.name = j.queue LEFT JOIN runs r ON r.id = a.run_id
		WHERE p.id = $1`, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: preemption %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: preemption victim of %s: %w", id, err)
	}
	return &v, nil
}

// NoticePreemption records the notice of preemption id, sent by workflow
// workflowID at at: the victim's run and its start, the GPUs held, the
// victim's aging credit and its last valid checkpoint at that moment, and
// the queues of both jobs (a drill has no trigger job: its for_queue stays
// ""); in the same transaction, the victim submitter's
// job.preemption_notice notification (docs/design.md §3 step 7; its data
// names the record's kind, preemption or drill). The first
// call's values are kept, so retries are safe and return the same record
// (and write no second notification). Errors wrap ErrNotFound or database errors.
func (s *Store) NoticePreemption(ctx context.Context, id, workflowID string, at time.Time) (*PreemptionRecord, error) {
	err := s.inTx(ctx, "notice preemption "+id, func(tx pgx.Tx) error {
		var victim, forJob, reason, kind string
		err := tx.QueryRow(ctx, `
			UPDATE preemptions p SET notified_at = $3, workflow_id = $2, run_id = a.run_id, run_started_at = r.started_at,
				gpus = (SELECT coalesce(sum(milli), 0) / 1000.0 FROM allocation_gpus g WHERE g.allocation_id = p.allocation_id),
				accrued_aging_s = vj.accrued_aging_s, checkpoint_at_notice = vj.recovery->'last_checkpoint',
				pool = a.pool, victim_queue = vj.queue, for_queue = coalesce(fj.queue, '')
			FROM allocations a LEFT JOIN runs r ON r.id = a.run_id, jobs vj LEFT JOIN jobs fj ON fj.id = (
				SELECT for_job_id FROM preemptions WHERE id = $1)
			WHERE p.id = $1 AND a.id = p.allocation_id AND vj.id = p.victim_job_id AND p.notified_at IS NULL
			RETURNING p.victim_job_id, coalesce(p.for_job_id, ''), p.reason, p.kind`, id, workflowID, at).Scan(&victim, &forJob, &reason, &kind)
		if errors.Is(err, pgx.ErrNoRows) { // noticed before, or no such preemption (GetPreemption says)
			return nil
		}
		if err != nil {
			return err
		}
		// The victim's submitter learns that its run must checkpoint and stop.
		return insertNotifications(ctx, tx, []noteRow{{jobID: victim, kind: vocab.NotifyPreemptionNotice, data: map[string]any{
			"preemption_id": id, "for_job_id": forJob, "reason": reason, "notified_at": at.UTC(), "kind": kind}}}, at)
	})
	if err != nil {
		return nil, err
	}
	if err := s.auditOnce(ctx, id, "preempt_notice", at, "victim notified to checkpoint and stop"); err != nil {
		return nil, err
	}
	return s.GetPreemption(ctx, id)
}

// ResumeObserved is what the verify-resume step saw of the victim's next run.
type ResumeObserved struct {
	PreemptionID string
	JobID        string // the victim
	RunID        string // its next run
	FromStep     int64  // the step that run started from
	SavedStep    int64  // the saved checkpoint's step it had to start from
	Correct      bool   // FromStep == SavedStep
	At           time.Time
}

// NotifyResumed writes the victim submitter's job.resumed notification of
// preemption r.PreemptionID, once: a retried verify-resume step finds it
// written (the check runs under the project's notification lock). Errors
// are database errors.
func (s *Store) NotifyResumed(ctx context.Context, r ResumeObserved) error {
	return s.inTx(ctx, "notify resume of "+r.PreemptionID, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			SELECT pg_advisory_xact_lock(hashtext('gpugov.notifications'), hashtext(project)) FROM jobs WHERE id = $1`,
			r.JobID); err != nil {
			return err
		}
		var done bool
		if err := tx.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM notifications WHERE job_id = $1 AND kind = $2 AND data->>'preemption_id' = $3)`,
			r.JobID, vocab.NotifyResumed, r.PreemptionID).Scan(&done); err != nil || done {
			return err
		}
		return insertNotifications(ctx, tx, []noteRow{{jobID: r.JobID, kind: vocab.NotifyResumed, data: map[string]any{
			"preemption_id": r.PreemptionID, "run_id": r.RunID, "resumed_from_step": r.FromStep,
			"saved_checkpoint_step": r.SavedStep, "resumed_correctly": r.Correct}}}, r.At)
	})
}

// auditOnce appends an audit entry for preemption id with action (actor
// governance), unless one with that action is already there: a retried
// workflow step records its action once. Its evidence is the preemption's
// record at that step (docs/design.md invariant 6): the workflow step, the
// victim and trigger jobs, the allocation, run, pool and GPUs, the state and
// outcome, the checkpoints, the step reached at the notice, the resume and
// the effective run loss by parts, as far as they are known (nulls left
// out).
func (s *Store) auditOnce(ctx context.Context, id, action string, at time.Time, reason string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO audit_log (at, actor, action, subject, reason, evidence)
		SELECT $1::timestamptz, 'governance', $2::text, $3::text, $4::text,
			jsonb_build_object('workflow_step', $2::text) || coalesce((
				SELECT jsonb_strip_nulls(jsonb_build_object(
					'victim_job_id', p.victim_job_id, 'for_job_id', p.for_job_id, 'allocation_id', p.allocation_id,
					'pool', nullif(p.pool, ''), 'run_id', p.run_id, 'gpus', p.gpus, 'state', p.state, 'outcome', p.outcome,
					'estimated_loss_gpu_s', p.estimated_loss_gpu_s, 'checkpoint_at_notice', p.checkpoint_at_notice,
					'saved_checkpoint', p.saved_checkpoint, 'checkpoint_in_grace', p.checkpoint_in_grace,
					'step_at_notice', p.step_at_notice, 'released_at', p.released_at, 'resumed_run_id', p.resumed_run_id,
					'resumed_from_step', p.resumed_from_step, 'resumed_correctly', p.resumed_correctly, 'lost_s', p.lost_s,
					'save_restore_s', p.save_restore_s, 'recompute_s', p.recompute_s,
					'effective_loss_gpu_s', p.effective_loss_gpu_s,
					'failures', CASE WHEN jsonb_array_length(p.failures) > 0 THEN p.failures END))
				FROM preemptions p WHERE p.id = $3::text), '{}'::jsonb)
		WHERE NOT EXISTS (SELECT 1 FROM audit_log WHERE subject = $3::text AND action = $2::text)`, at, action, id, reason)
	if err != nil {
		return fmt.Errorf("store: audit %s of %s: %w", action, id, err)
	}
	return nil
}

// AbortPreemption ends preemption id without releasing the victim: outcome
// (PreemptionAbortedNoCkpt, PreemptionAbortedIneligible or
// PreemptionVictimEnded), the detail, and the failure added to its list. A
// record already finished is left as it is, so retries are safe.
func (s *Store) AbortPreemption(ctx context.Context, id string, outcome vocab.PreemptionOutcome, detail string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE preemptions SET
			state = CASE WHEN ended_at IS NULL THEN 'aborted' ELSE state END,
			ended_at = coalesce(ended_at, greatest($4, started_at)),
			outcome = $2, detail = $3, finished_at = greatest($4, started_at),
			failures = failures || to_jsonb($3::text)
		WHERE id = $1 AND finished_at IS NULL`, id, outcome, detail, at)
	if err != nil {
		return fmt.Errorf("store: abort preemption %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.GetPreemption(ctx, id); err != nil {
			return err
		}
		return nil
	}
	return s.auditOnce(ctx, id, "preempt_abort", at, string(outcome)+": "+detail)
}

// CheckpointOutcome is what the checkpoint step found.
type CheckpointOutcome struct {
	Record *PreemptionRecord
	// Came is true when the job recorded a checkpoint newer than the notice.
	Came bool
	// RunOutcome is the victim run's outcome when it has already ended
	// ("" while it has not, or when it ended preempted).
	RunOutcome vocab.RunOutcome
}

// RecordPreemptionCheckpoint records, for preemption id, whether the victim
// saved a checkpoint newer than the notice (the job's last valid checkpoint
// is compared with notified_at), that checkpoint as the one the next run must
// resume from, and stepAtNotice (the step the run reached when it stopped;
// nil when it did not report one). The first decision is kept, so a retry
// after the grace period cannot turn "no checkpoint" into "came". Errors
// wrap ErrNotFound or database errors.
func (s *Store) RecordPreemptionCheckpoint(ctx context.Context, id string, stepAtNotice *int64) (*CheckpointOutcome, error) {
	var runOutcome vocab.RunOutcome
	err := s.pool.QueryRow(ctx, `
		WITH cur AS (
			SELECT p.id, j.recovery->'last_checkpoint' AS cp,
				(j.recovery->'last_checkpoint'->>'at')::timestamptz > p.notified_at AS came
			FROM preemptions p JOIN jobs j ON j.id = p.victim_job_id WHERE p.id = $1)
		UPDATE preemptions p SET
			checkpoint_in_grace = coalesce(p.checkpoint_in_grace, coalesce(cur.came, false)),
			saved_checkpoint = coalesce(p.saved_checkpoint, cur.cp),
			saved_at = coalesce(p.saved_at, CASE WHEN cur.came THEN (cur.cp->>'at')::timestamptz END),
			step_at_notice = coalesce(p.step_at_notice, $2)
		FROM cur WHERE p.id = cur.id
		RETURNING coalesce((SELECT r.outcome FROM runs r WHERE r.id = p.run_id AND r.outcome <> 'preempted'), '')`,
		id, stepAtNotice).Scan(&runOutcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: preemption %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: record checkpoint of preemption %s: %w", id, err)
	}
	rec, err := s.GetPreemption(ctx, id)
	if err != nil {
		return nil, err
	}
	return &CheckpointOutcome{Record: rec, Came: rec.CheckpointInGrace != nil && *rec.CheckpointInGrace, RunOutcome: runOutcome}, nil
}

// PreemptionRelease is what the release step did.
type PreemptionRelease struct {
	ReleasedAt time.Time
	GPUs       float64
	// VictimEnded is true when the run had ended by itself (RunOutcome)
	// before it could be released as preempted: nothing was released.
	VictimEnded bool
	RunOutcome  vocab.RunOutcome
}

// ReleasePreempted releases the victim of preemption id: its run ends
// preempted (FinishRun: the allocation is released, the job requeued with its
// aging kept, usage charged) or, when no run started, the placement is
// released as requeued; released_at is recorded. Retries are safe: a
// release already done returns the stored time. Errors wrap ErrNotFound or
// database errors.
func (s *Store) ReleasePreempted(ctx context.Context, id, detail string, at time.Time) (*PreemptionRelease, error) {
	rec, err := s.GetPreemption(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &PreemptionRelease{GPUs: rec.GPUs}
	if rec.ReleasedAt != nil {
		out.ReleasedAt = *rec.ReleasedAt
		return out, nil
	}
	if rec.RunID != "" {
		if err := s.FinishRun(ctx, rec.VictimJobID, rec.RunID, vocab.RunPreempted, detail, at); err != nil {
			return nil, err
		}
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(outcome, '') FROM runs WHERE id = $1`, rec.RunID).Scan(&out.RunOutcome); err != nil {
			return nil, fmt.Errorf("store: release preemption %s: %w", id, err)
		}
		if out.RunOutcome != vocab.RunPreempted {
			out.VictimEnded = true
			return out, nil
		}
	} else if err := s.ReleasePlacement(ctx, rec.VictimJobID, rec.AllocationID, vocab.RunRequeued, detail, at); err != nil {
		return nil, err
	}
	if err := s.pool.QueryRow(ctx, `
		UPDATE preemptions SET released_at = coalesce(released_at, $2) WHERE id = $1 RETURNING released_at`,
		id, at).Scan(&out.ReleasedAt); err != nil {
		return nil, fmt.Errorf("store: release preemption %s: %w", id, err)
	}
	out.ReleasedAt = out.ReleasedAt.UTC()
	return out, s.auditOnce(ctx, id, "preempt_release", at, detail)
}

// Requeue is the victim's state after the reschedule step.
type Requeue struct {
	State         vocab.JobState `db:"state"`
	SubmitTime    time.Time      `db:"submit_time"`
	WaitingSince  time.Time      `db:"waiting_since"`
	AccruedAgingS float64        `db:"accrued_aging_s"` // aging credit now, seconds
	// AgingAtNotice is the aging credit recorded at the notice; the requeue
	// keeps at least it.
	AgingAtNotice float64          `db:"-"`
	Reason        vocab.WaitReason `db:"reason"`
}

// RequeueDetail is the wait detail given to a preempted victim.
const RequeueDetail = "requeued after preemption %s for job %s; original submit time and aging credit kept"

// RequeueDrillDetail is the wait detail given to the job of a resume drill.
const RequeueDrillDetail = "requeued by resume drill %s; original submit time and aging credit kept"

// RequeuePreempted completes the reschedule step of preemption id: the
// victim, back to waiting with its original submit time and its accrued
// aging (FinishRun did that), gets the wait reason capacity_busy with a
// detail naming the preemption and an open wait event, unless a scheduling
// cycle already gave it one (or placed it again); rescheduled_at is recorded.
// Retries are safe. Errors wrap ErrNotFound or database errors.
func (s *Store) RequeuePreempted(ctx context.Context, id string, at time.Time) (*Requeue, error) {
	rec, err := s.GetPreemption(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &Requeue{}
	if rec.AccruedAgingS != nil {
		out.AgingAtNotice = *rec.AccruedAgingS
	}
	detail := fmt.Sprintf(RequeueDetail, id, rec.ForJobID)
	if rec.Kind == vocab.PreemptionDrill {
		detail = fmt.Sprintf(RequeueDrillDetail, id)
	}
	err = s.inTx(ctx, "requeue victim of "+id, func(tx pgx.Tx) error {
		if _, _, _, err := lockJob(ctx, tx, rec.VictimJobID); err != nil {
			return err
		}
		expl := mustJSON(Explanation{Reason: vocab.ReasonCapacityBusy, Detail: detail,
			NextAction: vocab.ReasonCapacityBusy.NextAction(), BlockingJobID: rec.ForJobID})
		var blocking any
		if rec.ForJobID != "" {
			blocking = rec.ForJobID
		}
		tag, err := tx.Exec(ctx, `
			UPDATE jobs SET reason = 'capacity_busy', explanation = $2, explanation_digest = NULL, updated_at = $3
			WHERE id = $1 AND state = 'waiting' AND reason IS NULL`, rec.VictimJobID, expl, at)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `
				INSERT INTO wait_events (job_id, reason, detail, next_action, blocking_job_id, started_at)
				SELECT $1, 'capacity_busy', $2, $3, $4, $5
				WHERE NOT EXISTS (SELECT 1 FROM wait_events WHERE job_id = $1 AND ended_at IS NULL)`,
				rec.VictimJobID, detail, vocab.ReasonCapacityBusy.NextAction(), blocking, at); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE preemptions SET rescheduled_at = coalesce(rescheduled_at, $2) WHERE id = $1`, id, at); err != nil {
			return err
		}
		now, err := queryOne[Requeue](ctx, tx, `SELECT state, submit_time, waiting_since, accrued_aging_s,
			coalesce(reason, '') AS reason FROM jobs WHERE id = $1`, rec.VictimJobID)
		now.AgingAtNotice = out.AgingAtNotice
		*out = now
		return err
	})
	if err != nil {
		return nil, err
	}
	out.SubmitTime, out.WaitingSince = out.SubmitTime.UTC(), out.WaitingSince.UTC()
	return out, s.auditOnce(ctx, id, "preempt_requeue", at, detail)
}

// PreemptionResume is what the verify-resume step observed and computed.
type PreemptionResume struct {
	Outcome          vocab.PreemptionOutcome // PreemptionCompleted, PreemptionResumeFailed or PreemptionResumeNotObserved
	ResumedRunID     string
	ResumedFromStep  *int64
	ResumedAt        *time.Time
	PassedAt         *time.Time
	ResumedCorrectly *bool
	LostSeconds      float64
	SaveRestoreS     float64
	RecomputeS       *float64 // nil when not measured
	LossGPUSeconds   float64
	Failures         []string
	Detail           string
	At               time.Time
	// Progressed is true when the next run, started at the saved step
	// (ResumedCorrectly), was seen past it: a heartbeat or checkpoint beyond
	// the saved step, or its success. Only a resume both correct and
	// progressed is a verified resume.
	Progressed bool
	// Interrupted is true when the next run, started at the saved step,
	// was cancelled or preempted before it was seen past it (a user's
	// cancel, a reclaim, another preemption): the resume was not observed
	// to the end, so it is neither verified nor failed, and gives no
	// evidence either way.
	Interrupted bool
	// EvidenceKind is the kind of the resume evidence FinishPreemption
	// records for the victim's recovery profile (key: the preemption ID);
	// "" means the record's: vocab.EvidenceDrill for a drill, else
	// vocab.EvidencePreemption.
	EvidenceKind vocab.ResumeEvidenceKind
}

// evidence is the resume evidence r is for the victim's recovery profile,
// or nil when no next run was seen (no evidence either way: the victim may
// simply not have been placed again in time) or the next run was
// interrupted before it progressed (Interrupted).
func (r *PreemptionResume) evidence(rec *PreemptionRecord) *ResumeEvidence {
	if r.ResumedCorrectly == nil || (r.Interrupted && *r.ResumedCorrectly && !r.Progressed) {
		return nil
	}
	kind := r.EvidenceKind
	switch {
	case kind != "":
	case rec.Kind == vocab.PreemptionDrill:
		kind = vocab.EvidenceDrill
	default:
		kind = vocab.EvidencePreemption
	}
	e := &ResumeEvidence{Key: rec.ID, JobID: rec.VictimJobID, Kind: kind, At: r.At, Outcome: vocab.ResumeFailed,
		Detail: r.Detail}
	switch {
	case !*r.ResumedCorrectly:
		e.Outcome = vocab.ResumeWrongStep
	case r.Progressed:
		e.Outcome = vocab.ResumeVerified
	}
	return e
}

// Verified reports whether the resume is a verified one: the next run
// started at the saved step and progressed past it.
func (r *PreemptionResume) Verified() bool {
	return r.ResumedCorrectly != nil && *r.ResumedCorrectly && r.Progressed
}

// FinishPreemption records the verify-resume step of preemption id and the
// effective run loss, and updates the victim's recovery evidence: a
// verified resume (started at the saved step and progressed past it)
// adds one verified resume (runs.resume_verified, once per run) and clears a
// downgrade; a resume from another step is a failure that downgrades it
// (verified_resumes 0 and resume_downgraded set) so that the victim is not
// preempted automatically until a verified resume; one that started right
// but did not progress changes neither. In the same transaction the resume
// is recorded as evidence of the victim's recovery profile (key: the
// preemption ID; kind r.EvidenceKind; none when no next run was seen), and
// when the victim's job has already ended the record's final outcome is
// filled (gpugov_fill_preemption_final). A record already finished is
// returned unchanged, so retries are safe. Errors wrap ErrNotFound or
// database errors.
func (s *Store) FinishPreemption(ctx context.Context, id string, r PreemptionResume) (*PreemptionRecord, error) {
	rec, err := s.GetPreemption(ctx, id)
	if err != nil || rec.FinishedAt != nil {
		return rec, err
	}
	failures := r.Failures
	if failures == nil {
		failures = []string{}
	}
	err = s.inTx(ctx, "finish preemption "+id, func(tx pgx.Tx) error {
		if _, _, _, err := lockJob(ctx, tx, rec.VictimJobID); err != nil {
			return err
		}
		var verified *bool // NULL: not observed (no next run, or one interrupted before progressing)
		if r.ResumedCorrectly != nil && !(r.Interrupted && *r.ResumedCorrectly && !r.Progressed) {
			v := r.Verified()
			verified = &v
		}
		tag, err := tx.Exec(ctx, `
			UPDATE preemptions SET outcome = $2, resumed_run_id = nullif($3, ''), resumed_from_step = $4, resumed_at = $5,
				passed_at = $6, resumed_correctly = $7, lost_s = $8, save_restore_s = $9, recompute_s = $10,
				effective_loss_gpu_s = $11, failures = failures || $12::jsonb, detail = $13, finished_at = $14,
				resume_verified = $15
			WHERE id = $1 AND finished_at IS NULL`,
			id, r.Outcome, r.ResumedRunID, r.ResumedFromStep, r.ResumedAt, r.PassedAt, r.ResumedCorrectly,
			r.LostSeconds, r.SaveRestoreS, r.RecomputeS, r.LossGPUSeconds, mustJSON(failures), r.Detail, r.At, verified)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if err := updateRecoveryAfterResume(ctx, tx, rec, r); err != nil {
			return err
		}
		if e := r.evidence(rec); e != nil {
			if err := recordResumeEvidence(ctx, tx, *e); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `SELECT gpugov_fill_preemption_final($1)`, rec.VictimJobID)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := s.auditOnce(ctx, id, "preempt_finish", r.At, string(r.Outcome)+": "+r.Detail); err != nil {
		return nil, err
	}
	return s.GetPreemption(ctx, id)
}

// updateRecoveryAfterResume applies FinishPreemption's change to the
// victim's recovery evidence.
func updateRecoveryAfterResume(ctx context.Context, tx pgx.Tx, rec *PreemptionRecord, r PreemptionResume) error {
	switch {
	case r.ResumedCorrectly == nil:
		return nil
	case *r.ResumedCorrectly && !r.Progressed:
		return nil // started right but not seen progressing: no verified resume, no downgrade
	case *r.ResumedCorrectly:
		tag, err := tx.Exec(ctx, `UPDATE runs SET resume_verified = true WHERE id = $1 AND job_id = $2 AND NOT resume_verified`,
			r.ResumedRunID, rec.VictimJobID)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE jobs SET recovery = jsonb_set(recovery - 'resume_downgraded', '{verified_resumes}',
				to_jsonb(coalesce((recovery->>'verified_resumes')::int4, 0) + 1)), updated_at = $2
			WHERE id = $1`, rec.VictimJobID, r.At)
		return err
	}
	evidence := map[string]any{"preemption_id": rec.ID, "at": r.At.UTC(), "resumed_run_id": r.ResumedRunID,
		"resumed_from_step": r.ResumedFromStep}
	if rec.SavedCheckpoint != nil {
		evidence["expected_step"] = rec.SavedCheckpoint.Step
	}
	if _, err := tx.Exec(ctx, `
		UPDATE jobs SET recovery = jsonb_set(jsonb_set(recovery, '{verified_resumes}', '0'), '{resume_downgraded}', $2::jsonb),
			updated_at = $3
		WHERE id = $1`, rec.VictimJobID, mustJSON(evidence), r.At); err != nil {
		return err
	}
	return appendAuditTx(ctx, tx, AuditEntry{At: r.At, Actor: "governance", Action: "recovery_downgrade", Subject: rec.VictimJobID,
		Reason:   "resumed from the wrong step after preemption " + rec.ID + ": not preempted automatically until a verified resume",
		Evidence: evidence})
}

// SetPoolStages sets the automation stage of each named pool that exists and
// audits each real change with actor and reason; it returns the pools
// changed, by name. It is the raw setter, for tests and tools that set a
// pool up: it neither judges readiness nor writes stage history. Every
// stage change through the policy goes through ChangePoolStages or
// ActivatePolicyStaged (docs/design.md §4 "Pool readiness"). Unknown pools are skipped (they get the stage when
// configuration is applied again after they appear). Errors are database
// errors.
func (s *Store) SetPoolStages(ctx context.Context, stages map[string]vocab.AutomationStage, actor, reason string) ([]string, error) {
	names := make([]string, 0, len(stages))
	for n := range stages {
		names = append(names, n)
	}
	slices.Sort(names)
	var changed []string
	err := s.inTx(ctx, "set pool stages", func(tx pgx.Tx) error {
		changed = changed[:0]
		for _, n := range names {
			var before string
			err := tx.QueryRow(ctx, `
				WITH old AS (SELECT stage FROM pools WHERE name = $1 FOR UPDATE)
				UPDATE pools p SET stage = $2, updated_at = now() FROM old
				WHERE p.name = $1 AND old.stage <> $2 RETURNING old.stage`, n, string(stages[n])).Scan(&before)
			if errors.Is(err, pgx.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			changed = append(changed, n)
			if err := appendAuditTx(ctx, tx, AuditEntry{At: time.Now(), Actor: actor, Action: "set_pool_stage", Subject: n,
				Reason: reason, Evidence: map[string]any{"from": before, "to": string(stages[n])}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}

// SetLowRiskQueues makes exactly the named queues low-risk (queues.low_risk)
// and audits each queue whose flag changed; it returns those queues. Errors
// are database errors.
func (s *Store) SetLowRiskQueues(ctx context.Context, queues []string, actor, reason string) ([]string, error) {
	var changed []string
	if queues == nil {
		queues = []string{} // nil encodes as SQL NULL, and name = ANY(NULL) is NULL, not false
	}
	err := s.inTx(ctx, "set low-risk queues", func(tx pgx.Tx) error {
		changed = changed[:0]
		return forEachRow(ctx, tx, `
			UPDATE queues SET low_risk = (name = ANY($1)), updated_at = now()
			WHERE low_risk IS DISTINCT FROM (name = ANY($1)) RETURNING name, low_risk`, []any{queues},
			func(rows pgx.Rows) error {
				var name string
				var low bool
				if err := rows.Scan(&name, &low); err != nil {
					return err
				}
				changed = append(changed, name)
				return nil
			})
	})
	if err != nil {
		return nil, err
	}
	for _, q := range changed {
		if err := s.AppendAudit(ctx, AuditEntry{Actor: actor, Action: "set_queue_low_risk", Subject: q, Reason: reason,
			Evidence: map[string]any{"low_risk": slices.Contains(queues, q)}}); err != nil {
			return nil, err
		}
	}
	return changed, nil
}

// RunProgress is what the store knows of one run's progress: where it
// started, its newest checkpoint and how it ended.
type RunProgress struct {
	RunID          string                 `db:"run_id"`
	JobID          string                 `db:"job_id"`
	StartStep      int64                  `db:"start_step"`
	StartedAt      time.Time              `db:"started_at"`
	LastCheckpoint *scheduling.Checkpoint `db:"-"`
	EndedAt        *time.Time             `db:"ended_at"`
	Outcome        vocab.RunOutcome       `db:"outcome"`
}

// runProgressRow is GetRunProgress's row: the progress with the checkpoint
// document in its stored shape.
type runProgressRow struct {
	RunProgress
	LastCheckpoint *checkpointDoc `db:"last_checkpoint"`
}

// GetRunProgress reads run runID. Errors wrap ErrNotFound or database errors.
func (s *Store) GetRunProgress(ctx context.Context, runID string) (*RunProgress, error) {
	row, err := queryOne[runProgressRow](ctx, s.pool, `SELECT id AS run_id, job_id, start_step, started_at, last_checkpoint,
		ended_at, coalesce(outcome, '') AS outcome FROM runs WHERE id = $1`, runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: run progress %s: %w", runID, err)
	}
	rp := &row.RunProgress
	rp.StartedAt, rp.LastCheckpoint, rp.EndedAt = rp.StartedAt.UTC(), row.LastCheckpoint.checkpoint(), utcPtr(rp.EndedAt)
	return rp, nil
}
