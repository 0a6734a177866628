package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
)

// This file holds the steps of the ExperimentWorkflow (docs/design.md §3,
// "Experiments"), each one transaction on the experiment's row (locked
// FOR UPDATE) that records the step's state change, its timeline event
// and, where the step changes the policy in force, the switch itself:
// the active version's row is locked as ActivatePolicy, SetQuota and
// SyncQuotas lock it, and the version is activated as ActivatePolicy
// activates one (a version derived from the active one, audited as
// AuditActivatePolicy with actor "experiment/<id>" and the step's
// numbers as evidence). So a step and its switch commit together, and a
// retried step (an activity retried after a worker crash) finds its
// state changed and changes nothing. A step on a finished or aborted
// experiment returns it unchanged, so the workflow sees how it ended.
//
// The candidate is "in force" while the active version is the candidate,
// or any version that differs from it only in quotas (a quota change approved meanwhile, policy.Diff's
// quota group) when the experiment is not itself about quotas. Any other
// active version means someone applied another policy: the experiment
// does not fight it, it ends aborted with a policy_changed event and
// restores nothing.
//
// Undoing the experiment (a rollback, a revert, an abort) undoes only its
// variable: the quota changes made during the window (the quotas in which
// the active version differs from the candidate) are re-applied to the
// baseline, and that version, derived from the baseline, is restored
// instead of the baseline itself (restoreTargetTx). An experiment about
// quotas restores its baseline exactly: its quotas are its variable, and
// a quota change during its window ended it (policy_changed) already.

// experimentStep runs fn in one transaction on experiment id's row, locked,
// and returns the experiment as fn left it.
func (s *Store) experimentStep(ctx context.Context, op, id string, fn func(tx pgx.Tx, e *Experiment) error) (*Experiment, error) {
	var out *Experiment
	err := s.inTx(ctx, op+" "+id, func(tx pgx.Tx) error {
		e, err := queryExperiment(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if err := fn(tx, e); err != nil {
			return err
		}
		out, err = queryExperiment(ctx, tx, id, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// final reports whether e is finished or aborted.
func (e *Experiment) final() bool {
	return e.State == vocab.ExperimentFinished || e.State == vocab.ExperimentAborted
}

// activePolicy is the active version, as lockActiveVersionTx locked it.
type activePolicy struct {
	hash, base string
	policy     *policy.Policy
}

// lockActive locks the active version's row; none active is an error
// wrapping ErrConflict.
func lockActive(ctx context.Context, tx pgx.Tx) (*activePolicy, error) {
	hash, base, p, err := lockActiveVersionTx(ctx, tx)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("no policy version is active: %w", ErrConflict)
	}
	if err != nil {
		return nil, err
	}
	return &activePolicy{hash: hash, base: base, policy: p}, nil
}

// candidateInForceTx reports whether e's candidate is in force under the
// active version a (see the top of this file).
func candidateInForceTx(ctx context.Context, tx pgx.Tx, e *Experiment, a *activePolicy) (bool, error) {
	switch {
	case a.hash == e.CandidateHash:
		return true, nil
	case a.hash == e.BaselineHash || slices.Contains(e.Groups, vocab.PolicyQuota):
		return false, nil
	}
	// Quota-only from the candidate, whatever the lineage: derived_from
	// records a version's latest activation, so setting a quota back to an
	// earlier value re-activates an older version whose lineage no longer
	// leads to the candidate; the diff is what decides.
	var body []byte
	if err := tx.QueryRow(ctx, `SELECT body FROM policy_versions WHERE hash = $1`, e.CandidateHash).Scan(&body); err != nil {
		return false, fmt.Errorf("candidate %s: %w", e.CandidateHash, err)
	}
	cand, err := policy.FromCanonical(body)
	if err != nil {
		return false, fmt.Errorf("candidate %s: %w", e.CandidateHash, err)
	}
	groups := policy.Groups(policy.Diff(cand, a.policy))
	return len(groups) == 1 && groups[0] == vocab.PolicyQuota, nil
}

// activateStoredTx makes the stored version hash the active one as
// ActivatePolicy does (its body must decode to hash; a version derived
// from a, audited as AuditActivatePolicy), in tx holding a's lock.
// Activating the active version does nothing.
func activateStoredTx(ctx context.Context, tx pgx.Tx, a *activePolicy, hash, actor, reason string, evidence map[string]any) error {
	var body []byte
	err := tx.QueryRow(ctx, `SELECT body FROM policy_versions WHERE hash = $1`, hash).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("policy version %s: %w", hash, ErrNotFound)
	}
	if err != nil {
		return err
	}
	if err := canonicalBody(hash, body); err != nil {
		return err
	}
	if hash == a.hash {
		return nil
	}
	return activateDerivedTx(ctx, tx, hash, a.hash, a.base, actor, clipText(reason), evidence)
}

// RecordExperimentBaseline stores m as experiment id's baseline
// measurement (state scheduled → baseline) with a baseline_measured event
// giving the window, the jobs and the expected result's metric. An
// experiment whose baseline is already stored, or that is running or
// final, is returned unchanged. Errors wrap ErrNotFound or database errors.
func (s *Store) RecordExperimentBaseline(ctx context.Context, id string, m *experiment.Measurement, at time.Time) (*Experiment, error) {
	if m == nil {
		return nil, fmt.Errorf("store: record experiment baseline %s: %w", id, invalidf("baseline", "baseline measurement is required"))
	}
	return s.experimentStep(ctx, "record experiment baseline", id, func(tx pgx.Tx, e *Experiment) error {
		if e.State != vocab.ExperimentScheduled {
			return nil
		}
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode baseline: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE experiments SET state = 'baseline', baseline = $2 WHERE id = $1`, id, b); err != nil {
			return err
		}
		ran, err := cycleVersionsTx(ctx, tx, m.Window.From, m.Window.To)
		if err != nil {
			return err
		}
		detail := fmt.Sprintf("baseline measured over %s (baseline version %s; %s): %s, %d started; %s",
			windowText(m.Window.From, m.Window.To), shortHash(e.BaselineHash), ran, jobsText(m.Total.Jobs), m.Total.Started,
			expectedText(&e.Spec, m))
		_, err = insertExperimentEvent(ctx, tx, id, "", ExperimentEvent{At: at, Kind: ExperimentEventBaselineMeasured,
			Detail: detail, Data: b})
		return err
	})
}

// cycleVersionsTx says which policy versions the scheduling cycles of
// [from, to) ran under, in the order they first ran: the baseline window
// may predate the baseline version (a stated past window, or jobs
// scheduled before the policy last changed), and the timeline must not
// claim the window ran under it.
func cycleVersionsTx(ctx context.Context, tx pgx.Tx, from, to time.Time) (string, error) {
	hashes, err := collectStrings(tx.Query(ctx, `
		SELECT policy_version FROM scheduling_cycles WHERE at >= $1 AND at < $2 AND policy_version <> ''
		GROUP BY policy_version ORDER BY min(at)`, from, to))
	if err != nil {
		return "", fmt.Errorf("cycle versions: %w", err)
	}
	if len(hashes) == 0 {
		return "no scheduling cycle in the window", nil
	}
	short := make([]string, len(hashes))
	for i, h := range hashes {
		short[i] = shortHash(h)
	}
	return "its cycles ran under " + strings.Join(short, ", "), nil
}

// SwitchExperiment switches experiment id to its candidate (state baseline
// → running, switched_at at), in one transaction with the activation of
// the candidate version (ActivatePolicy's rules, actor "experiment/<id>",
// evidence: the baseline's numbers) and audits AuditExperimentSwitch. When
// the active version is no longer the baseline, it switches nothing and
// ends the experiment aborted with a policy_changed event instead. A
// running or final experiment is returned unchanged; one without a
// measured baseline is an error wrapping ErrConflict.
func (s *Store) SwitchExperiment(ctx context.Context, id string, at time.Time) (*Experiment, error) {
	return s.experimentStep(ctx, "switch experiment", id, func(tx pgx.Tx, e *Experiment) error {
		if e.State == vocab.ExperimentRunning || e.final() {
			return nil
		}
		if e.State != vocab.ExperimentBaseline || e.Baseline == nil {
			return fmt.Errorf("experiment %s is %s without a measured baseline: %w", id, e.State, ErrConflict)
		}
		a, err := lockActive(ctx, tx)
		if err != nil {
			return err
		}
		if a.hash != e.BaselineHash {
			return abortPolicyChangedTx(ctx, tx, e, a, "before the switch", at)
		}
		ev := switchEvidence(e)
		actor := ExperimentWorkflowID(id)
		if err := activateStoredTx(ctx, tx, a, e.CandidateHash, actor,
			fmt.Sprintf("experiment %s (%s): switch to the candidate for %s", id, e.Spec.Name, secondsText(e.Spec.WindowSeconds)),
			ev); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE experiments SET state = 'running', switched_at = $2 WHERE id = $1`, id, at); err != nil {
			return err
		}
		detail := fmt.Sprintf("switched from baseline %s to candidate %s (%s) for %s, until %s",
			shortHash(e.BaselineHash), shortHash(e.CandidateHash), groupsText(e.Groups), secondsText(e.Spec.WindowSeconds),
			at.Add(e.Spec.Window()).UTC().Format(time.RFC3339))
		if _, err := insertExperimentEvent(ctx, tx, id, "", ExperimentEvent{At: at, Kind: ExperimentEventSwitched, Detail: detail}); err != nil {
			return err
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: actor, Action: AuditExperimentSwitch, Subject: id,
			Reason: detail, Evidence: ev})
	})
}

// switchEvidence is the evidence of a switch: the versions and the
// baseline's numbers (the window, its jobs, the expected result's metric
// and each rollback condition's metric on it).
func switchEvidence(e *Experiment) map[string]any {
	ev := map[string]any{"experiment": e.ID, "baseline": e.BaselineHash, "candidate": e.CandidateHash, "groups": e.Groups}
	if m := e.Baseline; m != nil {
		ev["baseline_window"] = m.Window
		ev["baseline_jobs"] = m.Total.Jobs
		v, n, _ := m.Value(e.Spec.Expected.Metric, e.Spec.Expected.Target)
		ev["expected"] = map[string]any{"metric": e.Spec.Expected.Metric, "tier": e.Spec.Expected.Tier,
			"queue": e.Spec.Expected.Queue, "baseline": v, "sample": n}
		conds := make([]map[string]any, 0, len(e.Spec.Rollback))
		for _, c := range e.Spec.Rollback {
			v, n, _ := m.Value(c.Metric, c.Target)
			conds = append(conds, map[string]any{"condition": conditionName(c), "baseline": v, "sample": n})
		}
		ev["rollback_baselines"] = conds
	}
	return ev
}

// RecordExperimentCheck records check n (1, 2, …) of running experiment
// id: a "check" event with every condition's value, baseline and
// threshold (data: results). A retried check n records nothing more; an
// experiment that is not running is returned unchanged.
func (s *Store) RecordExperimentCheck(ctx context.Context, id string, n int, w experiment.Measurement, results []experiment.ConditionResult, at time.Time) (*Experiment, error) {
	return s.experimentStep(ctx, "record experiment check", id, func(tx pgx.Tx, e *Experiment) error {
		if e.State != vocab.ExperimentRunning {
			return nil
		}
		data, err := json.Marshal(results)
		if err != nil {
			return fmt.Errorf("encode check: %w", err)
		}
		detail := fmt.Sprintf("check %d over %s (%s): %s", n, windowText(w.Window.From, w.Window.To), jobsText(w.Total.Jobs),
			resultsText(results))
		_, err = insertExperimentEvent(ctx, tx, id, fmt.Sprintf("check-%d", n),
			ExperimentEvent{At: at, Kind: ExperimentEventCheck, Detail: detail, Data: data})
		return err
	})
}

// ExperimentCheckResults returns the condition results stored with check n
// of experiment id (RecordExperimentCheck's data): what a retried check
// decides on, so a breach recorded by an attempt that failed before its
// rollback is acted on, never re-measured away. Errors: ErrNotFound when
// check n is not recorded, or database and decoding errors.
func (s *Store) ExperimentCheckResults(ctx context.Context, id string, n int) ([]experiment.ConditionResult, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM experiment_events WHERE experiment_id = $1 AND step_key = $2`,
		id, fmt.Sprintf("check-%d", n)).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: experiment %s check %d: %w", id, n, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: experiment %s check %d: %w", id, n, err)
	}
	var rs []experiment.ConditionResult
	if err := json.Unmarshal(data, &rs); err != nil {
		return nil, fmt.Errorf("store: experiment %s check %d: decode results: %w", id, n, err)
	}
	return rs, nil
}

// resultsText joins the conditions' sentences, the breached ones marked.
func resultsText(rs []experiment.ConditionResult) string {
	if len(rs) == 0 {
		return "no rollback condition"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.Text
		if r.Breached {
			parts[i] = "BREACHED " + r.Text
		}
	}
	return strings.Join(parts, "; ")
}

// VerifyExperimentPolicy checks that the policy experiment id expects is
// still the one in force: its candidate for a running (or kept, not
// promoted) experiment, its baseline for one scheduled or measuring its
// baseline (as SwitchExperiment requires). When it is not, the experiment
// ends aborted with a policy_changed event naming the active version
// (restoring nothing), audited as AuditExperimentAbort by
// "experiment/<id>". The workflow's checks call it, and so does the API
// right after an override_reason change, so that the experiment ends at
// once. Other experiments are returned unchanged.
func (s *Store) VerifyExperimentPolicy(ctx context.Context, id string, at time.Time) (*Experiment, error) {
	return s.experimentStep(ctx, "verify experiment policy", id, func(tx pgx.Tx, e *Experiment) error {
		if !e.HoldsPools() {
			return nil
		}
		if e.State == vocab.ExperimentScheduled || e.State == vocab.ExperimentBaseline {
			a, err := lockActive(ctx, tx)
			if err != nil || a.hash == e.BaselineHash {
				return err
			}
			return abortPolicyChangedTx(ctx, tx, e, a, "before the switch", at)
		}
		_, err := lockCandidateInForceTx(ctx, tx, e, "", at)
		return err
	})
}

// lockCandidateInForceTx locks the active version and returns it when e's
// candidate is in force under it; otherwise e ends aborted
// (abortPolicyChangedTx, when naming the step) and it returns nil.
func lockCandidateInForceTx(ctx context.Context, tx pgx.Tx, e *Experiment, when string, at time.Time) (*activePolicy, error) {
	a, err := lockActive(ctx, tx)
	if err != nil {
		return nil, err
	}
	in, err := candidateInForceTx(ctx, tx, e, a)
	if err != nil || in {
		return a, err
	}
	return nil, abortPolicyChangedTx(ctx, tx, e, a, when, at)
}

// abortPolicyChangedTx ends e aborted because the active version a is
// neither its baseline (before the switch) nor its candidate in force:
// a policy_changed event and an AuditExperimentAbort entry; nothing is
// switched. when says at which step ("" for none).
func abortPolicyChangedTx(ctx context.Context, tx pgx.Tx, e *Experiment, a *activePolicy, when string, at time.Time) error {
	if _, err := tx.Exec(ctx, `UPDATE experiments SET state = 'aborted', ended_at = coalesce(ended_at, $2) WHERE id = $1`,
		e.ID, at); err != nil {
		return err
	}
	expected := "the candidate " + shortHash(e.CandidateHash) + " or a quota change derived from it"
	if e.State == vocab.ExperimentBaseline || e.State == vocab.ExperimentScheduled {
		expected = "the baseline " + shortHash(e.BaselineHash)
	}
	detail := fmt.Sprintf("the active policy version is %s, not %s: another policy was applied; the experiment stops and restores nothing",
		shortHash(a.hash), expected)
	if when != "" {
		detail = when + ": " + detail
	}
	if _, err := insertExperimentEvent(ctx, tx, e.ID, "", ExperimentEvent{At: at, Kind: ExperimentEventPolicyChanged,
		Detail: detail}); err != nil {
		return err
	}
	return appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: ExperimentWorkflowID(e.ID), Action: AuditExperimentAbort,
		Subject: e.ID, Reason: detail, Evidence: map[string]any{"state": e.State, "active": a.hash,
			"baseline": e.BaselineHash, "candidate": e.CandidateHash, "policy_changed": true}})
}

// restoreBaselineTx makes e's baseline the active version again when its
// candidate is in force under a — the baseline with the quota changes made
// during the window re-applied (restoreTargetTx) — audited as
// AuditActivatePolicy by "experiment/<id>" with evidence (plus the version
// restored and the kept quota changes), and as action with a kind event
// giving reason and carrying data (nil for none); when another policy was
// applied meanwhile it restores nothing and records a policy_changed event.
// It returns the hash of the version restored, "" when none was.
func restoreBaselineTx(ctx context.Context, tx pgx.Tx, e *Experiment, a *activePolicy, kind, action, reason string,
	evidence map[string]any, data json.RawMessage, at time.Time) (string, error) {
	in, err := candidateInForceTx(ctx, tx, e, a)
	if err != nil {
		return "", err
	}
	if !in {
		detail := fmt.Sprintf("the active policy version is %s, not the candidate %s or a quota change derived from it: another policy was applied, so the baseline %s is not restored",
			shortHash(a.hash), shortHash(e.CandidateHash), shortHash(e.BaselineHash))
		_, err := insertExperimentEvent(ctx, tx, e.ID, "", ExperimentEvent{At: at, Kind: ExperimentEventPolicyChanged, Detail: detail})
		return "", err
	}
	target, kept, err := restoreTargetTx(ctx, tx, e, a)
	if err != nil {
		return "", err
	}
	actor := ExperimentWorkflowID(e.ID)
	ev := map[string]any{"experiment": e.ID, "baseline": e.BaselineHash, "candidate": e.CandidateHash, "replaced": a.hash,
		"restored": target}
	quotaVariable := slices.Contains(e.Groups, vocab.PolicyQuota)
	if len(kept) > 0 {
		ev["kept_quotas"] = keptQuotasEvidence(kept)
	}
	if quotaVariable {
		ev["quota_variable"] = true
	}
	for k, v := range evidence {
		ev[k] = v
	}
	if err := activateStoredTx(ctx, tx, a, target, actor, reason, ev); err != nil {
		return "", err
	}
	var detail string
	switch {
	case len(kept) > 0:
		detail = fmt.Sprintf("baseline %s restored with the %s made during the window kept (%s), as version %s derived from it (was %s): %s",
			shortHash(e.BaselineHash), changesText(len(kept)), keptQuotasText(kept), shortHash(target), shortHash(a.hash), reason)
	case quotaVariable:
		detail = fmt.Sprintf("baseline %s restored exactly, its quotas included, since quota is the experiment's variable (was %s): %s",
			shortHash(e.BaselineHash), shortHash(a.hash), reason)
	default:
		detail = fmt.Sprintf("baseline %s restored (was %s): %s", shortHash(e.BaselineHash), shortHash(a.hash), reason)
	}
	if _, err := insertExperimentEvent(ctx, tx, e.ID, "", ExperimentEvent{At: at, Kind: kind, Detail: detail, Data: data}); err != nil {
		return "", err
	}
	return target, appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: actor, Action: action, Subject: e.ID,
		Reason: clipText(reason), Evidence: ev})
}

// keptQuota is one quota change made during an experiment's window that
// its restore keeps: the quota of (Project, Pool) in the candidate and in
// the active version (nil: none there; a nil Kept is a removed quota).
type keptQuota struct {
	Pool, Project   string
	Candidate, Kept *policy.Quota
}

// restoreTargetTx returns the version that undoing e restores while its
// candidate is in force under a, stored in tx: the baseline itself when
// the candidate is active exactly or the experiment is about quotas (its
// quotas are the experiment's variable); otherwise the baseline with each
// quota change made during the window (quotaChanges from the candidate to
// a) re-applied — policy.WithQuota for a set quota, WithoutQuota for a
// removed one — which is the baseline when they cancel out. kept lists
// those changes (nil for none).
func restoreTargetTx(ctx context.Context, tx pgx.Tx, e *Experiment, a *activePolicy) (hash string, kept []keptQuota, err error) {
	if a.hash == e.CandidateHash || slices.Contains(e.Groups, vocab.PolicyQuota) {
		return e.BaselineHash, nil, nil
	}
	var baseBody, candBody []byte
	err = tx.QueryRow(ctx, `SELECT (SELECT body FROM policy_versions WHERE hash = $1), (SELECT body FROM policy_versions WHERE hash = $2)`,
		e.BaselineHash, e.CandidateHash).Scan(&baseBody, &candBody)
	if err != nil {
		return "", nil, err
	}
	if baseBody == nil {
		return "", nil, fmt.Errorf("baseline policy version %s: %w", e.BaselineHash, ErrNotFound)
	}
	if candBody == nil {
		return "", nil, fmt.Errorf("candidate policy version %s: %w", e.CandidateHash, ErrNotFound)
	}
	base, err := policy.FromCanonical(baseBody)
	if err != nil {
		return "", nil, fmt.Errorf("baseline %s: %w", e.BaselineHash, err)
	}
	if base.Hash() != e.BaselineHash {
		return "", nil, fmt.Errorf("baseline policy version %s decodes to %s: the window's quota changes cannot be re-applied to it exactly",
			e.BaselineHash, base.Hash())
	}
	cand, err := policy.FromCanonical(candBody)
	if err != nil {
		return "", nil, fmt.Errorf("candidate %s: %w", e.CandidateHash, err)
	}
	kept = quotaChanges(cand, a.policy)
	restored := base
	for _, k := range kept {
		if k.Kept != nil {
			restored, _ = restored.WithQuota(*k.Kept)
		} else {
			restored, _ = restored.WithoutQuota(k.Project, k.Pool)
		}
	}
	hash = restored.Hash()
	if hash == e.BaselineHash {
		return hash, kept, nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO policy_versions (hash, body) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`,
		hash, restored.Canonical()); err != nil {
		return "", nil, err
	}
	return hash, kept, nil
}

// quotaChanges lists the quotas that differ from from to to, by (project,
// pool), each pair's first entry counting (as the scheduler reads them):
// those to sets differently or anew, in to's order, then those it has no
// more, in from's order.
func quotaChanges(from, to *policy.Policy) []keptQuota {
	type key struct{ project, pool string }
	index := func(qs []policy.Quota) map[key]policy.Quota {
		m := make(map[key]policy.Quota, len(qs))
		for _, q := range qs {
			if _, dup := m[key{q.Project, q.Pool}]; !dup {
				m[key{q.Project, q.Pool}] = q
			}
		}
		return m
	}
	before, after := index(from.Quotas), index(to.Quotas)
	var out []keptQuota
	seen := map[key]bool{}
	for _, q := range to.Quotas {
		k := key{q.Project, q.Pool}
		if seen[k] {
			continue
		}
		seen[k] = true
		if b, ok := before[k]; ok && b == after[k] {
			continue
		}
		kq := keptQuota{Pool: q.Pool, Project: q.Project, Kept: ptr(after[k])}
		if b, ok := before[k]; ok {
			kq.Candidate = ptr(b)
		}
		out = append(out, kq)
	}
	for _, q := range from.Quotas {
		k := key{q.Project, q.Pool}
		if _, ok := after[k]; ok || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, keptQuota{Pool: q.Pool, Project: q.Project, Candidate: ptr(before[k])})
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// changesText is "1 quota change" or "n quota changes".
func changesText(n int) string {
	if n == 1 {
		return "quota change"
	}
	return fmt.Sprintf("%d quota changes", n)
}

// policyQuotaDoc is a policy quota as the audit evidence records it; nil
// for none.
func policyQuotaDoc(q *policy.Quota) map[string]any {
	if q == nil {
		return nil
	}
	return map[string]any{"nominal_milli": q.NominalMilli, "borrowing_limit_milli": q.BorrowingLimitMilli}
}

// keptQuotasEvidence is the kept quota changes as audit evidence: pool,
// project, the candidate's quota and the kept one (null: none).
func keptQuotasEvidence(ks []keptQuota) []map[string]any {
	out := make([]map[string]any, len(ks))
	for i, k := range ks {
		out[i] = map[string]any{"pool": k.Pool, "project": k.Project, "candidate": policyQuotaDoc(k.Candidate),
			"kept": policyQuotaDoc(k.Kept)}
	}
	return out
}

// keptQuotasText renders the kept quota changes: "quota of vision in a100
// nominal 4000, borrowing limit 0 milli-GPU (candidate: none)".
func keptQuotasText(ks []keptQuota) string {
	text := func(q *policy.Quota) string {
		if q == nil {
			return "none"
		}
		return fmt.Sprintf("nominal %d, borrowing limit %d milli-GPU", q.NominalMilli, q.BorrowingLimitMilli)
	}
	parts := make([]string, len(ks))
	for i, k := range ks {
		if k.Kept == nil {
			parts[i] = fmt.Sprintf("quota of %s in %s removed (candidate: %s)", k.Project, k.Pool, text(k.Candidate))
			continue
		}
		parts[i] = fmt.Sprintf("quota of %s in %s %s (candidate: %s)", k.Project, k.Pool, text(k.Kept), text(k.Candidate))
	}
	return strings.Join(parts, "; ")
}

// breachEvidence lists the breached conditions with their numbers.
func breachEvidence(bs []experiment.ConditionResult) []map[string]any {
	out := make([]map[string]any, len(bs))
	for i, b := range bs {
		out[i] = map[string]any{"condition": b.Condition.Name, "metric": b.Condition.Metric, "tier": b.Condition.Tier,
			"queue": b.Condition.Queue, "value": b.Value, "baseline": b.Baseline, "threshold": b.Threshold, "text": b.Text}
	}
	return out
}

// RollBackExperiment ends running experiment id after a breach, in one
// transaction: the baseline is restored at once (restoreBaselineTx: with
// the window's quota changes kept; a rolled_back event and
// AuditExperimentRollback with the breached conditions' numbers, the
// switch audited as AuditActivatePolicy by "experiment/<id>"; nothing is
// switched when another policy was applied meanwhile: a policy_changed
// event), the outcome is stored (state finished, verdict rolled_back, a
// verdict event), and an experiment.rolled_back notification with the
// numbers is written to the outbox for the admins (recipient
// policy.AdminsRecipient). out.Verdict must be rolled_back with breaches
// (ErrInvalid naming verdict). A final experiment is returned unchanged;
// one not running is an error wrapping ErrConflict.
func (s *Store) RollBackExperiment(ctx context.Context, id string, out *experiment.Outcome, at time.Time) (*Experiment, error) {
	if out == nil || out.Verdict != vocab.VerdictRolledBack || len(out.Breaches) == 0 {
		return nil, fmt.Errorf("store: roll back experiment %s: %w", id,
			invalidf("verdict", "a rollback needs an outcome with the verdict rolled_back and its breaches"))
	}
	return s.experimentStep(ctx, "roll back experiment", id, func(tx pgx.Tx, e *Experiment) error {
		if e.final() {
			return nil
		}
		if e.State != vocab.ExperimentRunning {
			return fmt.Errorf("experiment %s is %s, not running: %w", id, e.State, ErrConflict)
		}
		return rollBackTx(ctx, tx, e, out, at)
	})
}

// rollBackTx is RollBackExperiment's work on running e.
func rollBackTx(ctx context.Context, tx pgx.Tx, e *Experiment, out *experiment.Outcome, at time.Time) error {
	a, err := lockActive(ctx, tx)
	if err != nil {
		return err
	}
	breaches := breachEvidence(out.Breaches)
	reason := fmt.Sprintf("experiment %s (%s): rollback after a breach: %s", e.ID, e.Spec.Name, resultsText(out.Breaches))
	// The rolled_back event carries the breached conditions' results, as a
	// check event carries its own, so the timeline shows the numbers.
	data, err := json.Marshal(out.Breaches)
	if err != nil {
		return fmt.Errorf("encode breaches: %w", err)
	}
	restored, err := restoreBaselineTx(ctx, tx, e, a, ExperimentEventRolledBack, AuditExperimentRollback, reason,
		map[string]any{"breaches": breaches}, data, at)
	if err != nil {
		return err
	}
	if err := finishTx(ctx, tx, e, out, at); err != nil {
		return err
	}
	return insertAdminNotification(ctx, tx, vocab.NotifyExperimentRolledBack, map[string]any{
		"experiment_id": e.ID, "name": e.Spec.Name, "pools": e.Spec.Scope.Pools, "baseline": e.BaselineHash,
		"candidate": e.CandidateHash, "restored": restored != "", "restored_version": restored, "reason": out.Reason,
		"breaches": breaches,
	}, at)
}

// finishTx stores out as e's outcome: state finished, its verdict, ended
// at at, and a verdict event.
func finishTx(ctx context.Context, tx pgx.Tx, e *Experiment, out *experiment.Outcome, at time.Time) error {
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode outcome: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE experiments SET state = 'finished', verdict = $2, outcome = $3, ended_at = $4 WHERE id = $1`,
		e.ID, out.Verdict, b, at); err != nil {
		return err
	}
	_, err = insertExperimentEvent(ctx, tx, e.ID, "", ExperimentEvent{At: at, Kind: ExperimentEventVerdict,
		Detail: verdictText(out), Data: b})
	return err
}

// FinishExperiment stores the outcome of running experiment id whose
// window is over (experiment.Decide on the full window), in one
// transaction: state finished with out's verdict and a verdict event. A
// kept candidate stays in force (the experiment holds its pools until
// promoted or aborted); not_met and inconclusive restore the baseline
// (restoreBaselineTx: with the window's quota changes kept; a
// reverted event, AuditExperimentRevert, the switch audited as
// AuditActivatePolicy by "experiment/<id>"); rolled_back (a breach on the
// full window) is RollBackExperiment's work. When another policy was
// applied meanwhile the experiment ends aborted with a policy_changed
// event instead, with no verdict. A final experiment is returned
// unchanged; one not running is an error wrapping ErrConflict; an outcome
// without a valid verdict is ErrInvalid naming verdict.
func (s *Store) FinishExperiment(ctx context.Context, id string, out *experiment.Outcome, at time.Time) (*Experiment, error) {
	if out == nil || !out.Verdict.Valid() {
		return nil, fmt.Errorf("store: finish experiment %s: %w", id, invalidf("verdict", "an outcome with a verdict is required"))
	}
	return s.experimentStep(ctx, "finish experiment", id, func(tx pgx.Tx, e *Experiment) error {
		if e.final() {
			return nil
		}
		if e.State != vocab.ExperimentRunning {
			return fmt.Errorf("experiment %s is %s, not running: %w", id, e.State, ErrConflict)
		}
		if out.Verdict == vocab.VerdictRolledBack {
			return rollBackTx(ctx, tx, e, out, at)
		}
		a, err := lockCandidateInForceTx(ctx, tx, e, "at the end of the window", at)
		if a == nil || err != nil {
			return err
		}
		if err := finishTx(ctx, tx, e, out, at); err != nil {
			return err
		}
		if out.Verdict == vocab.VerdictKept {
			return nil
		}
		_, err = restoreBaselineTx(ctx, tx, e, a, ExperimentEventReverted, AuditExperimentRevert,
			fmt.Sprintf("experiment %s (%s): %s, so the baseline is restored", e.ID, e.Spec.Name, out.Verdict),
			map[string]any{"verdict": out.Verdict, "reason": out.Reason}, nil, at)
		return err
	})
}

// AbortExperiment stops experiment id at an admin's request, in one
// transaction: state aborted (ended at at unless it had ended with a kept
// verdict, whose verdict it keeps), an aborted event and
// AuditExperimentAbort by actor with reason; when the candidate was
// switched in and is still in force, the baseline is restored
// (restoreBaselineTx: with the window's quota changes kept; a reverted
// event, AuditExperimentRevert, the switch audited as AuditActivatePolicy
// by "experiment/<id>"). An aborted experiment is returned unchanged; a
// finished one that does not hold its pools (a verdict other than kept,
// or promoted) is an error wrapping ErrConflict; an empty actor is
// ErrInvalid.
func (s *Store) AbortExperiment(ctx context.Context, id, actor, reason string, at time.Time) (*Experiment, error) {
	if err := required("actor", actor); err != nil {
		return nil, fmt.Errorf("store: abort experiment %s: %w", id, err)
	}
	return s.experimentStep(ctx, "abort experiment", id, func(tx pgx.Tx, e *Experiment) error {
		if e.State == vocab.ExperimentAborted {
			return nil
		}
		if e.State == vocab.ExperimentFinished && !e.HoldsPools() {
			return fmt.Errorf("experiment %s finished (%s%s): nothing to abort: %w", id, e.Verdict, promotedText(e), ErrConflict)
		}
		a, err := lockActive(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE experiments SET state = 'aborted', ended_at = coalesce(ended_at, $2) WHERE id = $1`,
			id, at); err != nil {
			return err
		}
		detail := fmt.Sprintf("aborted by %s while %s", actor, e.State)
		if reason != "" {
			detail += ": " + reason
		}
		if _, err := insertExperimentEvent(ctx, tx, id, "", ExperimentEvent{At: at, Kind: ExperimentEventAborted, Detail: detail}); err != nil {
			return err
		}
		switched := e.SwitchedAt != nil || a.hash == e.CandidateHash
		if err := appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: actor, Action: AuditExperimentAbort, Subject: id,
			Reason: clipText(reason), Evidence: map[string]any{"state": e.State, "verdict": e.Verdict, "switched": switched,
				"active": a.hash, "baseline": e.BaselineHash, "candidate": e.CandidateHash}}); err != nil {
			return err
		}
		if !switched {
			return nil
		}
		_, err = restoreBaselineTx(ctx, tx, e, a, ExperimentEventReverted, AuditExperimentRevert,
			fmt.Sprintf("experiment %s (%s) aborted by %s", id, e.Spec.Name, actor), map[string]any{"aborted_by": actor}, nil, at)
		return err
	})
}

func promotedText(e *Experiment) string {
	if e.PromotedAt != nil {
		return ", promoted"
	}
	return ""
}

// PromoteExperiment makes the kept candidate of experiment id the new
// baseline, in one transaction: promoted_at at, a promoted event and
// AuditExperimentPromote by actor with reason; the candidate stays the
// active version, and the experiment no longer holds its pools. When
// another policy was applied meanwhile, the candidate cannot be promoted:
// the experiment ends aborted with a policy_changed event instead. A
// promoted experiment is returned unchanged; any other that is not
// finished kept is an error wrapping ErrConflict; an empty actor is
// ErrInvalid.
func (s *Store) PromoteExperiment(ctx context.Context, id, actor, reason string, at time.Time) (*Experiment, error) {
	if err := required("actor", actor); err != nil {
		return nil, fmt.Errorf("store: promote experiment %s: %w", id, err)
	}
	return s.experimentStep(ctx, "promote experiment", id, func(tx pgx.Tx, e *Experiment) error {
		if e.PromotedAt != nil {
			return nil
		}
		if e.State != vocab.ExperimentFinished || e.Verdict != vocab.VerdictKept {
			verdict := ""
			if e.Verdict != "" {
				verdict = " (" + string(e.Verdict) + ")"
			}
			return fmt.Errorf("experiment %s is %s%s: only a kept candidate can be promoted: %w", id, e.State, verdict, ErrConflict)
		}
		a, err := lockCandidateInForceTx(ctx, tx, e, "at the promotion", at)
		if a == nil || err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE experiments SET promoted_at = $2 WHERE id = $1`, id, at); err != nil {
			return err
		}
		detail := fmt.Sprintf("promoted by %s: candidate %s is the new baseline (active %s)", actor,
			shortHash(e.CandidateHash), shortHash(a.hash))
		if reason != "" {
			detail += ": " + reason
		}
		if _, err := insertExperimentEvent(ctx, tx, id, "", ExperimentEvent{At: at, Kind: ExperimentEventPromoted, Detail: detail}); err != nil {
			return err
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: actor, Action: AuditExperimentPromote, Subject: id,
			Reason: clipText(reason), Evidence: map[string]any{"candidate": e.CandidateHash, "baseline": e.BaselineHash,
				"active": a.hash}})
	})
}

// expectedText renders the expected result's metric on m: "experiment tier
// longest_wait_s = 5400 s (12 jobs)".
func expectedText(s *experiment.Spec, m *experiment.Measurement) string {
	x := s.Expected
	v, n, err := m.Value(x.Metric, x.Target)
	what := targetText(x.Target) + " " + x.Metric
	if err != nil {
		return what + ": " + err.Error()
	}
	return fmt.Sprintf("%s = %s (%s)", what, valueText(v, x.Metric), jobsText(n))
}

// conditionName is a condition's name, or its rendered predicate.
func conditionName(c experiment.Condition) string {
	if c.Name != "" {
		return c.Name
	}
	return c.Label()
}

// targetText names a target: "experiment tier", "queue batch", "total".
func targetText(t experiment.Target) string {
	switch {
	case t.Tier != "":
		return t.Tier + " tier"
	case t.Queue != "":
		return "queue " + t.Queue
	}
	return "total"
}

// valueText renders a metric's value with its unit; "none" when undefined.
func valueText(v *float64, metric string) string {
	if v == nil {
		return "none"
	}
	// Four significant digits, written out in full (no exponent).
	r, _ := strconv.ParseFloat(strconv.FormatFloat(*v, 'g', 4, 64), 64)
	s := strconv.FormatFloat(r, 'f', -1, 64)
	if info, ok := experiment.LookupMetric(metric); ok && info.Unit != "" && info.Unit != "ratio" && info.Unit != "count" && info.Unit != "jobs" {
		s += " " + info.Unit
	}
	return s
}

// windowText renders [from, to) as "2026-11-30T09:00:00Z..2026-11-30T10:00:00Z".
func windowText(from, to time.Time) string {
	return from.UTC().Format(time.RFC3339) + ".." + to.UTC().Format(time.RFC3339)
}

// jobsText is "1 job" or "n jobs".
func jobsText(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}

// verdictText is a verdict event's sentence: "verdict kept — <reason>",
// the verdict word not repeated when the reason starts with it (as an
// outcome decided before experiment.Decide dropped that prefix does:
// "rolled back: …", "inconclusive: …").
func verdictText(out *experiment.Outcome) string {
	reason := out.Reason
	for _, w := range []string{string(out.Verdict), strings.ReplaceAll(string(out.Verdict), "_", " ")} {
		reason = strings.TrimPrefix(reason, w+": ")
	}
	return "verdict " + string(out.Verdict) + " — " + reason
}
