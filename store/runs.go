package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// MarkRunning starts a run of a placed job on its allocation: it creates the
// run (numbered 1, 2, … per job; startStep is the step it resumes from, 0 for
// a fresh start), links it to the allocation and makes the job running. It is
// idempotent per allocation: a retry returns the run already created. Errors
// wrap ErrNotFound (job or allocation), ErrConflict (allocation of another
// job or already released, job not placed) or database errors.
func (s *Store) MarkRunning(ctx context.Context, jobID, allocationID string, startStep int64, at time.Time) (string, error) {
	var runID string
	err := s.inTx(ctx, "mark running "+jobID, func(tx pgx.Tx) error {
		state, _, _, err := lockJob(ctx, tx, jobID)
		if err != nil {
			return err
		}
		var runJob string
		err = tx.QueryRow(ctx, `SELECT id, job_id FROM runs WHERE allocation_id = $1`, allocationID).Scan(&runID, &runJob)
		switch {
		case err == nil && runJob == jobID:
			return nil
		case err == nil:
			return fmt.Errorf("allocation %s runs job %s: %w", allocationID, runJob, ErrConflict)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if err := checkLiveAllocation(ctx, tx, jobID, allocationID); err != nil {
			return err
		}
		if state != vocab.JobPlaced {
			return fmt.Errorf("job is %s, not placed: %w", state, ErrConflict)
		}
		runID = newID("r-")
		if _, err := tx.Exec(ctx, `
			INSERT INTO runs (id, job_id, run_number, allocation_id, started_at, start_step)
			SELECT $1, $2, coalesce(max(run_number), 0) + 1, $3, $4, $5 FROM runs WHERE job_id = $2`,
			runID, jobID, allocationID, at, startStep); err != nil {
			return fmt.Errorf("insert run: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE allocations SET run_id = $2 WHERE id = $1`, allocationID, runID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE jobs SET state = 'running', updated_at = $2, started_at = coalesce(started_at, $2)
			WHERE id = $1`, jobID, at)
		return err
	})
	if err != nil {
		return "", err
	}
	return runID, nil
}

// checkLiveAllocation verifies that allocationID exists, belongs to jobID and
// is not released.
func checkLiveAllocation(ctx context.Context, tx pgx.Tx, jobID, allocationID string) error {
	var owner string
	var released *time.Time
	err := tx.QueryRow(ctx, `SELECT job_id, released_at FROM allocations WHERE id = $1`, allocationID).Scan(&owner, &released)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("allocation %s: %w", allocationID, ErrNotFound)
	case err != nil:
		return err
	case owner != jobID:
		return fmt.Errorf("allocation %s belongs to job %s: %w", allocationID, owner, ErrConflict)
	case released != nil:
		return fmt.Errorf("allocation %s was released at %s: %w", allocationID, released.UTC().Format(time.RFC3339), ErrConflict)
	}
	return nil
}

// finishedRunRow is the run FinishRun ends, with its job's project.
type finishedRunRow struct {
	JobID        string     `db:"job_id"`
	AllocationID string     `db:"allocation_id"`
	StartedAt    time.Time  `db:"started_at"`
	EndedAt      *time.Time `db:"ended_at"`
	Project      string     `db:"project"`
}

// FinishRun ends a run with outcome (succeeded, failed, cancelled or
// preempted) and detail (exit code, signal, message). In one transaction it
// releases the run's allocation (released_at, allocation_gpus inactive, which
// frees the GPUs' gpu_usage), closes any preemption in progress on it, adds
// the run's decayed GPU-seconds to the project's usage, and moves the job to
// the outcome's state — or, for preempted, back to waiting with
// waiting_since=at and its accrued aging kept (cancelled instead when a cancel
// was requested). A run already ended makes it a no-op, so retries are safe
// and usage is charged once. Errors wrap ErrNotFound (run), ErrConflict (run
// of another job) or database errors.
func (s *Store) FinishRun(ctx context.Context, jobID, runID string, outcome vocab.RunOutcome, detail string, at time.Time) error {
	switch outcome {
	case vocab.RunSucceeded, vocab.RunFailed, vocab.RunCancelled, vocab.RunPreempted:
	default:
		return fmt.Errorf("store: finish run %s: %w", runID,
			invalidf("outcome", "outcome %q is not succeeded, failed, cancelled or preempted", outcome))
	}
	return s.inTx(ctx, "finish run "+runID, func(tx pgx.Tx) error {
		_, _, cancelRequested, err := lockJob(ctx, tx, jobID)
		if err != nil {
			return err
		}
		run, err := queryOne[finishedRunRow](ctx, tx, `
			SELECT r.job_id, r.allocation_id, r.started_at, r.ended_at, j.project
			FROM runs r JOIN jobs j ON j.id = r.job_id WHERE r.id = $1`, runID)
		runJob, allocationID, project, startedAt, endedAt := run.JobID, run.AllocationID, run.Project, run.StartedAt, run.EndedAt
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("run %s: %w", runID, ErrNotFound)
		case err != nil:
			return err
		case runJob != jobID:
			return fmt.Errorf("run %s belongs to job %s: %w", runID, runJob, ErrConflict)
		case endedAt != nil:
			return nil
		}
		milli, err := releaseAllocation(ctx, tx, allocationID, "run ended: "+string(outcome), at)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET ended_at = greatest($2, started_at), outcome = $3, detail = $4 WHERE id = $1`,
			runID, at, outcome, detail); err != nil {
			return fmt.Errorf("end run: %w", err)
		}
		if err := s.chargeUsage(ctx, tx, project, float64(milli)/scheduling.MilliPerGPU, at.Sub(startedAt), at); err != nil {
			return err
		}
		next := outcome
		if outcome == vocab.RunPreempted && !cancelRequested {
			next = vocab.RunRequeued
		} else if outcome == vocab.RunPreempted {
			next = vocab.RunCancelled
		}
		return setJobAfterRelease(ctx, tx, jobID, next, at)
	})
}

// setJobAfterRelease moves a job whose allocation was released to the state
// of outcome: requeued → waiting (waiting_since=at, accrued aging kept, its
// eligible stretch started at at: accounting.AgingClock.Start), except that
// a job with a cancel requested is cancelled instead of requeued. That cancel
// was asked for while the job was placed; its workflow, which would have
// taken it, may never have heard of it (a placement released because the
// workflow did not exist yet to be signalled, a reclaimed placement), and a
// waiting job with a cancel requested is a conflict to every cycle that
// places it, so it would wait for good without a reason.
func setJobAfterRelease(ctx context.Context, tx pgx.Tx, jobID string, outcome vocab.RunOutcome, at time.Time) error {
	var err error
	if outcome == vocab.RunRequeued {
		var cancelRequested bool
		if err := tx.QueryRow(ctx, `SELECT cancel_requested FROM jobs WHERE id = $1`, jobID).Scan(&cancelRequested); err != nil {
			return fmt.Errorf("set job state after release: %w", err)
		}
		if cancelRequested {
			outcome = vocab.RunCancelled
		}
	}
	if outcome == vocab.RunRequeued {
		_, err = tx.Exec(ctx, `
			UPDATE jobs SET state = 'waiting', waiting_since = $2, aging_since = $2, reason = NULL, explanation = NULL, explanation_digest = NULL, updated_at = $2
			WHERE id = $1`, jobID, at)
	} else {
		_, err = tx.Exec(ctx, `UPDATE jobs SET state = $3, reason = NULL, updated_at = $2 WHERE id = $1`, jobID, at, outcome)
	}
	if err != nil {
		return fmt.Errorf("set job state after release: %w", err)
	}
	return nil
}

// releaseAllocation releases an allocation if it is still active and returns
// the milli-GPU it held (0 when it was already released). The GPU rows are
// locked in UUID order first, as ApplyCycle does.
func releaseAllocation(ctx context.Context, tx pgx.Tx, allocationID, why string, at time.Time) (int, error) {
	if _, err := tx.Exec(ctx, `
		SELECT g.uuid FROM gpus g
		WHERE g.uuid IN (SELECT gpu_uuid FROM allocation_gpus WHERE allocation_id = $1 AND active)
		ORDER BY g.uuid FOR UPDATE`, allocationID); err != nil {
		return 0, fmt.Errorf("lock GPUs of %s: %w", allocationID, err)
	}
	var milli int
	if err := tx.QueryRow(ctx, `
		WITH freed AS (
			UPDATE allocation_gpus SET active = false WHERE allocation_id = $1 AND active RETURNING milli)
		SELECT coalesce(sum(milli), 0)::int4 FROM freed`, allocationID).Scan(&milli); err != nil {
		return 0, fmt.Errorf("free GPUs of %s: %w", allocationID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE allocations SET released_at = greatest($2, granted_at) WHERE id = $1 AND released_at IS NULL`,
		allocationID, at); err != nil {
		return 0, fmt.Errorf("release %s: %w", allocationID, err)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE preemptions SET state = 'released', detail = $2, ended_at = greatest($3, started_at)
		WHERE allocation_id = $1 AND ended_at IS NULL`, allocationID, why, at); err != nil {
		return 0, fmt.Errorf("close preemptions of %s: %w", allocationID, err)
	}
	return milli, nil
}

// ReleasePlacement releases the allocation of a placed job whose run never
// started (the executor could not launch it, or it was cancelled while
// placed). outcome is cancelled, failed or requeued (back to waiting, aging
// kept). An allocation already released makes it a no-op, so retries are
// safe. Errors wrap ErrNotFound, ErrConflict (allocation of another job, or
// one that has a run: use FinishRun) or database errors.
func (s *Store) ReleasePlacement(ctx context.Context, jobID, allocationID string, outcome vocab.RunOutcome, detail string, at time.Time) error {
	switch outcome {
	case vocab.RunCancelled, vocab.RunFailed, vocab.RunRequeued:
	default:
		return fmt.Errorf("store: release placement %s: %w", allocationID,
			invalidf("outcome", "outcome %q is not cancelled, failed or requeued", outcome))
	}
	return s.inTx(ctx, "release placement "+allocationID, func(tx pgx.Tx) error {
		if _, _, _, err := lockJob(ctx, tx, jobID); err != nil {
			return err
		}
		var owner string
		var runID *string
		var released *time.Time
		err := tx.QueryRow(ctx, `SELECT job_id, run_id, released_at FROM allocations WHERE id = $1`, allocationID).
			Scan(&owner, &runID, &released)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("allocation %s: %w", allocationID, ErrNotFound)
		case err != nil:
			return err
		case owner != jobID:
			return fmt.Errorf("allocation %s belongs to job %s: %w", allocationID, owner, ErrConflict)
		case released != nil:
			return nil
		case runID != nil:
			return fmt.Errorf("allocation %s has run %s; finish the run instead: %w", allocationID, *runID, ErrConflict)
		}
		if _, err := releaseAllocation(ctx, tx, allocationID, "placement released: "+detail, at); err != nil {
			return err
		}
		return setJobAfterRelease(ctx, tx, jobID, outcome, at)
	})
}

// chargeUsage adds to the project's decayed usage the GPU-seconds of gpus GPUs
// held for d, decayed to at with the store's half-life h (SetUsageHalfLife;
// h ≤ 0 means no decay, so the SQL's decay factor is then 1): the constant load's
// contribution is scheduling.AccrueUsage (the continuous form of Slurm's
// PriorityDecayHalfLife decay, so a long run's early hours count less than its
// last ones). The stored total is decayed to the later of its as_of and at
// (scheduling.DecayUsage's rule, applied in SQL so that concurrent charges
// add up in the row) before the two are added.
func (s *Store) chargeUsage(ctx context.Context, tx pgx.Tx, project string, gpus float64, d time.Duration, at time.Time) error {
	if d <= 0 || gpus <= 0 {
		return nil
	}
	h := s.usageHalfLifeSeconds()
	add := scheduling.AccrueUsage(gpus, d.Seconds(), h)
	_, err := tx.Exec(ctx, `
		INSERT INTO project_usage AS u (project, decayed_gpu_seconds, as_of) VALUES ($1, $2, $3)
		ON CONFLICT (project) DO UPDATE SET
			decayed_gpu_seconds =
				u.decayed_gpu_seconds * CASE WHEN $4::float8 > 0 THEN power(0.5::float8, greatest(0, extract(epoch FROM EXCLUDED.as_of - u.as_of))::float8 / $4::float8) ELSE 1 END
				+ EXCLUDED.decayed_gpu_seconds * CASE WHEN $4::float8 > 0 THEN power(0.5::float8, greatest(0, extract(epoch FROM u.as_of - EXCLUDED.as_of))::float8 / $4::float8) ELSE 1 END,
			as_of = greatest(u.as_of, EXCLUDED.as_of)`, project, add, at, h)
	if err != nil {
		return fmt.Errorf("charge usage of %s: %w", project, err)
	}
	return nil
}

// ErrStaleCheckpoint is returned (wrapped, and matching ErrConflict) by
// RecordCheckpoint for a checkpoint older than the run's current one — a
// late retry of an earlier report: nothing is changed.
var ErrStaleCheckpoint = fmt.Errorf("stale checkpoint: %w", ErrConflict)

// CheckpointClockSkew is how far a checkpoint's time may be before its
// run's start (by the store's record of it) before RecordCheckpoint refuses
// it: the checkpoint's time is the reporter's clock (a node agent's), the
// run's start the service's. The API allows the same skew into the future.
const CheckpointClockSkew = 60 * time.Second

// checkpointRunRow is what RecordCheckpoint checks a checkpoint against: its
// run, the run's allocation, and the job's declared work.
type checkpointRunRow struct {
	JobID          string         `db:"job_id"`
	StartedAt      time.Time      `db:"started_at"`
	StartStep      int64          `db:"start_step"`
	LastCheckpoint *checkpointDoc `db:"last_checkpoint"`
	AllocationID   string         `db:"allocation_id"`
	ReleasedAt     *time.Time     `db:"released_at"`
	// TotalSteps is the job's declared work in steps: recovery.total_steps,
	// else a job without a command's run_seconds rounded up, else 0 (none).
	TotalSteps int64 `db:"total_steps"`
}

// RecordCheckpoint records a checkpoint of a run as the run's last
// checkpoint and, when it is not below the job's, as the job's recovery
// evidence. It is checked against the stored record, not believed
// (docs/design.md §5 "Checked evidence"): it is refused with a
// *ValidationError naming the field when its time is more than
// CheckpointClockSkew before the run started (at), when its step is below
// the step the run started from or exceeds the job's declared work
// (recovery.total_steps; a job without a command declares run_seconds, one
// step per second; a job that declares neither is checked for going
// backwards only) (step), or when it goes backwards against the run's
// current checkpoint — a lower step at a later time (step), a higher step
// at an earlier time (at); it is refused with ErrConflict when the run's
// allocation was released (the run ended: its report is no evidence of a
// live run), and answered ErrStaleCheckpoint (matching ErrConflict) when it
// is older than the current one (a lower step, or the same step saved
// earlier). The same checkpoint again changes nothing and succeeds, so
// retries are safe; a refused one changes nothing. The time in the future
// is the API's check (the store's writers are the service's own executors).
// Errors wrap ErrNotFound (job, or run of that job) or database errors too.
func (s *Store) RecordCheckpoint(ctx context.Context, jobID, runID string, cp scheduling.Checkpoint) error {
	doc := mustJSON(toCheckpointDoc(&cp))
	return s.inTx(ctx, "record checkpoint of "+runID, func(tx pgx.Tx) error {
		if _, _, _, err := lockJob(ctx, tx, jobID); err != nil {
			return err
		}
		run, err := queryOne[checkpointRunRow](ctx, tx, `
			SELECT r.job_id, r.started_at, r.start_step, r.last_checkpoint, r.allocation_id, a.released_at,
				coalesce(nullif((j.recovery->>'total_steps')::int8, 0),
					CASE WHEN NOT (j.spec ? 'command') THEN least(greatest(ceil(coalesce((j.spec->>'run_seconds')::float8, 0)), 0), `+maxRunSecondsSQL+`)::int8 END,
					0) AS total_steps
			FROM runs r JOIN allocations a ON a.id = r.allocation_id JOIN jobs j ON j.id = r.job_id
			WHERE r.id = $1 AND r.job_id = $2`, runID, jobID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("run %s of job %s: %w", runID, jobID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := checkCheckpoint(&run, runID, cp); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET last_checkpoint = $2 WHERE id = $1 AND last_checkpoint IS DISTINCT FROM $2::jsonb`,
			runID, doc); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE jobs SET recovery = jsonb_set(recovery, '{last_checkpoint}', $2::jsonb), updated_at = now()
			WHERE id = $1 AND (recovery->'last_checkpoint' IS NULL OR (recovery->'last_checkpoint'->>'step')::int8 <= $3)
				AND recovery->'last_checkpoint' IS DISTINCT FROM $2::jsonb`,
			jobID, doc, cp.Step)
		return err
	})
}

// RunCheckpoint returns the last checkpoint stored for run runID of job jobID
// (runs.last_checkpoint; nil when the run has none). The simulated executor
// reads it when an attempt resumes after a crash: the lost attempt may have
// saved a checkpoint after its last heartbeat reached Temporal, and resuming
// behind it would make the next checkpoint go backwards (docs/design.md §7
// "Crash points"). It returns an error wrapping ErrNotFound when no such run
// exists.
func (s *Store) RunCheckpoint(ctx context.Context, jobID, runID string) (*scheduling.Checkpoint, error) {
	var doc *checkpointDoc
	err := s.pool.QueryRow(ctx, `SELECT last_checkpoint FROM runs WHERE id = $1 AND job_id = $2`, runID, jobID).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("run %s of job %s: %w", runID, jobID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: run checkpoint of %s: %w", runID, err)
	}
	return doc.checkpoint(), nil
}

// checkCheckpoint applies RecordCheckpoint's checks of cp against its run;
// nil when cp may be recorded (or is the run's current checkpoint again).
func checkCheckpoint(run *checkpointRunRow, runID string, cp scheduling.Checkpoint) error {
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	cur := run.LastCheckpoint.checkpoint()
	switch {
	case run.ReleasedAt != nil:
		return fmt.Errorf("run %s ended: its allocation %s was released at %s, so its checkpoint is no evidence: %w",
			runID, run.AllocationID, at(*run.ReleasedAt), ErrConflict)
	case cur != nil && cur.Step == cp.Step && cur.At.Equal(cp.At) && cur.Location == cp.Location:
		return nil // the same report again
	case cp.At.Before(run.StartedAt.Add(-CheckpointClockSkew)):
		return invalidf("at", "%s is before run %s started at %s (%s of clock skew allowed)", at(cp.At), runID,
			at(run.StartedAt), CheckpointClockSkew)
	case cp.Step < run.StartStep:
		return invalidf("step", "%d is below step %d, where run %s started: a checkpoint never goes backwards",
			cp.Step, run.StartStep, runID)
	case run.TotalSteps > 0 && cp.Step > run.TotalSteps:
		return invalidf("step", "%d exceeds the job's declared work of %d steps (recovery.total_steps, or run_seconds of a job without a command)",
			cp.Step, run.TotalSteps)
	case cur == nil:
		return nil
	case cp.Step < cur.Step && !cp.At.After(cur.At), cp.Step == cur.Step && cp.At.Before(cur.At):
		return fmt.Errorf("checkpoint at step %d (%s) is older than run %s's current checkpoint at step %d (%s); nothing changed: %w",
			cp.Step, at(cp.At), runID, cur.Step, at(cur.At), ErrStaleCheckpoint)
	case cp.Step < cur.Step:
		return invalidf("step", "%d goes backwards: run %s's current checkpoint is at step %d (%s), earlier than this one (%s)",
			cp.Step, runID, cur.Step, at(cur.At), at(cp.At))
	case cp.Step > cur.Step && cp.At.Before(cur.At):
		return invalidf("at", "%s is before run %s's current checkpoint (%s, step %d), yet this one is at the later step %d",
			at(cp.At), runID, at(cur.At), cur.Step, cp.Step)
	}
	return nil
}
