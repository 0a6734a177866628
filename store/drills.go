package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/vocab"
)

// A resume drill (docs/design.md §5 "Resume drills") is a preemption of
// kind drill: the whole PreemptionWorkflow on a running checkpointable job
// with no beneficiary, recorded in preemptions with its effective run
// loss, its resume recorded as the recovery profile's evidence (kind
// drill: by FinishPreemption, or RecordDrillEvidence for a drill whose
// victim saved nothing).

// ActorGovernance is the audit actor (and drill actor) of what the
// governance loop does on its own: an automatic drill of a trial pool.
const ActorGovernance = "governance"

// AuditDrill is the audit action of a drill's start (subject: the job;
// evidence: the drill's ID, its allocation and run, and who asked).
const AuditDrill = "drill"

// NewDrill asks for a resume drill of JobID. Actor is who asks (an
// operator's token name, or ActorGovernance) and Reason why, both required;
// Reason is stored as the record's reason. ProtectionWindow names the
// protection window the job's queue is inside now ("" when none: the
// caller reads the policy in force), At is the drill's start.
type NewDrill struct {
	JobID            string
	Actor            string
	Reason           string
	ProtectionWindow string
	At               time.Time
}

// StartedDrill is a drill OpenDrill recorded: its preemption record's ID
// and what the PreemptionWorkflow needs (temporalx.PreemptionWorkflowIDOf
// of the job, RunID and PreemptionID names it).
type StartedDrill struct {
	PreemptionID string
	JobID        string
	AllocationID string
	RunID        string
	Pool         string
}

// drillTarget is what OpenDrill reads of the job under its lock.
type drillTarget struct {
	State          vocab.JobState `db:"state"`
	Queue          string         `db:"queue"`
	Protected      bool           `db:"protected"`
	QueueProtected bool           `db:"queue_protected"`
	Checkpointable bool           `db:"checkpointable"`
	AllocationID   string         `db:"allocation_id"`
	Pool           string         `db:"pool"`
	RunID          string         `db:"run_id"`
	OpenPreemption string         `db:"open_preemption"`
	OpenKind       string         `db:"open_kind"`
}

// OpenDrill records a resume drill of d.JobID — a preemptions row of kind
// drill, in progress, with no trigger job and no cycle, whose reason is
// d.Reason, naming the job's allocation and running run — and audits it (AuditDrill, by d.Actor), in one transaction
// holding the job's row lock. The caller then starts its
// PreemptionWorkflow (workflows.Client.StartDrill), which runs it as any
// preemption. A drill is refused, nothing stored, with an error wrapping
// ErrConflict whose message names why, when the job is not running (a
// placed job whose run has not started included), is protected or in a
// protected queue, is not checkpointable, is already in a preemption or
// drill (its allocation has one open), or its queue is inside protection
// window d.ProtectionWindow. Other errors: a missing job ID, actor or
// reason, a reason over MaxQuotaText bytes (ErrInvalid naming job_id,
// actor or reason), an unknown job (ErrNotFound), database errors; all
// wrapped with "open drill".
func (s *Store) OpenDrill(ctx context.Context, d NewDrill) (*StartedDrill, error) {
	if err := required("job_id", d.JobID, "actor", d.Actor, "reason", d.Reason); err != nil {
		return nil, fmt.Errorf("store: open drill: %w", err)
	}
	if err := textField("reason", d.Reason); err != nil {
		return nil, fmt.Errorf("store: open drill: %w", err)
	}
	if d.At.IsZero() {
		d.At = time.Now()
	}
	var out *StartedDrill
	err := s.inTx(ctx, "open drill of "+d.JobID, func(tx pgx.Tx) error {
		if _, _, _, err := lockJob(ctx, tx, d.JobID); err != nil {
			return err
		}
		t, err := queryOne[drillTarget](ctx, tx, `
			SELECT j.state, j.queue, j.protected, coalesce(q.protected, false) AS queue_protected,
				coalesce((j.recovery->>'checkpointable')::boolean, false) AS checkpointable,
				coalesce(a.id, '') AS allocation_id, coalesce(a.pool, '') AS pool, coalesce(r.id, '') AS run_id,
				coalesce(p.id, '') AS open_preemption, coalesce(p.kind, '') AS open_kind
			FROM jobs j
			LEFT JOIN queues q ON q.name = j.queue
			LEFT JOIN allocations a ON a.job_id = j.id AND a.released_at IS NULL
			LEFT JOIN runs r ON r.id = a.run_id AND r.ended_at IS NULL
			LEFT JOIN preemptions p ON p.allocation_id = a.id AND p.ended_at IS NULL AND p.state <> 'observed'
			WHERE j.id = $1`, d.JobID)
		if err != nil {
			return err
		}
		if why := drillRefusal(t, d.ProtectionWindow); why != "" {
			return fmt.Errorf("%s: %w", why, ErrConflict)
		}
		id := newID("p-")
		if _, err := tx.Exec(ctx, `
			INSERT INTO preemptions (id, kind, drill_actor, victim_job_id, allocation_id, reason, pool, victim_queue,
				started_at, run_id, run_started_at, gpus)
			VALUES ($1, 'drill', $2, $3, $4, $5, $6, $7, $8, $9, (SELECT started_at FROM runs WHERE id = $9),
				(SELECT coalesce(sum(milli), 0) / 1000.0 FROM allocation_gpus g WHERE g.allocation_id = $4))`,
			id, d.Actor, d.JobID, t.AllocationID, d.Reason, t.Pool, t.Queue, d.At, t.RunID); err != nil {
			return err
		}
		out = &StartedDrill{PreemptionID: id, JobID: d.JobID, AllocationID: t.AllocationID, RunID: t.RunID, Pool: t.Pool}
		return appendAuditTx(ctx, tx, AuditEntry{At: d.At, Actor: d.Actor, Action: AuditDrill, Subject: d.JobID,
			Reason: d.Reason, Evidence: map[string]any{"preemption_id": id, "allocation_id": t.AllocationID,
				"run_id": t.RunID, "pool": t.Pool, "queue": t.Queue}})
	})
	if err != nil {
		return nil, fmt.Errorf("store: open drill: %w", err)
	}
	return out, nil
}

// drillRefusal says why job t may not be drilled now, or "".
func drillRefusal(t drillTarget, window string) string {
	switch {
	case t.State != vocab.JobRunning:
		return fmt.Sprintf("job is %s; only a running job can be drilled", t.State)
	case t.AllocationID == "" || t.RunID == "":
		return "job has no run going; only a running job can be drilled"
	case t.OpenPreemption != "" && t.OpenKind == string(vocab.PreemptionDrill):
		return "job is already in drill " + t.OpenPreemption
	case t.OpenPreemption != "":
		return "job is already in preemption " + t.OpenPreemption
	case !t.Checkpointable:
		return "job is not checkpointable (recovery.checkpointable false): a drill needs a job that saves and resumes"
	case t.Protected:
		return "job is protected: it is never preempted, drills included"
	case t.QueueProtected:
		return "job's queue " + t.Queue + " is protected: its jobs are never preempted, drills included"
	case window != "":
		return "job's queue " + t.Queue + " is inside protection window " + window
	}
	return ""
}

// DrillsSince counts, per recovery profile (jobs.recovery.profile; the
// project's "<project>/simulated" when a job has none), the drills started
// at or after since, whatever became of them: what the daily bound on
// automatic drills reads (drills.per_profile_per_day). Errors are database
// errors.
func (s *Store) DrillsSince(ctx context.Context, since time.Time) (map[string]int, error) {
	out := map[string]int{}
	err := forEachRow(ctx, s.pool, `
		SELECT coalesce(j.recovery->>'profile', j.project || '/simulated'), count(*)
		FROM preemptions p JOIN jobs j ON j.id = p.victim_job_id
		WHERE p.kind = 'drill' AND p.started_at >= $1
		GROUP BY 1`, []any{since}, func(rows pgx.Rows) error {
		var profile string
		var n int
		err := rows.Scan(&profile, &n)
		out[profile] = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: drills since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	return out, nil
}

// UnstartedDrills returns the drills opened before olderThan whose
// PreemptionWorkflow never took its first step (no notice, not finished):
// a start that failed after OpenDrill committed. The governance loop starts
// their workflows again (starting is idempotent by workflow ID). Errors
// are database errors.
func (s *Store) UnstartedDrills(ctx context.Context, olderThan time.Time) ([]StartedDrill, error) {
	var out []StartedDrill
	err := forEachRow(ctx, s.pool, `
		SELECT p.id, p.victim_job_id, p.allocation_id, coalesce(a.run_id, ''), p.pool
		FROM preemptions p JOIN allocations a ON a.id = p.allocation_id
		WHERE p.kind = 'drill' AND p.notified_at IS NULL AND p.finished_at IS NULL AND p.started_at < $1
		ORDER BY p.started_at, p.id`, []any{olderThan}, func(rows pgx.Rows) error {
		var d StartedDrill
		err := rows.Scan(&d.PreemptionID, &d.JobID, &d.AllocationID, &d.RunID, &d.Pool)
		out = append(out, d)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: unstarted drills: %w", err)
	}
	return out, nil
}

// DrillResumeOutcome is the resume evidence a drill that ended before its
// verify-resume step gives its recovery profile: one whose victim saved
// nothing within its grace (aborted_no_checkpoint) failed its save, which
// is what a drill tests (failed); any other early end — the job
// ineligible, or ended before the release — proves nothing (ok false). A
// drill that reaches VerifyResume has its evidence recorded by
// FinishPreemption, kind drill (verified, failed or wrong_step, as for any
// preemption).
func DrillResumeOutcome(rec *PreemptionRecord) (vocab.ResumeOutcome, bool) {
	if rec.Outcome == vocab.PreemptionAbortedNoCkpt {
		return vocab.ResumeFailed, true
	}
	return "", false
}

// RecordDrillEvidence records the resume evidence finished drill id gives
// its job's recovery profile when it ended before its verify-resume step
// (DrillResumeOutcome; kind drill, keyed by the drill's ID, so a retried
// step records it once) and returns the outcome recorded ("" when none).
// A record of kind preemption, or one not finished, records nothing.
// Errors wrap ErrNotFound or database errors.
func (s *Store) RecordDrillEvidence(ctx context.Context, id string) (vocab.ResumeOutcome, error) {
	rec, err := s.GetPreemption(ctx, id)
	if err != nil {
		return "", err
	}
	if rec.Kind != vocab.PreemptionDrill || rec.FinishedAt == nil {
		return "", nil
	}
	outcome, ok := DrillResumeOutcome(rec)
	if !ok {
		return "", nil
	}
	err = s.RecordResumeEvidence(ctx, ResumeEvidence{Key: rec.ID, JobID: rec.VictimJobID, Kind: vocab.EvidenceDrill,
		Outcome: outcome, At: *rec.FinishedAt, Detail: "drill " + rec.ID + ": " + string(rec.Outcome) + ": " + rec.Detail})
	if err != nil {
		return "", err
	}
	return outcome, nil
}

// drillCandidateRow is one row of DrillCandidates' query.
type drillCandidateRow struct {
	JobID          string     `db:"job_id"`
	AllocationID   string     `db:"allocation_id"`
	RunID          string     `db:"run_id"`
	Pool           string     `db:"pool"`
	Queue          string     `db:"queue"`
	Profile        string     `db:"profile"`
	Request        requestDoc `db:"request"`
	RunStartedAt   *time.Time `db:"run_started_at"`
	Checkpointable bool       `db:"checkpointable"`
	Protected      bool       `db:"protected"`
	LowRisk        bool       `db:"low_risk"`
	InPreemption   bool       `db:"in_preemption"`
}

// DrillCandidates returns every job holding GPUs in pools, for the
// governance loop's drill choice (governance.ChooseDrills): its
// allocation and running run ("" while placed), queue, recovery profile,
// resource request, whether it is checkpointable, protected (job or
// queue), in a low-risk queue, and whether its allocation has a
// preemption or drill open. Errors are database errors.
func (s *Store) DrillCandidates(ctx context.Context, pools []string) ([]governance.DrillCandidate, error) {
	if len(pools) == 0 {
		return nil, nil
	}
	rows, err := queryAll[drillCandidateRow](ctx, s.pool, `
		SELECT j.id AS job_id, a.id AS allocation_id, coalesce(r.id, '') AS run_id, a.pool, j.queue,
			coalesce(j.recovery->>'profile', j.project || '/simulated') AS profile, j.request, r.started_at AS run_started_at,
			coalesce((j.recovery->>'checkpointable')::boolean, false) AS checkpointable,
			j.protected OR coalesce(q.protected, false) AS protected, coalesce(q.low_risk, false) AS low_risk,
			EXISTS (SELECT 1 FROM preemptions p WHERE p.allocation_id = a.id AND p.ended_at IS NULL AND p.state <> 'observed') AS in_preemption
		FROM allocations a JOIN jobs j ON j.id = a.job_id LEFT JOIN queues q ON q.name = j.queue
			LEFT JOIN runs r ON r.id = a.run_id AND r.ended_at IS NULL
		WHERE a.released_at IS NULL AND a.pool = ANY($1) ORDER BY a.pool, j.id`, pools)
	if err != nil {
		return nil, fmt.Errorf("store: drill candidates: %w", err)
	}
	out := make([]governance.DrillCandidate, len(rows))
	for i, r := range rows {
		out[i] = governance.DrillCandidate{JobID: r.JobID, AllocationID: r.AllocationID, RunID: r.RunID, Pool: r.Pool, Queue: r.Queue,
			Profile: r.Profile, Request: r.Request.request(), Checkpointable: r.Checkpointable, Protected: r.Protected,
			LowRisk: r.LowRisk, InPreemption: r.InPreemption}
		if r.RunStartedAt != nil {
			out[i].RunStartedAt = r.RunStartedAt.UTC()
		}
	}
	return out, nil
}

// FreeGPUs returns the healthy GPUs on schedulable nodes of the available pools among pools, with the
// milli-GPU free on each (1000 minus what active allocations hold), those
// with none free left out. Errors are database errors.
func (s *Store) FreeGPUs(ctx context.Context, pools []string) ([]governance.FreeGPU, error) {
	var out []governance.FreeGPU
	err := forEachRow(ctx, s.pool, `
		SELECT n.pool, g.uuid, g.model, g.memory_mib, 1000 - coalesce(u.used_milli, 0)
		FROM gpus g JOIN nodes n ON n.name = g.node JOIN pools p ON p.name = n.pool AND p.available
			LEFT JOIN gpu_usage u ON u.gpu_uuid = g.uuid
		WHERE n.pool = ANY($1) AND n.schedulable AND g.healthy AND coalesce(u.used_milli, 0) < 1000
		ORDER BY n.pool, g.uuid`, []any{pools}, func(rows pgx.Rows) error {
		var g governance.FreeGPU
		err := rows.Scan(&g.Pool, &g.UUID, &g.Model, &g.MemoryMiB, &g.FreeMilli)
		out = append(out, g)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: free GPUs: %w", err)
	}
	return out, nil
}

// BusyPools returns the pools among pools with a preemption or drill in
// progress (not finished, "would preempt" records aside). Errors are
// database errors.
func (s *Store) BusyPools(ctx context.Context, pools []string) (map[string]bool, error) {
	out := map[string]bool{}
	err := forEachRow(ctx, s.pool, `
		SELECT DISTINCT pool FROM preemptions WHERE finished_at IS NULL AND state <> 'observed' AND pool = ANY($1)`,
		[]any{pools}, func(rows pgx.Rows) error {
			var p string
			err := rows.Scan(&p)
			out[p] = true
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: busy pools: %w", err)
	}
	return out, nil
}

// PoolStages returns the stored automation stage of every pool, by name
// (what the scheduler reads). Errors are database errors.
func (s *Store) PoolStages(ctx context.Context) (map[string]vocab.AutomationStage, error) {
	out := map[string]vocab.AutomationStage{}
	err := forEachRow(ctx, s.pool, `SELECT name, stage FROM pools`, nil, func(rows pgx.Rows) error {
		var name string
		var stage vocab.AutomationStage
		err := rows.Scan(&name, &stage)
		out[name] = stage
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: pool stages: %w", err)
	}
	return out, nil
}
