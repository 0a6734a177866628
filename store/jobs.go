package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// NewJob is a submission. Request.Pool names the pool; Tier normally comes from
// the queue. RunSeconds is the simulated executor's run duration in seconds.
// IdempotencyKey, when not empty, makes a repeated submission of the same
// project return the first job. SubmitTime zero means now. Recovery.Profile
// is the job's recovery profile as ProfileOf gives it; empty means the
// default profile of its project and command.
type NewJob struct {
	Project        string
	Queue          string
	Tier           vocab.Tier
	Request        scheduling.ResourceRequest
	Prerequisites  []scheduling.Prerequisite
	Recovery       scheduling.RecoveryEvidence
	Protected      bool
	Held           bool
	Command        []string
	Env            map[string]string
	RunSeconds     float64
	IdempotencyKey string
	// Submitter is the actor the job's "submit" audit entry names: the API
	// token's name, as every later action on the job is; "" means the
	// project (bulk imports and replays).
	Submitter  string
	SubmitTime time.Time
}

// Job is a stored job.
type Job struct {
	ID            string
	Project       string
	Queue         string
	Tier          vocab.Tier
	Request       scheduling.ResourceRequest
	State         vocab.JobState
	SubmitTime    time.Time
	WaitingSince  time.Time // start of the current (or last) wait
	AccruedAgingS float64   // wait seconds carried over from earlier waits, in seconds
	Held          bool
	Prerequisites []scheduling.Prerequisite
	Recovery      scheduling.RecoveryEvidence
	Protected     bool
	// CancelRequested is set by CancelJob on a placed or running job; the job
	// workflow stops the run and releases the allocation.
	CancelRequested bool
	IdempotencyKey  string
	Command         []string
	Env             map[string]string
	RunSeconds      float64
	// Reason is the current wait reason; empty when the job is not waiting or
	// has not been through a scheduling cycle yet.
	Reason vocab.WaitReason
	// Explanation is the last scheduling cycle's account of the job (wait or
	// placement); nil before the first cycle.
	Explanation *Explanation
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// StartedAt is when the job's first run started; nil while it never ran.
	StartedAt *time.Time
	// EndedAt is when the job reached a final state; nil until then.
	EndedAt *time.Time
}

// WorkflowAttributes returns what the job's JobWorkflow is started with
// besides its ID (workflows.Client.StartJob and SignalWithStartJob): its
// queue, tier, pool and state as the search attributes' values, and whether
// it has a command (a node agent runs it). Every start of a job's workflow —
// a submission's, the reconciler's, a placement's signal-with-start
// (docs/design.md §3 step 2 "Wait") — takes them from here.
func (j *Job) WorkflowAttributes() temporalx.JobAttributes {
	return temporalx.JobAttributes{Queue: j.Queue, Tier: j.Tier.String(), Pool: j.Request.Pool, State: string(j.State),
		Process: len(j.Command) > 0}
}

// Explanation is what the last scheduling cycle said about a job: its rank,
// effective priority by parts and, while it waits, the reason with its
// quantities, what would change it and the job blocking it. Stored as
// jobs.explanation.
type Explanation struct {
	Reason        vocab.WaitReason `json:"reason,omitempty"`
	Detail        string           `json:"detail,omitempty"`
	NextAction    string           `json:"next_action,omitempty"`
	ReEvaluate    string           `json:"reevaluate,omitempty"`
	BlockingJobID string           `json:"blocking_job_id,omitempty"`
	// Rank is the job's rank among the cycle's pending jobs of its pool.
	Rank     int           `json:"rank"`
	Priority PriorityParts `json:"priority"`
	// Placed is set when the cycle placed the job: pool, node and GPU shares.
	Placed *PlacedOn `json:"placed,omitempty"`
	// Suggestions are the nearest requests that would fit
	// (no_matching_capacity, fragmented; scheduling.Suggestion).
	Suggestions []SuggestionJ `json:"suggestions,omitempty"`
	// Releases are the running jobs whose expected end would free what the
	// job needs (capacity_busy, quota_exhausted; scheduling.ExpectedRelease).
	Releases []ReleaseJ `json:"releases,omitempty"`
	// CycleID and EvaluatedAt name the scheduling cycle that wrote this
	// explanation and its instant; empty in explanations stored before
	// they were recorded.
	CycleID     string     `json:"cycle_id,omitempty"`
	EvaluatedAt *time.Time `json:"evaluated_at,omitempty"`
	// NextEvaluation is when a cycle is next expected to evaluate the
	// waiting job with a chance of a different outcome
	// (scheduling.NextEvaluation); nil when unknown.
	NextEvaluation *NextEvaluation `json:"next_evaluation,omitempty"`
	// Overtake is aging's comparison with the job ahead in the pool
	// (scheduling.Overtake); nil when none applies.
	Overtake *OvertakeParts `json:"overtake,omitempty"`
}

// NextEvaluation is scheduling.NextEvaluation with JSON names.
type NextEvaluation struct {
	At       time.Time          `json:"at"`
	Kind     vocab.NextEvalKind `json:"kind"`
	Estimate bool               `json:"estimate,omitempty"`
}

// OvertakeParts is scheduling.Overtake with JSON names; points are priority
// points, At is nil when Never.
type OvertakeParts struct {
	AheadJobID          string     `json:"ahead_job_id"`
	GapPoints           float64    `json:"gap_points"`
	HeadroomPoints      float64    `json:"headroom_points"`
	AheadHeadroomPoints float64    `json:"ahead_headroom_points"`
	BoundPoints         float64    `json:"bound_points"`
	At                  *time.Time `json:"at,omitempty"`
	Never               bool       `json:"never,omitempty"`
}

// SuggestionJ is scheduling.Suggestion with stable JSON names.
type SuggestionJ struct {
	Field        string `json:"field"`
	Value        string `json:"value"`
	Now          bool   `json:"now"`
	MatchingGPUs int    `json:"matching_gpus"`
	FreeGPUs     int    `json:"free_gpus"`
	Nodes        int    `json:"nodes"`
	Text         string `json:"text"`
}

// ReleaseJ is scheduling.ExpectedRelease with stable JSON names: the job,
// the milli-GPU its end frees for the waiting job and its expected end (an
// estimate from its declared run time).
type ReleaseJ struct {
	JobID       string    `json:"job_id"`
	Milli       int64     `json:"milli"`
	ExpectedEnd time.Time `json:"expected_end"`
}

// suggestionsJ converts suggestions; none gives nil.
func suggestionsJ(ss []scheduling.Suggestion) []SuggestionJ {
	if len(ss) == 0 {
		return nil
	}
	out := make([]SuggestionJ, len(ss))
	for i, s := range ss {
		out[i] = SuggestionJ(s)
	}
	return out
}

// releasesJ converts expected releases (times in UTC); none gives nil.
func releasesJ(rs []scheduling.ExpectedRelease) []ReleaseJ {
	if len(rs) == 0 {
		return nil
	}
	out := make([]ReleaseJ, len(rs))
	for i, r := range rs {
		out[i] = ReleaseJ{JobID: r.JobID, Milli: r.Milli, ExpectedEnd: r.ExpectedEnd.UTC()}
	}
	return out
}

// PriorityParts is scheduling.Priority with stable JSON names: score =
// tier_base + aging_credit + fair_share (points).
type PriorityParts struct {
	Score       float64   `json:"score"`
	TierBase    float64   `json:"tier_base"`
	AgingCredit float64   `json:"aging_credit"`
	AgingCapped bool      `json:"aging_capped"`
	FairShare   float64   `json:"fair_share"`
	FairFactor  float64   `json:"fair_factor"`
	SubmitTime  time.Time `json:"submit_time"`
	// MinShareBoost is scheduling.Priority.MinShareBoost: why the job was
	// served ahead of its score (its queue below its min_share); "" otherwise.
	MinShareBoost string `json:"min_share_boost,omitempty"`
}

// PlacedOn names where a placement put a job.
type PlacedOn struct {
	Pool     string      `json:"pool"`
	Node     string      `json:"node"`
	GPUs     []GPUShareJ `json:"gpus"`
	Borrowed bool        `json:"borrowed,omitempty"`
}

// GPUShareJ is scheduling.GPUShare with JSON names: a GPU UUID and milli-GPU.
type GPUShareJ struct {
	UUID  string `json:"uuid"`
	Milli int    `json:"milli"`
}

func priorityParts(p scheduling.Priority) PriorityParts {
	return PriorityParts{
		Score: p.Score, TierBase: p.TierBase, AgingCredit: p.AgingCredit, AgingCapped: p.AgingCapped,
		FairShare: p.FairShare, FairFactor: p.FairFactor, SubmitTime: p.SubmitTime.UTC(), MinShareBoost: p.MinShareBoost,
	}
}

func gpuSharesJ(gs []scheduling.GPUShare) []GPUShareJ {
	out := make([]GPUShareJ, len(gs))
	for i, g := range gs {
		out[i] = GPUShareJ(g)
	}
	return out
}

// WaitEvent is one interval during which a job waited for one reason. EndedAt
// is nil while it is the job's current wait.
type WaitEvent struct {
	ID            int64            `db:"id"`
	JobID         string           `db:"job_id"`
	Reason        vocab.WaitReason `db:"reason"`
	Detail        string           `db:"detail"`
	NextAction    string           `db:"next_action"`
	ReEvaluate    string           `db:"reevaluate"`
	BlockingJobID string           `db:"blocking_job_id"`
	StartedAt     time.Time        `db:"started_at"`
	EndedAt       *time.Time       `db:"ended_at"`
}

// jobColumns is the select list of jobRow.
const jobColumns = `id, project, queue, tier, request, state, submit_time, waiting_since, accrued_aging_s,
	held, prerequisites, recovery, protected, cancel_requested, coalesce(idempotency_key, '') AS idempotency_key, spec,
	coalesce(reason, '') AS reason, explanation, created_at, updated_at, started_at, ended_at`

// jobRow is one row of jobColumns, the jsonb columns decoded into their
// stored shapes (codec.go).
type jobRow struct {
	ID              string            `db:"id"`
	Project         string            `db:"project"`
	Queue           string            `db:"queue"`
	Tier            string            `db:"tier"`
	Request         requestDoc        `db:"request"`
	State           vocab.JobState    `db:"state"`
	SubmitTime      time.Time         `db:"submit_time"`
	WaitingSince    time.Time         `db:"waiting_since"`
	AccruedAgingS   float64           `db:"accrued_aging_s"`
	Held            bool              `db:"held"`
	Prerequisites   []prerequisiteDoc `db:"prerequisites"`
	Recovery        recoveryDoc       `db:"recovery"`
	Protected       bool              `db:"protected"`
	CancelRequested bool              `db:"cancel_requested"`
	IdempotencyKey  string            `db:"idempotency_key"`
	Spec            specDoc           `db:"spec"`
	Reason          vocab.WaitReason  `db:"reason"`
	Explanation     *Explanation      `db:"explanation"`
	CreatedAt       time.Time         `db:"created_at"`
	UpdatedAt       time.Time         `db:"updated_at"`
	StartedAt       *time.Time        `db:"started_at"`
	EndedAt         *time.Time        `db:"ended_at"`
}

// job converts the row to a Job with its times in UTC; an unknown tier is an error.
func (r *jobRow) job() (*Job, error) {
	tier, err := vocab.ParseTier(r.Tier)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", r.ID, err)
	}
	return &Job{ID: r.ID, Project: r.Project, Queue: r.Queue, Tier: tier, Request: r.Request.request(), State: r.State,
		SubmitTime: r.SubmitTime.UTC(), WaitingSince: r.WaitingSince.UTC(), AccruedAgingS: r.AccruedAgingS,
		Held: r.Held, Prerequisites: prerequisites(r.Prerequisites), Recovery: r.Recovery.recovery(),
		Protected: r.Protected, CancelRequested: r.CancelRequested, IdempotencyKey: r.IdempotencyKey,
		Command: r.Spec.Command, Env: r.Spec.Env, RunSeconds: r.Spec.RunSeconds, Reason: r.Reason,
		Explanation: r.Explanation, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		StartedAt: r.StartedAt, EndedAt: r.EndedAt}, nil
}

// queryJob reads the one job that `SELECT jobColumns FROM jobs` + where
// selects; pgx.ErrNoRows (wrapped) when none.
func queryJob(ctx context.Context, q querier, where string, args ...any) (*Job, error) {
	r, err := queryOne[jobRow](ctx, q, `SELECT `+jobColumns+` FROM jobs `+where, args...)
	if err != nil {
		return nil, err
	}
	return r.job()
}

// recoveryDoc is the submission's stored recovery evidence: Recovery with
// its profile, ProfileOf(project, "", command) when Recovery.Profile is empty.
func (nj *NewJob) recoveryDoc() recoveryDoc {
	d := toRecoveryDoc(nj.Recovery)
	if d.Profile == "" {
		d.Profile = ProfileOf(nj.Project, "", nj.Command)
	}
	return d
}

// checkNewJob refuses a submission without project or queue or with an
// unknown tier, with a *ValidationError whose field is prefix + the field.
func checkNewJob(nj *NewJob, prefix string) error {
	if err := required(prefix+"project", nj.Project, prefix+"queue", nj.Queue); err != nil {
		return err
	}
	if _, err := vocab.ParseTier(nj.Tier.String()); err != nil {
		return invalidf(prefix+"tier", "%v", err)
	}
	return nil
}

// CreateJob stores a submission in state submitted and audits it (actor the
// project, action "submit") in the same transaction. With an IdempotencyKey, a
// second submission with the same (project, key) — a client or workflow retry —
// stores nothing and returns the first job with created=false; this holds under
// concurrent submissions too (unique index jobs_idempotency_idx). Errors: an
// empty project or queue or an unknown tier (matching ErrInvalid), or
// database errors, wrapped with "create job".
func (s *Store) CreateJob(ctx context.Context, nj *NewJob) (*Job, bool, error) {
	if err := checkNewJob(nj, ""); err != nil {
		return nil, false, fmt.Errorf("store: create job: %w", err)
	}
	submit := nj.SubmitTime
	if submit.IsZero() {
		submit = time.Now()
	}
	var key *string
	if nj.IdempotencyKey != "" {
		key = &nj.IdempotencyKey
	}
	var job *Job
	var created bool
	err := s.inTx(ctx, "create job", func(tx pgx.Tx) error {
		id := newID("j-")
		tag, err := tx.Exec(ctx, `
			INSERT INTO jobs (id, project, queue, tier, request, state, submit_time, waiting_since, aging_since, held,
				prerequisites, recovery, protected, idempotency_key, spec)
			VALUES ($1, $2, $3, $4, $5, 'submitted', $6, $6, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (project, idempotency_key) DO NOTHING`,
			id, nj.Project, nj.Queue, nj.Tier.String(), mustJSON(toRequestDoc(nj.Request)), submit, nj.Held,
			mustJSON(toPrerequisiteDocs(nj.Prerequisites)), mustJSON(nj.recoveryDoc()), nj.Protected, key,
			mustJSON(specDoc{Command: nj.Command, Env: nj.Env, RunSeconds: nj.RunSeconds}))
		if err != nil {
			return err
		}
		created = tag.RowsAffected() == 1
		if created {
			err = appendAuditTx(ctx, tx, AuditEntry{At: time.Now(), Actor: cmp.Or(nj.Submitter, nj.Project), Action: "submit", Subject: id,
				Reason: "submitted to queue " + nj.Queue,
				Evidence: map[string]any{"queue": nj.Queue, "tier": nj.Tier.String(), "pool": nj.Request.Pool,
					"gpus": nj.Request.GPUs, "gpu_milli": nj.Request.GPUMilli, "idempotency_key": nj.IdempotencyKey}})
			if err != nil {
				return err
			}
			job, err = queryJob(ctx, tx, `WHERE id = $1`, id)
		} else {
			job, err = queryJob(ctx, tx, `WHERE project = $1 AND idempotency_key = $2`, nj.Project, nj.IdempotencyKey)
		}
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return job, created, nil
}

// GetJob returns the job with the given ID, or an error wrapping ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*Job, error) {
	j, err := queryJob(ctx, s.pool, `WHERE id = $1`, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: get job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get job %s: %w", id, err)
	}
	return j, nil
}

// JobFilter selects jobs for ListJobs; empty fields match everything. Limit
// defaults to DefaultListLimit and is capped at MaxListLimit; AfterID is the
// cursor returned by the previous page.
type JobFilter struct {
	Project string
	Queue   string
	State   vocab.JobState
	Reason  vocab.WaitReason
	// UpdatedSince, when not zero, keeps the jobs last changed (updated_at)
	// at or after it; with State cancelled the jobs_cancelled_updated_idx
	// index serves it (the reconciler's recently cancelled jobs).
	UpdatedSince time.Time
	Limit        int
	AfterID      string
}

// Page sizes of every list (vocab's: docs/design.md "Bounds of outside
// input"): DefaultListLimit rows without a limit, at most MaxListLimit.
const (
	DefaultListLimit = vocab.DefaultListLimit
	MaxListLimit     = vocab.MaxListLimit
)

// pageLimit is a list's page size for the requested limit:
// DefaultListLimit when limit ≤ 0, capped at MaxListLimit.
func pageLimit(limit int) int {
	if limit <= 0 {
		return DefaultListLimit
	}
	return min(limit, MaxListLimit)
}

// conditions collects the WHERE conditions of a filtered list query and
// their arguments, each condition's one %d becoming its $N placeholder.
type conditions struct {
	where []string
	args  []any
}

// add appends cond (with one %d for the placeholder) and its argument v.
func (q *conditions) add(cond string, v any) {
	q.args = append(q.args, v)
	q.where = append(q.where, fmt.Sprintf(cond, len(q.args)))
}

// query is sql with the conditions' WHERE clause (none when empty), then
// order and LIMIT limit as the last argument; it returns the SQL and its
// arguments.
func (q *conditions) query(sql, order string, limit int) (string, []any) {
	if len(q.where) > 0 {
		sql += ` WHERE ` + strings.Join(q.where, " AND ")
	}
	args := append(q.args, limit)
	return sql + fmt.Sprintf(` ORDER BY %s LIMIT $%d`, order, len(args)), args
}

// ListJobs returns one page of jobs matching f in ID order (IDs are ULIDs, so
// this is submission order) and the cursor for the next page, "" after the
// last page. Errors are wrapped with "list jobs".
func (s *Store) ListJobs(ctx context.Context, f JobFilter) ([]Job, string, error) {
	limit := pageLimit(f.Limit)
	var q conditions
	if f.Project != "" {
		q.add("project = $%d", f.Project)
	}
	if f.Queue != "" {
		q.add("queue = $%d", f.Queue)
	}
	if f.State != "" {
		q.add("state = $%d", string(f.State))
	}
	if f.Reason != "" {
		q.add("reason = $%d", string(f.Reason))
	}
	if !f.UpdatedSince.IsZero() {
		q.add("updated_at >= $%d", f.UpdatedSince)
	}
	if f.AfterID != "" {
		q.add("id > $%d", f.AfterID)
	}
	sql, args := q.query(`SELECT `+jobColumns+` FROM jobs`, "id", limit+1)
	rows, err := queryAll[jobRow](ctx, s.pool, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list jobs: %w", err)
	}
	var jobs []Job
	for i := range rows {
		j, err := rows[i].job()
		if err != nil {
			return nil, "", fmt.Errorf("store: list jobs: %w", err)
		}
		jobs = append(jobs, *j)
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = jobs[limit-1].ID
	}
	return jobs, next, nil
}

// JobWaitEvents returns the job's wait events, oldest first; the current one,
// if any, is last with EndedAt nil. A job that never waited gives an empty
// slice; an unknown job gives an error wrapping ErrNotFound.
func (s *Store) JobWaitEvents(ctx context.Context, jobID string) ([]WaitEvent, error) {
	events, err := queryAll[WaitEvent](ctx, s.pool, `
		SELECT id, job_id, reason, detail, next_action, reevaluate, coalesce(blocking_job_id, '') AS blocking_job_id,
			started_at, ended_at
		FROM wait_events WHERE job_id = $1 ORDER BY started_at, id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("store: wait events of %s: %w", jobID, err)
	}
	for i := range events {
		events[i].StartedAt, events[i].EndedAt = events[i].StartedAt.UTC(), utcPtr(events[i].EndedAt)
	}
	if len(events) == 0 {
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)`, jobID).Scan(&exists); err != nil {
			return nil, fmt.Errorf("store: wait events of %s: %w", jobID, err)
		}
		if !exists {
			return nil, fmt.Errorf("store: wait events of %s: %w", jobID, ErrNotFound)
		}
	}
	return events, nil
}

// lockJob locks one job row and returns its state and flags; ErrNotFound when
// it does not exist.
func lockJob(ctx context.Context, tx pgx.Tx, id string) (state vocab.JobState, held, cancelRequested bool, err error) {
	err = tx.QueryRow(ctx, `SELECT state, held, cancel_requested FROM jobs WHERE id = $1 FOR NO KEY UPDATE`, id).
		Scan(&state, &held, &cancelRequested)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return state, held, cancelRequested, err
}

// finishedConflict is the ErrConflict of cancelling, holding or releasing
// (verb: "cancelled", "held", "released") a job in a final state, naming the
// state in the one wording all three share (the API's 409 message, CLI exit 2).
func finishedConflict(state vocab.JobState, verb string) error {
	return fmt.Errorf("job is %s, a final state: it cannot be %s: %w", state, verb, ErrConflict)
}

// SetHold holds (held=true) or releases a job's hold, auditing who and why
// (actions "hold" and "release_hold", evidence state and changed). As Slurm's
// `scontrol hold`/`release` it is idempotent: holding a job that is already
// held (or releasing one that is not) changes nothing and answers changed
// false, but is still audited, with changed false, so the trail shows who
// asked and that nothing changed (docs/design.md §1 "Hold and release").
// A hold that changes a pending job opens its held wait event at once,
// naming who held it (openHeldWait); the next scheduling cycle gives it the
// reason held. Errors
// wrap ErrNotFound, ErrConflict for a finished job or for holding a placed or
// running one, or database errors.
func (s *Store) SetHold(ctx context.Context, jobID string, held bool, actor, reason string) (changed bool, err error) {
	err = s.inTx(ctx, "set hold on "+jobID, func(tx pgx.Tx) error {
		state, cur, _, err := lockJob(ctx, tx, jobID)
		if err != nil {
			return err
		}
		if state.Final() {
			verb := "held"
			if !held {
				verb = "released"
			}
			return finishedConflict(state, verb)
		}
		// A hold keeps a pending job from being placed (Slurm's scontrol
		// hold); a placed or running job has its GPUs already, so a hold
		// would change nothing and is refused. Releasing is always allowed.
		if held && !state.Pending() {
			return fmt.Errorf("job is %s; only a submitted or waiting job can be held: %w", state, ErrConflict)
		}
		changed = cur != held
		now := time.Now()
		if changed {
			if _, err := tx.Exec(ctx, `UPDATE jobs SET held = $2, updated_at = now() WHERE id = $1`, jobID, held); err != nil {
				return err
			}
		}
		if changed && held {
			if err := openHeldWait(ctx, tx, jobID, actor, reason, now); err != nil {
				return err
			}
		}
		action := "hold"
		if !held {
			action = "release_hold"
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: action, Subject: jobID,
			Reason: reason, Evidence: map[string]any{"state": string(state), "changed": changed}})
	})
	return changed && err == nil, err
}

// openHeldWait starts the held wait event of a pending job at at, when it is
// held (SetHold), instead of when a cycle next sees it held: a hold released
// within one cycle would otherwise leave no trace in the job's wait
// history, as Slurm's job record and Kueue's conditions show a hold when it
// is made. The event's detail names who held it and why ("held by alice:
// dataset broken"), and the cycle that then sees the reason held extends it
// without rewriting that detail (ApplyCycle). The open event of another
// reason ends at at (a job never evaluated gets its not_yet_evaluated event
// first, as a cycle would give it); an open held event (held, released
// and held again before a cycle) keeps its start and takes the new detail.
// The released job's held event ends when a cycle gives it another reason
// or places it, as any wait event.
func openHeldWait(ctx context.Context, tx pgx.Tx, jobID, actor, reason string, at time.Time) error {
	detail := "held by " + actor
	if reason != "" {
		detail += ": " + reason
	}
	tag, err := tx.Exec(ctx, `UPDATE wait_events SET detail = $2 WHERE job_id = $1 AND ended_at IS NULL AND reason = $3`,
		jobID, detail, string(vocab.ReasonHeld))
	if err != nil || tag.RowsAffected() > 0 {
		return err
	}
	// The stored explanation no longer describes the job's wait: clear its
	// digest, as every writer that changes a pending job's wait outside a
	// cycle does, so that the next cycle writes the job's explanation and
	// wait event even when it finds the job released and its reason back to
	// the one stored before the hold (its digest unchanged, the cycle would
	// skip the job and leave this held event open for good).
	if _, err := tx.Exec(ctx, `UPDATE jobs SET explanation_digest = NULL WHERE id = $1`, jobID); err != nil {
		return err
	}
	if err := recordNotYetEvaluated(ctx, tx, []string{jobID}, at); err != nil {
		return err
	}
	if err := closeWaitEvents(ctx, tx, []string{jobID}, at); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO wait_events (job_id, reason, detail, next_action, reevaluate, started_at)
		VALUES ($1, $2, $3, $4, $5, $6)`,
		jobID, string(vocab.ReasonHeld), detail, vocab.ReasonHeld.NextAction(), scheduling.HeldReEvaluate, at)
	return err
}

// CancelJob cancels a job. A pending job becomes cancelled at once and its
// open wait event is closed; a placed or running job only gets
// CancelRequested, because its job workflow must stop the run and release the
// allocation (then FinishRun or ReleasePlacement with outcome cancelled). Both
// are audited (actions "cancel" and "cancel_requested"). Cancelling a job that
// is already cancelled or has a cancel requested does nothing, so retries are
// safe. Errors wrap ErrNotFound, ErrConflict for a job that succeeded or
// failed, or database errors.
func (s *Store) CancelJob(ctx context.Context, jobID, actor, reason string) error {
	return s.inTx(ctx, "cancel job "+jobID, func(tx pgx.Tx) error {
		state, _, cancelRequested, err := lockJob(ctx, tx, jobID)
		if err != nil {
			return err
		}
		now := time.Now()
		switch {
		case state == vocab.JobCancelled || (cancelRequested && !state.Final()):
			return nil
		case state.Final():
			return finishedConflict(state, "cancelled")
		case state.Pending():
			if _, err := tx.Exec(ctx, `
				UPDATE jobs SET state = 'cancelled', reason = NULL, updated_at = $2 WHERE id = $1`, jobID, now); err != nil {
				return err
			}
			if err := closeWaitEvents(ctx, tx, []string{jobID}, now); err != nil {
				return err
			}
			return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: "cancel", Subject: jobID,
				Reason: reason, Evidence: map[string]any{"state": string(state)}})
		default: // placed or running
			if _, err := tx.Exec(ctx, `UPDATE jobs SET cancel_requested = true, updated_at = $2 WHERE id = $1`,
				jobID, now); err != nil {
				return err
			}
			return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: "cancel_requested", Subject: jobID,
				Reason: reason, Evidence: map[string]any{"state": string(state)}})
		}
	})
}

// closeWaitEvents ends the open wait event of each job at at.
func closeWaitEvents(ctx context.Context, tx pgx.Tx, jobIDs []string, at time.Time) error {
	_, err := tx.Exec(ctx, `
		UPDATE wait_events SET ended_at = greatest($2, started_at) WHERE job_id = ANY($1) AND ended_at IS NULL`,
		jobIDs, at)
	if err != nil {
		return fmt.Errorf("close wait events: %w", err)
	}
	return nil
}

// CreateJobs stores many submissions in one transaction (trace replay, bulk
// import) with CreateJob's rules: each created job is audited ("submit"), and
// a submission whose (project, idempotency key) already exists — stored
// before or earlier in the same batch — is not stored again. It returns the
// job IDs in input order (the existing ID for such duplicates). Errors: a
// submission without project or queue or with an unknown tier (matching
// ErrInvalid, the field prefixed "[i]."), or database errors,
// wrapped with "create jobs"; on error nothing is stored.
func (s *Store) CreateJobs(ctx context.Context, njs []*NewJob) ([]string, error) {
	cols := newJobColumns(len(njs))
	now := time.Now()
	for i, nj := range njs {
		if err := checkNewJob(nj, fmt.Sprintf("[%d].", i)); err != nil {
			return nil, fmt.Errorf("store: create jobs: submission %d: %w", i, err)
		}
		cols.add(nj, now)
	}
	ids := make([]string, len(njs))
	err := s.inTx(ctx, "create jobs", func(tx pgx.Tx) error {
		for i := range cols.ids {
			cols.ids[i] = newID("j-")
		}
		created := make(map[string]bool, len(njs))
		err := forEachRow(ctx, tx, `
			INSERT INTO jobs (id, project, queue, tier, request, state, submit_time, waiting_since, aging_since, held,
				prerequisites, recovery, protected, idempotency_key, spec)
			SELECT u.id, u.project, u.queue, u.tier, u.request::jsonb, 'submitted', u.submit, u.submit, u.submit, u.held,
				u.prereqs::jsonb, u.recovery::jsonb, u.protected, nullif(u.key, ''), u.spec::jsonb
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::bool[],
				$8::text[], $9::text[], $10::bool[], $11::text[], $12::text[])
				WITH ORDINALITY AS u(id, project, queue, tier, request, submit, held, prereqs, recovery, protected, key, spec, n)
			ORDER BY u.n
			ON CONFLICT (project, idempotency_key) DO NOTHING
			RETURNING id`, cols.args(), func(rows pgx.Rows) error {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			created[id] = true
			return nil
		})
		if err != nil {
			return err
		}
		existing := map[[2]string]string{}
		err = forEachRow(ctx, tx, `
			SELECT j.project, j.idempotency_key, j.id FROM jobs j
			JOIN unnest($1::text[], $2::text[]) AS u(project, key) ON j.project = u.project AND j.idempotency_key = u.key`,
			[]any{cols.projects, cols.keys}, func(rows pgx.Rows) error {
				var p, k, id string
				if err := rows.Scan(&p, &k, &id); err != nil {
					return err
				}
				existing[[2]string{p, k}] = id
				return nil
			})
		if err != nil {
			return err
		}
		var audits []AuditEntry
		for i, nj := range njs {
			ids[i] = cols.ids[i]
			if !created[ids[i]] {
				ids[i] = existing[[2]string{nj.Project, nj.IdempotencyKey}]
				continue
			}
			audits = append(audits, AuditEntry{At: now, Actor: cmp.Or(nj.Submitter, nj.Project), Action: "submit", Subject: ids[i],
				Reason: "submitted to queue " + nj.Queue, Evidence: map[string]any{"queue": nj.Queue,
					"tier": nj.Tier.String(), "pool": nj.Request.Pool, "gpus": nj.Request.GPUs, "bulk": true}})
		}
		return insertAudits(ctx, tx, audits)
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// jobColumnsIn holds submissions as column arrays for unnest.
type jobColumnsIn struct {
	ids, projects, queues, tiers, requests []string
	submits                                []time.Time
	held, protected                        []bool
	prereqs, recovery, keys, specs         []string
}

func newJobColumns(n int) *jobColumnsIn {
	return &jobColumnsIn{ids: make([]string, n)}
}

func (c *jobColumnsIn) add(nj *NewJob, now time.Time) {
	submit := nj.SubmitTime
	if submit.IsZero() {
		submit = now
	}
	c.projects = append(c.projects, nj.Project)
	c.queues = append(c.queues, nj.Queue)
	c.tiers = append(c.tiers, nj.Tier.String())
	c.requests = append(c.requests, string(mustJSON(toRequestDoc(nj.Request))))
	c.submits = append(c.submits, submit)
	c.held = append(c.held, nj.Held)
	c.prereqs = append(c.prereqs, string(mustJSON(toPrerequisiteDocs(nj.Prerequisites))))
	c.recovery = append(c.recovery, string(mustJSON(nj.recoveryDoc())))
	c.protected = append(c.protected, nj.Protected)
	c.keys = append(c.keys, nj.IdempotencyKey)
	c.specs = append(c.specs, string(mustJSON(specDoc{Command: nj.Command, Env: nj.Env, RunSeconds: nj.RunSeconds})))
}

func (c *jobColumnsIn) args() []any {
	return []any{c.ids, c.projects, c.queues, c.tiers, c.requests, c.submits, c.held, c.prereqs, c.recovery,
		c.protected, c.keys, c.specs}
}

// JobSettlement is one job's life-cycle state and stored wait reason ("" when
// the jobs row has none), as JobSettlements reads them.
type JobSettlement struct {
	ID     string           `db:"id"`
	State  vocab.JobState   `db:"state"`
	Reason vocab.WaitReason `db:"reason"`
}

// Settled reports whether the job has ended, or is pending with a wait reason
// a scheduling cycle gave it (not not_yet_evaluated): what `gpugov load`
// requires of every accepted submission at its end (docs/design.md §8).
func (j JobSettlement) Settled() bool {
	return j.State.Final() || (j.State.Pending() && j.Reason != "" && j.Reason != vocab.ReasonNotYetEvaluated)
}

// JobSettlements returns the state and wait reason of every job of ids that
// exists, in ID order, in one query; an ID with no jobs row is absent from the
// result (a caller compares lengths to find lost jobs). Errors are wrapped
// with "job settlements".
func (s *Store) JobSettlements(ctx context.Context, ids []string) ([]JobSettlement, error) {
	out, err := queryAll[JobSettlement](ctx, s.pool,
		`SELECT id, state, coalesce(reason, '') AS reason FROM jobs WHERE id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: job settlements: %w", err)
	}
	return out, nil
}

// JobStateCount is the number of jobs in one state.
type JobStateCount struct {
	State vocab.JobState `db:"state"`
	Count int64          `db:"count"`
}

// JobStateCounts returns how many jobs are in each state that has any, in
// state order, in one query (`gpugov load`'s pipeline progress: jobs
// finished, pending and holding an allocation over time). Errors are wrapped
// with "job state counts".
func (s *Store) JobStateCounts(ctx context.Context) ([]JobStateCount, error) {
	out, err := queryAll[JobStateCount](ctx, s.pool, `SELECT state, count(*) AS count FROM jobs GROUP BY state ORDER BY state`)
	if err != nil {
		return nil, fmt.Errorf("store: job state counts: %w", err)
	}
	return out, nil
}
