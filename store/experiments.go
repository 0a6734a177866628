package store

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/vocab"
)

// This file holds policy experiments (docs/design.md §4, "Experiments"):
// the experiments table, its timeline, and the one-experiment-per-pool rule.
// The ExperimentWorkflow's steps (baseline, switch, checks, rollback,
// verdict, revert, promote, abort) are in experiment_steps.go.

// Audit actions of policy experiments (subject: the experiment ID; the
// policy switches themselves are audited by ActivatePolicy as
// AuditActivatePolicy with actor "experiment/<id>").
const (
	AuditCreateExperiment    = "create_experiment"     // evidence: name, baseline, candidate, groups, pools, window_s, start
	AuditOverrideOneVariable = "override_one_variable" // evidence: groups (more than one), reason: the override's
	AuditExperimentSwitch    = "experiment_switch"     // evidence: baseline, candidate, baseline measurement numbers
	AuditExperimentRollback  = "experiment_rollback"   // evidence: the breached conditions with their numbers; restored, kept_quotas as for a revert
	AuditExperimentRevert    = "experiment_revert"     // evidence: verdict (or abort), baseline, candidate, replaced, restored (the version activated), kept_quotas (the window's quota changes re-applied: pool, project, candidate, kept), quota_variable
	AuditExperimentPromote   = "experiment_promote"    // evidence: candidate (the new baseline), baseline
	AuditExperimentAbort     = "experiment_abort"      // evidence: state before, whether the candidate was in force, active hash
)

// Experiment event kinds (ExperimentEvent.Kind; the CHECK of
// experiment_events.kind lists the same).
const (
	ExperimentEventCreated          = "created"
	ExperimentEventBaselineMeasured = "baseline_measured"
	ExperimentEventSwitched         = "switched"
	ExperimentEventCheck            = "check"
	ExperimentEventRolledBack       = "rolled_back"
	ExperimentEventVerdict          = "verdict"
	ExperimentEventReverted         = "reverted"
	ExperimentEventPromoted         = "promoted"
	ExperimentEventAborted          = "aborted"
	ExperimentEventPolicyChanged    = "policy_changed"
)

// ExperimentEventKinds lists every experiment event kind, in life-cycle order.
var ExperimentEventKinds = []string{ExperimentEventCreated, ExperimentEventBaselineMeasured, ExperimentEventSwitched,
	ExperimentEventCheck, ExperimentEventRolledBack, ExperimentEventVerdict, ExperimentEventReverted,
	ExperimentEventPromoted, ExperimentEventAborted, ExperimentEventPolicyChanged}

// Experiment is one policy experiment (docs/design.md §4, "Experiments").
type Experiment struct {
	// ID is "exp-" and 12 random characters; the workflow ID is "experiment/"+ID.
	ID string
	// Spec is the spec as submitted, with Candidate.Policy cleared and
	// Candidate.Hash set to CandidateHash.
	Spec  experiment.Spec
	State vocab.ExperimentState
	// Verdict is "" until a verdict is recorded; an experiment aborted
	// after a kept verdict keeps it.
	Verdict vocab.ExperimentVerdict
	// BaselineHash is the policy version active at creation.
	BaselineHash  string
	CandidateHash string
	// Groups are the variable groups in which the candidate differs from the
	// baseline (experiment.CheckOneVariable).
	Groups    []vocab.PolicyGroup
	CreatedBy string
	CreatedAt time.Time
	// StartAt is when the candidate is to be switched in: Spec.Start, or the
	// creation time.
	StartAt    time.Time
	SwitchedAt *time.Time              // when the candidate was switched in; nil before
	EndedAt    *time.Time              // when it became finished or aborted; nil before
	Baseline   *experiment.Measurement // once measured
	Outcome    *experiment.Outcome     // once decided
	PromotedAt *time.Time              // when an admin promoted the kept candidate
}

// Pools returns the scope's pools (Spec.Scope.Pools): the pools the
// experiment measures and holds.
func (e *Experiment) Pools() []string { return e.Spec.Scope.Pools }

// HoldsPools reports whether the experiment holds its pools: it is active
// (vocab.ExperimentState.Active), or finished kept and neither promoted nor
// aborted (its candidate is still in force). While one does, no other
// experiment may be created, on any pool: the policy in force is
// service-wide, so a second experiment would take the first's candidate
// as its baseline and switch every pool again.
func (e *Experiment) HoldsPools() bool {
	return e.State.Active() || (e.State == vocab.ExperimentFinished && e.Verdict == vocab.VerdictKept && e.PromotedAt == nil)
}

// WorkflowID is the experiment's ExperimentWorkflow ID: "experiment/<id>".
func (e *Experiment) WorkflowID() string { return ExperimentWorkflowID(e.ID) }

// ExperimentWorkflowID is the workflow ID of experiment id: "experiment/<id>".
// It is also the actor of the policy switches the experiment makes.
func ExperimentWorkflowID(id string) string { return "experiment/" + id }

// ExperimentEvent is one entry of an experiment's timeline.
type ExperimentEvent struct {
	At     time.Time
	Kind   string          // one of ExperimentEventKinds
	Detail string          // one readable sentence with the numbers
	Data   json.RawMessage // e.g. []experiment.ConditionResult for a check; nil when none
}

// ExperimentConflict is the error CreateExperiment returns while an
// experiment holds its pools (Experiment.HoldsPools), whichever pools the
// new one names: the policy in force is service-wide, so experiments run
// one at a time. ID is the holding experiment (the oldest when there are
// several), Pools its pools. It wraps ErrConflict.
type ExperimentConflict struct {
	ID    string
	Pools []string
}

// Error names the experiment, its pools and why it excludes another.
func (e *ExperimentConflict) Error() string {
	return fmt.Sprintf("experiment %s holds pool %s; the policy in force is service-wide: one experiment at a time",
		e.ID, strings.Join(e.Pools, ", "))
}

// Unwrap returns ErrConflict.
func (e *ExperimentConflict) Unwrap() error { return ErrConflict }

// holdingSQL is the SQL form of Experiment.HoldsPools (the predicate of
// experiments_holding_idx).
const holdingSQL = `(state IN ('scheduled', 'baseline', 'running') OR (state = 'finished' AND verdict = 'kept' AND promoted_at IS NULL))`

// experimentLock is the advisory lock key pair every experiment writer that
// checks the one-experiment-at-a-time rule takes (transaction-scoped).
const experimentLockSQL = `SELECT pg_advisory_xact_lock(hashtext('gpugov.experiments'), 0)`

// CreateExperiment stores e as a new experiment in state scheduled, in one
// transaction: it sets e.ID, e.CreatedAt (now), e.State and e.StartAt
// (Spec.Start, else now), clears Spec.Candidate.Policy and sets
// Spec.Candidate.Hash to CandidateHash, records the "created" event and
// audits AuditCreateExperiment (and AuditOverrideOneVariable with the
// override's reason when Spec.Override is set), under a transaction-scoped
// advisory lock that makes the one-at-a-time check race-free.
//
// The caller (the API) has validated the spec (experiment.Spec.Validate),
// stored the candidate version and computed Groups; CreateExperiment checks
// what it can: created_by, name, window_s > 0, scope.pools (at least one,
// no repeats, each in the inventory), baseline and candidate hashes (both
// stored, different, the baseline being the active version), groups
// (vocab.PolicyGroups), candidate.hash when set equal to CandidateHash —
// ErrInvalid naming the field. It returns an *ExperimentConflict (wrapping
// ErrConflict) naming the experiment that holds its pools, whichever they
// are (the policy in force is service-wide: one experiment at a time), and
// an error wrapping ErrConflict when the active policy version is not
// BaselineHash any more. Nothing is stored on error.
func (s *Store) CreateExperiment(ctx context.Context, e *Experiment) error {
	if err := checkNewExperiment(e); err != nil {
		return fmt.Errorf("store: create experiment: %w", err)
	}
	now := time.Now().UTC()
	e.Spec.Candidate = experiment.Candidate{Hash: e.CandidateHash}
	if e.Spec.Start != nil {
		e.StartAt = e.Spec.Start.UTC()
	} else {
		e.StartAt = now
	}
	if e.Groups == nil {
		e.Groups = []vocab.PolicyGroup{}
	}
	spec, err := json.Marshal(e.Spec)
	if err != nil {
		return fmt.Errorf("store: create experiment: encode spec: %w", err)
	}
	var id string
	err = s.inTx(ctx, "create experiment", func(tx pgx.Tx) error {
		id = newExperimentID()
		if _, err := tx.Exec(ctx, experimentLockSQL); err != nil {
			return err
		}
		if err := checkExperimentPolicies(ctx, tx, e); err != nil {
			return err
		}
		for i, p := range e.Spec.Scope.Pools {
			if err := knownPoolTx(ctx, tx, p); errors.Is(err, ErrInvalid) {
				return invalidf(fmt.Sprintf("scope.pools[%d]", i), "scope.pools[%d]: pool %q is not in the inventory", i, p)
			} else if err != nil {
				return err
			}
		}
		if c, err := holdingConflict(ctx, tx); err != nil || c != nil {
			if c != nil {
				return c
			}
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO experiments (id, name, spec, state, baseline_hash, candidate_hash, groups, pools, created_by,
				created_at, start_at)
			VALUES ($1, $2, $3, 'scheduled', $4, $5, $6, $7, $8, $9, $10)`,
			id, e.Spec.Name, spec, e.BaselineHash, e.CandidateHash, groupStrings(e.Groups), e.Spec.Scope.Pools,
			e.CreatedBy, now, e.StartAt); err != nil {
			return err
		}
		detail := fmt.Sprintf("created by %s: candidate %s against baseline %s (%s), pools %s, window %s from %s",
			e.CreatedBy, shortHash(e.CandidateHash), shortHash(e.BaselineHash), groupsText(e.Groups),
			strings.Join(e.Spec.Scope.Pools, ", "), secondsText(e.Spec.WindowSeconds), e.StartAt.Format(time.RFC3339))
		if _, err := insertExperimentEvent(ctx, tx, id, "", ExperimentEvent{At: now, Kind: ExperimentEventCreated,
			Detail: detail}); err != nil {
			return err
		}
		ev := map[string]any{"name": e.Spec.Name, "baseline": e.BaselineHash, "candidate": e.CandidateHash,
			"groups": e.Groups, "pools": e.Spec.Scope.Pools, "window_s": e.Spec.WindowSeconds, "start": e.StartAt}
		if err := appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: e.CreatedBy, Action: AuditCreateExperiment,
			Subject: id, Reason: e.Spec.Hypothesis, Evidence: ev}); err != nil {
			return err
		}
		if e.Spec.Override != nil {
			return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: e.CreatedBy, Action: AuditOverrideOneVariable,
				Subject: id, Reason: e.Spec.Override.Reason, Evidence: map[string]any{"groups": e.Groups,
					"baseline": e.BaselineHash, "candidate": e.CandidateHash}})
		}
		return nil
	})
	if err != nil {
		var c *ExperimentConflict
		if errors.As(err, &c) {
			return c // its message names the experiment; the operation adds nothing
		}
		return err
	}
	e.ID, e.CreatedAt, e.State, e.Verdict = id, now, vocab.ExperimentScheduled, ""
	e.SwitchedAt, e.EndedAt, e.Baseline, e.Outcome, e.PromotedAt = nil, nil, nil, nil, nil
	return nil
}

// checkNewExperiment checks what CreateExperiment can check without the database.
func checkNewExperiment(e *Experiment) error {
	if e == nil {
		return invalidf("experiment", "experiment is required")
	}
	if err := required("created_by", e.CreatedBy, "name", e.Spec.Name, "baseline_hash", e.BaselineHash,
		"candidate_hash", e.CandidateHash); err != nil {
		return err
	}
	switch {
	case !(e.Spec.WindowSeconds > 0):
		return invalidf("window_s", "window_s must be above 0, got %s", strconv.FormatFloat(e.Spec.WindowSeconds, 'f', -1, 64))
	case e.CandidateHash == e.BaselineHash:
		return invalidf("candidate", "candidate %s is the baseline: nothing to try", shortHash(e.CandidateHash))
	case e.Spec.Candidate.Hash != "" && e.Spec.Candidate.Hash != e.CandidateHash:
		return invalidf("candidate.hash", "candidate.hash %s differs from the candidate %s", e.Spec.Candidate.Hash, e.CandidateHash)
	case len(e.Spec.Scope.Pools) == 0:
		return invalidf("scope.pools", "scope.pools needs at least one pool")
	}
	for i, p := range e.Spec.Scope.Pools {
		if p == "" {
			return invalidf(fmt.Sprintf("scope.pools[%d]", i), "scope.pools[%d] is empty", i)
		}
		if j := slices.Index(e.Spec.Scope.Pools, p); j < i {
			return invalidf(fmt.Sprintf("scope.pools[%d]", i), "scope.pools[%d] repeats %q (scope.pools[%d])", i, p, j)
		}
	}
	for i, g := range e.Groups {
		if !g.Valid() {
			return invalidf(fmt.Sprintf("groups[%d]", i), "groups[%d]: %q is not a policy variable group", i, g)
		}
	}
	return nil
}

// checkExperimentPolicies checks, in tx, that both versions are stored and
// that the baseline is the active version.
func checkExperimentPolicies(ctx context.Context, tx pgx.Tx, e *Experiment) error {
	var baselineStored, candidateStored bool
	var active *string
	if err := tx.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM policy_versions WHERE hash = $1),
			EXISTS (SELECT 1 FROM policy_versions WHERE hash = $2),
			(SELECT hash FROM policy_versions WHERE active)`, e.BaselineHash, e.CandidateHash).
		Scan(&baselineStored, &candidateStored, &active); err != nil {
		return err
	}
	switch {
	case !baselineStored:
		return invalidf("baseline_hash", "baseline policy version %s is not stored", e.BaselineHash)
	case !candidateStored:
		return invalidf("candidate.hash", "candidate policy version %s is not stored", e.CandidateHash)
	case active == nil:
		return fmt.Errorf("no policy version is active, so there is no baseline: %w", ErrConflict)
	case *active != e.BaselineHash:
		return fmt.Errorf("the active policy version is %s, not the baseline %s (it changed meanwhile): %w",
			shortHash(*active), shortHash(e.BaselineHash), ErrConflict)
	}
	return nil
}

// holdingConflict returns the oldest experiment that holds its pools, on
// whichever pools, as an *ExperimentConflict, or nil: the policy in force
// is service-wide, so a new experiment waits for any holding one.
func holdingConflict(ctx context.Context, q querier) (*ExperimentConflict, error) {
	var c ExperimentConflict
	err := q.QueryRow(ctx, `
		SELECT id, pools FROM experiments WHERE `+holdingSQL+`
		ORDER BY created_at, id LIMIT 1`).Scan(&c.ID, &c.Pools)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// experimentRow is one experiments row as experimentColumns select it.
type experimentRow struct {
	ID            string     `db:"id"`
	Spec          []byte     `db:"spec"`
	State         string     `db:"state"`
	Verdict       string     `db:"verdict"`
	BaselineHash  string     `db:"baseline_hash"`
	CandidateHash string     `db:"candidate_hash"`
	Groups        []string   `db:"groups"`
	CreatedBy     string     `db:"created_by"`
	CreatedAt     time.Time  `db:"created_at"`
	StartAt       time.Time  `db:"start_at"`
	SwitchedAt    *time.Time `db:"switched_at"`
	EndedAt       *time.Time `db:"ended_at"`
	Baseline      []byte     `db:"baseline"`
	Outcome       []byte     `db:"outcome"`
	PromotedAt    *time.Time `db:"promoted_at"`
}

const experimentColumns = `id, spec, state, coalesce(verdict, '') AS verdict, baseline_hash, candidate_hash, groups,
	created_by, created_at, start_at, switched_at, ended_at, baseline, outcome, promoted_at`

func (r *experimentRow) experiment() (*Experiment, error) {
	e := &Experiment{ID: r.ID, State: vocab.ExperimentState(r.State), Verdict: vocab.ExperimentVerdict(r.Verdict),
		BaselineHash: r.BaselineHash, CandidateHash: r.CandidateHash, Groups: make([]vocab.PolicyGroup, len(r.Groups)),
		CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC(), StartAt: r.StartAt.UTC(), SwitchedAt: utcPtr(r.SwitchedAt),
		EndedAt: utcPtr(r.EndedAt), PromotedAt: utcPtr(r.PromotedAt)}
	for i, g := range r.Groups {
		e.Groups[i] = vocab.PolicyGroup(g)
	}
	if err := json.Unmarshal(r.Spec, &e.Spec); err != nil {
		return nil, fmt.Errorf("experiment %s: spec: %w", r.ID, err)
	}
	if r.Baseline != nil {
		e.Baseline = &experiment.Measurement{}
		if err := json.Unmarshal(r.Baseline, e.Baseline); err != nil {
			return nil, fmt.Errorf("experiment %s: baseline: %w", r.ID, err)
		}
	}
	if r.Outcome != nil {
		e.Outcome = &experiment.Outcome{}
		if err := json.Unmarshal(r.Outcome, e.Outcome); err != nil {
			return nil, fmt.Errorf("experiment %s: outcome: %w", r.ID, err)
		}
	}
	return e, nil
}

// queryExperiment reads the experiment id from q (FOR UPDATE when lock),
// or an error wrapping ErrNotFound.
func queryExperiment(ctx context.Context, q querier, id string, lock bool) (*Experiment, error) {
	sql := `SELECT ` + experimentColumns + ` FROM experiments WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	r, err := queryOne[experimentRow](ctx, q, sql, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("experiment %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return r.experiment()
}

// GetExperiment returns experiment id; errors wrap ErrNotFound or database
// errors, with "experiment".
func (s *Store) GetExperiment(ctx context.Context, id string) (*Experiment, error) {
	e, err := queryExperiment(ctx, s.pool, id, false)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return e, nil
}

// ListExperiments returns up to limit experiments, newest first (limit ≤ 0
// means DefaultListLimit; at most MaxListLimit). Errors are wrapped with
// "list experiments".
func (s *Store) ListExperiments(ctx context.Context, limit int) ([]Experiment, error) {
	rows, err := queryAll[experimentRow](ctx, s.pool, `SELECT `+experimentColumns+` FROM experiments
		ORDER BY created_at DESC, id DESC LIMIT $1`, pageLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("store: list experiments: %w", err)
	}
	out := make([]Experiment, 0, len(rows))
	for i := range rows {
		e, err := rows[i].experiment()
		if err != nil {
			return nil, fmt.Errorf("store: list experiments: %w", err)
		}
		out = append(out, *e)
	}
	return out, nil
}

// ExperimentEvents returns experiment id's timeline, oldest first. An
// unknown experiment is an error wrapping ErrNotFound.
func (s *Store) ExperimentEvents(ctx context.Context, id string) ([]ExperimentEvent, error) {
	var out []ExperimentEvent
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var known bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM experiments WHERE id = $1)`, id).Scan(&known); err != nil {
				return err
			}
			if !known {
				return fmt.Errorf("experiment %s: %w", id, ErrNotFound)
			}
			return forEachRow(ctx, tx, `SELECT at, kind, detail, data FROM experiment_events
				WHERE experiment_id = $1 ORDER BY seq`, []any{id}, func(rows pgx.Rows) error {
				var ev ExperimentEvent
				var data []byte
				if err := rows.Scan(&ev.At, &ev.Kind, &ev.Detail, &data); err != nil {
					return err
				}
				ev.At = ev.At.UTC()
				if data != nil {
					ev.Data = json.RawMessage(data)
				}
				out = append(out, ev)
				return nil
			})
		})
	if err != nil {
		return nil, fmt.Errorf("store: experiment events: %w", err)
	}
	return out, nil
}

// ActiveExperimentFor returns the oldest experiment that holds one of pools
// (Experiment.HoldsPools), or nil, nil when none does; with no pools, the
// oldest that holds any. Errors are wrapped with "active experiment".
func (s *Store) ActiveExperimentFor(ctx context.Context, pools []string) (*Experiment, error) {
	sql := `SELECT ` + experimentColumns + ` FROM experiments WHERE ` + holdingSQL
	args := []any{}
	if len(pools) > 0 {
		sql += ` AND pools && $1::text[]`
		args = append(args, pools)
	}
	r, err := queryOne[experimentRow](ctx, s.pool, sql+` ORDER BY created_at, id LIMIT 1`, args...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: active experiment: %w", err)
	}
	e, err := r.experiment()
	if err != nil {
		return nil, fmt.Errorf("store: active experiment: %w", err)
	}
	return e, nil
}

// HoldingExperiments returns the experiments that hold their pools
// (Experiment.HoldsPools), oldest first: at most one, since experiments
// run one at a time (CreateExperiment). Errors are wrapped with "holding
// experiments".
func (s *Store) HoldingExperiments(ctx context.Context) ([]Experiment, error) {
	rows, err := queryAll[experimentRow](ctx, s.pool, `SELECT `+experimentColumns+` FROM experiments WHERE `+holdingSQL+`
		ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: holding experiments: %w", err)
	}
	out := make([]Experiment, 0, len(rows))
	for i := range rows {
		e, err := rows[i].experiment()
		if err != nil {
			return nil, fmt.Errorf("store: holding experiments: %w", err)
		}
		out = append(out, *e)
	}
	return out, nil
}

// HoldingExperimentIDs returns the IDs of the experiments that hold their
// pools (Experiment.HoldsPools), oldest first: those whose
// ExperimentWorkflow should be running, which serve's reconciler makes
// sure of. Errors are wrapped with "holding experiments".
func (s *Store) HoldingExperimentIDs(ctx context.Context) ([]string, error) {
	var out []string
	err := forEachRow(ctx, s.pool, `SELECT id FROM experiments WHERE `+holdingSQL+` ORDER BY created_at, id`, nil,
		func(rows pgx.Rows) error {
			var id string
			err := rows.Scan(&id)
			out = append(out, id)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: holding experiments: %w", err)
	}
	return out, nil
}

// insertExperimentEvent appends ev to experiment id's timeline in tx. A
// non-empty key makes the event once-only per experiment (a retried step):
// it returns false, writing nothing, when an event with that key exists.
func insertExperimentEvent(ctx context.Context, tx pgx.Tx, id, key string, ev ExperimentEvent) (bool, error) {
	var keyArg *string
	if key != "" {
		keyArg = &key
	}
	var data []byte
	if ev.Data != nil {
		data = []byte(ev.Data)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO experiment_events (experiment_id, at, kind, detail, data, step_key)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (experiment_id, step_key) DO NOTHING`,
		id, ev.At, ev.Kind, ev.Detail, data, keyArg)
	if err != nil {
		return false, fmt.Errorf("experiment %s: event %s: %w", id, ev.Kind, err)
	}
	return tag.RowsAffected() == 1, nil
}

// newExperimentID returns "exp-" and 12 random Crockford base-32 characters (60 bits).
func newExperimentID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("store: crypto/rand: %v", err)) // rand.Read never fails on supported platforms
	}
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = crockford[c&31]
	}
	return "exp-" + strings.ToLower(string(out))
}

// shortHash is the first 12 hex digits of a policy hash, as timelines print it.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func groupStrings(gs []vocab.PolicyGroup) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = string(g)
	}
	return out
}

// groupsText is "changes aging" / "changes aging, quota" / "no variable group".
func groupsText(gs []vocab.PolicyGroup) string {
	if len(gs) == 0 {
		return "no variable group differs"
	}
	return "changes " + strings.Join(groupStrings(gs), ", ")
}

// secondsText renders a duration in seconds as "3600 s", every digit
// written out ("2592000 s", never "2.592e+06 s").
func secondsText(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) + " s" }
