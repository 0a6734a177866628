package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// This file holds the quota action flow (docs/design.md §3 "Act on a wait",
// §4): setting a project's quota in a pool, which is a policy change — a
// policy version derived from the active one, with only that quota changed,
// stored, activated and audited — and quota requests, which a project files
// and an admin approves (the quota changes, as SetQuota does) or denies.

// Audit actions of this file.
const (
	AuditSetQuota            = "set_quota"             // subject pool/project; evidence: before/after {nominal_milli, borrowing_limit_milli} (before null: no quota), policy/previous_policy hashes, request_id when an approval
	AuditRequestQuota        = "request_quota"         // subject the request ID; evidence: pool, project, current and wanted quota
	AuditApproveQuotaRequest = "approve_quota_request" // subject the request ID; evidence: before/after quota, policy hash
	AuditDenyQuotaRequest    = "deny_quota_request"    // subject the request ID; evidence: the quota (unchanged) and what was wanted
)

// MaxQuotaText bounds a quota change's reason and a decision's comment, in
// bytes; the reasons the store composes from them are cut to it (clipText).
const MaxQuotaText = 1024

// QuotaChange is one quota to set: the project's nominal quota and borrowing
// limit in the pool, in milli-GPU, with who sets it and why.
type QuotaChange struct {
	Pool                string
	Project             string
	NominalMilli        int64
	BorrowingLimitMilli int64
	Actor               string
	Reason              string
	// Evidence is added to the set_quota audit entry's evidence (nil: none),
	// e.g. the policy experiment an admin overrode (override_experiment,
	// override_reason; docs/design.md §4, "Experiments").
	Evidence map[string]any
}

// QuotaChangeResult is what SetQuota did: Before is the stored quota before
// (nil: the project had none in the pool, i.e. was unlimited there), After
// the quota now; PreviousPolicy and Policy are the hashes of the policy
// version active before and after (equal when the policy already had the
// quota). Changed is false when nothing was written.
type QuotaChangeResult struct {
	Changed        bool
	Before         *scheduling.Quota
	After          scheduling.Quota
	PreviousPolicy string
	Policy         string
}

// SetQuota sets a project's quota in a pool as a policy change, in one
// transaction: it decodes the active policy version, derives from it the
// version in which only this quota differs (policy.WithQuota), stores that
// version (derived_from the active one, base_hash the file version the
// chain started from), activates it (audited as AuditActivatePolicy),
// upserts the quota the scheduler's snapshot reads, and audits
// AuditSetQuota with before and after. The next scheduling cycle plans with
// it; the service's policy in force follows the active version (§4). Setting
// the values the quota already has changes and audits nothing. Errors: a
// quota policy.ValidateQuota refuses, an unknown pool, an empty actor or
// reason, a reason over MaxQuotaText (ErrInvalid naming the field: project,
// pool, nominal_milli, borrowing_limit_milli, actor, reason); no active
// policy version (ErrConflict); database errors; all wrapped with "set
// quota".
func (s *Store) SetQuota(ctx context.Context, c QuotaChange) (*QuotaChangeResult, error) {
	if err := validQuotaChange(c); err != nil {
		return nil, fmt.Errorf("store: set quota: %w", err)
	}
	var res *QuotaChangeResult
	err := s.inTx(ctx, "set quota "+c.Pool+"/"+c.Project, func(tx pgx.Tx) error {
		var err error
		res, err = setQuotaTx(ctx, tx, c, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// validQuotaChange checks what SetQuota can check without the database.
func validQuotaChange(c QuotaChange) error {
	if field, msg := policy.ValidateQuota(policy.Quota{Project: c.Project, Pool: c.Pool,
		NominalMilli: c.NominalMilli, BorrowingLimitMilli: c.BorrowingLimitMilli}); field != "" {
		return invalidf(field, "%s %s", field, msg)
	}
	if err := required("actor", c.Actor, "reason", c.Reason); err != nil {
		return err
	}
	return textField("reason", c.Reason)
}

// textField checks a free-text field: valid UTF-8, at most MaxQuotaText bytes.
func textField(field, v string) error {
	switch {
	case len(v) > MaxQuotaText:
		return invalidf(field, "%s is longer than %d bytes", field, MaxQuotaText)
	case !utf8.ValidString(v):
		return invalidf(field, "%s is not valid UTF-8", field)
	}
	return nil
}

// clipMarker ends a text clipText cut.
const clipMarker = "…"

// clipText bounds a reason the store composes from bounded parts (an
// approval's comment and the request's reason, a quota change's reason
// with who set it) to MaxQuotaText bytes, as each audited reason is: a
// longer one is cut at a rune boundary and ends with clipMarker.
func clipText(v string) string {
	if len(v) <= MaxQuotaText {
		return v
	}
	end := MaxQuotaText - len(clipMarker)
	for end > 0 && !utf8.RuneStart(v[end]) {
		end--
	}
	return v[:end] + clipMarker
}

// knownPoolTx returns an ErrInvalid naming "pool" unless the pool exists.
func knownPoolTx(ctx context.Context, tx pgx.Tx, pool string) error {
	var known bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pools WHERE name = $1)`, pool).Scan(&known); err != nil {
		return err
	}
	if !known {
		return invalidf("pool", "pool %q is not in the inventory", pool)
	}
	return nil
}

// storedQuotaTx returns the stored quota of (project, pool), locked, or nil.
func storedQuotaTx(ctx context.Context, tx pgx.Tx, pool, project string) (*scheduling.Quota, error) {
	q := scheduling.Quota{Project: project, Pool: pool}
	err := tx.QueryRow(ctx, `SELECT nominal_milli, borrowing_limit_milli FROM quotas WHERE project = $1 AND pool = $2 FOR UPDATE`,
		project, pool).Scan(&q.NominalMilli, &q.BorrowingLimitMilli)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &q, nil
}

// quotaDoc is a quota as the audit evidence records it; nil for no quota.
func quotaDoc(q *scheduling.Quota) map[string]any {
	if q == nil {
		return nil
	}
	return map[string]any{"nominal_milli": q.NominalMilli, "borrowing_limit_milli": q.BorrowingLimitMilli}
}

// maxActiveLockAttempts bounds how often setQuotaTx retries locking the
// active policy version that concurrent switches keep moving.
const maxActiveLockAttempts = 32

// lockActiveVersionTx locks the active policy version's row in tx (FOR
// UPDATE: no other switch, quota change or quota sync commits until tx
// ends) and returns its hash, its base hash (its own for a file-loaded
// version) and its decoded policy. Errors: no active version (ErrNotFound),
// a body that does not decode to its hash, database errors.
func lockActiveVersionTx(ctx context.Context, tx pgx.Tx) (hash, base string, p *policy.Policy, err error) {
	var body []byte
	// A concurrent switch (another quota change, a reload) that commits
	// while this lock waits leaves the locked row inactive, and the
	// statement then returns no row: a fresh statement sees the new active
	// version, unless there is none at all.
	for range maxActiveLockAttempts {
		err = tx.QueryRow(ctx, `SELECT hash, body, coalesce(base_hash, hash) FROM policy_versions WHERE active FOR UPDATE`).
			Scan(&hash, &body, &base)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
		var exists bool
		if qerr := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM policy_versions WHERE active)`).Scan(&exists); qerr != nil {
			return "", "", nil, qerr
		} else if !exists {
			break
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil, fmt.Errorf("no active policy version: %w", ErrNotFound)
	}
	if err != nil {
		return "", "", nil, err
	}
	if p, err = policy.FromCanonical(body); err != nil {
		return "", "", nil, fmt.Errorf("active policy version %s: %w", hash, err)
	}
	if p.Hash() != hash {
		return "", "", nil, fmt.Errorf("active policy version %s decodes to %s: it cannot be derived from exactly", hash, p.Hash())
	}
	return hash, base, p, nil
}

// setQuotaTx is SetQuota in tx; c.Evidence, then extra, are added to the
// set_quota evidence.
func setQuotaTx(ctx context.Context, tx pgx.Tx, c QuotaChange, extra map[string]any) (*QuotaChangeResult, error) {
	if err := knownPoolTx(ctx, tx, c.Pool); err != nil {
		return nil, err
	}
	activeHash, base, active, err := lockActiveVersionTx(ctx, tx)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("no active policy version to derive the quota change from (serve stores one at start): %w", ErrConflict)
	}
	if err != nil {
		return nil, err
	}
	before, err := storedQuotaTx(ctx, tx, c.Pool, c.Project)
	if err != nil {
		return nil, err
	}
	after := scheduling.Quota{Project: c.Project, Pool: c.Pool, NominalMilli: c.NominalMilli, BorrowingLimitMilli: c.BorrowingLimitMilli}
	derived, _ := active.WithQuota(policy.Quota{Project: c.Project, Pool: c.Pool,
		NominalMilli: c.NominalMilli, BorrowingLimitMilli: c.BorrowingLimitMilli})
	res := &QuotaChangeResult{Before: before, After: after, PreviousPolicy: activeHash, Policy: derived.Hash()}
	if res.Policy == activeHash && before != nil && *before == after {
		return res, nil
	}
	res.Changed = true
	now := time.Now()
	if res.Policy != activeHash {
		if _, err := tx.Exec(ctx, `INSERT INTO policy_versions (hash, body) VALUES ($1, $2)
			ON CONFLICT (hash) DO NOTHING`, res.Policy, derived.Canonical()); err != nil {
			return nil, err
		}
		why := clipText(fmt.Sprintf("quota of %s in %s set by %s: %s", c.Project, c.Pool, c.Actor, c.Reason))
		if err := activateDerivedTx(ctx, tx, res.Policy, activeHash, base, c.Actor, why, nil); err != nil {
			return nil, err
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO quotas (project, pool, nominal_milli, borrowing_limit_milli, updated_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (project, pool) DO UPDATE SET nominal_milli = EXCLUDED.nominal_milli,
			borrowing_limit_milli = EXCLUDED.borrowing_limit_milli, updated_at = EXCLUDED.updated_at`,
		c.Project, c.Pool, c.NominalMilli, c.BorrowingLimitMilli, now); err != nil {
		return nil, err
	}
	ev := map[string]any{"pool": c.Pool, "project": c.Project, "before": quotaDoc(before), "after": quotaDoc(&after),
		"previous_policy": activeHash, "policy": res.Policy}
	for _, m := range []map[string]any{c.Evidence, extra} {
		for k, v := range m {
			ev[k] = v
		}
	}
	return res, appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: c.Actor, Action: AuditSetQuota,
		Subject: c.Pool + "/" + c.Project, Reason: c.Reason, Evidence: ev})
}

// QuotaRequest is one project's request for more quota in a pool
// (quota_requests), in milli-GPU.
type QuotaRequest struct {
	ID      string `db:"id"`
	Pool    string `db:"pool"`
	Project string `db:"project"`
	// NominalMilli is the nominal quota asked for.
	NominalMilli int64 `db:"nominal_milli"`
	// BorrowingLimitMilli is the borrowing limit asked for; nil keeps the
	// limit the quota has when the request is approved.
	BorrowingLimitMilli *int64                  `db:"borrowing_limit_milli"`
	Reason              string                  `db:"reason"`
	RequestedBy         string                  `db:"requested_by"`
	RequestedAt         time.Time               `db:"requested_at"`
	State               vocab.QuotaRequestState `db:"state"`
	DecidedBy           *string                 `db:"decided_by"`
	DecidedAt           *time.Time              `db:"decided_at"`
	DecisionComment     *string                 `db:"decision_comment"`
	// PolicyHash is the policy version active after the approval; nil
	// unless approved.
	PolicyHash *string `db:"policy_hash"`
}

// NewQuotaRequest is what a project asks for: the nominal quota (and
// optionally the borrowing limit) it wants in a pool, and why.
type NewQuotaRequest struct {
	Pool                string
	Project             string
	NominalMilli        int64
	BorrowingLimitMilli *int64
	Reason              string
	Actor               string
}

const quotaRequestColumns = `id, pool, project, nominal_milli, borrowing_limit_milli, reason, requested_by, requested_at,
	state, decided_by, decided_at, decision_comment, policy_hash`

// utc returns r with its times in UTC.
func (r QuotaRequest) utc() QuotaRequest {
	r.RequestedAt = r.RequestedAt.UTC()
	r.DecidedAt = utcPtr(r.DecidedAt)
	return r
}

// CreateQuotaRequest stores a pending quota request and audits it
// (AuditRequestQuota, with the current and the wanted quota) in one
// transaction. Errors: a quota policy.ValidateQuota refuses (the borrowing
// limit only when given), an unknown pool, an empty reason or actor, a
// reason over MaxQuotaText (ErrInvalid naming the field: project, pool,
// nominal_milli, borrowing_limit_milli, reason, actor), database errors;
// all wrapped with "create quota request".
func (s *Store) CreateQuotaRequest(ctx context.Context, nr NewQuotaRequest) (*QuotaRequest, error) {
	var borrow int64
	if nr.BorrowingLimitMilli != nil {
		borrow = *nr.BorrowingLimitMilli
	}
	if err := validQuotaChange(QuotaChange{Pool: nr.Pool, Project: nr.Project, NominalMilli: nr.NominalMilli,
		BorrowingLimitMilli: borrow, Actor: nr.Actor, Reason: nr.Reason}); err != nil {
		return nil, fmt.Errorf("store: create quota request: %w", err)
	}
	var out QuotaRequest
	err := s.inTx(ctx, "create quota request", func(tx pgx.Tx) error {
		if err := knownPoolTx(ctx, tx, nr.Pool); err != nil {
			return err
		}
		current, err := storedQuotaTx(ctx, tx, nr.Pool, nr.Project)
		if err != nil {
			return err
		}
		id := newID("qr-")
		rows, _ := tx.Query(ctx, `INSERT INTO quota_requests (id, pool, project, nominal_milli, borrowing_limit_milli, reason, requested_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+quotaRequestColumns,
			id, nr.Pool, nr.Project, nr.NominalMilli, nr.BorrowingLimitMilli, nr.Reason, nr.Actor)
		if out, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[QuotaRequest]); err != nil {
			return err
		}
		wanted := map[string]any{"nominal_milli": nr.NominalMilli, "borrowing_limit_milli": nr.BorrowingLimitMilli}
		return appendAuditTx(ctx, tx, AuditEntry{At: out.RequestedAt, Actor: nr.Actor, Action: AuditRequestQuota, Subject: id,
			Reason: nr.Reason, Evidence: map[string]any{"pool": nr.Pool, "project": nr.Project,
				"before": quotaDoc(current), "wanted": wanted}})
	})
	if err != nil {
		return nil, err
	}
	out = out.utc()
	return &out, nil
}

// GetQuotaRequest returns one quota request, or an error wrapping
// ErrNotFound.
func (s *Store) GetQuotaRequest(ctx context.Context, id string) (*QuotaRequest, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+quotaRequestColumns+` FROM quota_requests WHERE id = $1`, id)
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[QuotaRequest])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: quota request %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: quota request %s: %w", id, err)
	}
	r = r.utc()
	return &r, nil
}

// QuotaRequestFilter selects quota requests; empty fields match every
// request. Limit defaults to DefaultListLimit and is capped at MaxListLimit.
type QuotaRequestFilter struct {
	State   vocab.QuotaRequestState
	Project string
	Pool    string
	Limit   int
}

// ListQuotaRequests returns the requests matching f, newest first.
func (s *Store) ListQuotaRequests(ctx context.Context, f QuotaRequestFilter) ([]QuotaRequest, error) {
	limit := pageLimit(f.Limit)
	rows, err := queryAll[QuotaRequest](ctx, s.pool, `SELECT `+quotaRequestColumns+` FROM quota_requests
		WHERE ($1 = '' OR state = $1) AND ($2 = '' OR project = $2) AND ($3 = '' OR pool = $3)
		ORDER BY requested_at DESC, id DESC LIMIT $4`, string(f.State), f.Project, f.Pool, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list quota requests: %w", err)
	}
	for i := range rows {
		rows[i] = rows[i].utc()
	}
	return rows, nil
}

// DecideQuotaRequest approves or denies a pending quota request with a
// comment, in one transaction. Approval sets the quota as SetQuota does
// (the asked nominal quota; the asked borrowing limit, or the current one
// when the request names none, 0 for a project without a quota), with the
// request's ID in the set_quota evidence and as reason "quota request <id>
// approved: <comment> (asked: <reason>)", cut to MaxQuotaText, and audits
// AuditApproveQuotaRequest with before and after; denial changes no quota
// and audits AuditDenyQuotaRequest. It returns the decided request and, for
// an approval, what the quota change did. Errors: an empty actor or
// comment, a comment over MaxQuotaText (ErrInvalid naming "actor" or
// "comment"), an unknown request (ErrNotFound), a request already decided
// (ErrConflict), SetQuota's errors for an approval, database errors; all
// wrapped with "decide quota request".
func (s *Store) DecideQuotaRequest(ctx context.Context, id string, approve bool, actor, comment string) (*QuotaRequest, *QuotaChangeResult, error) {
	return s.DecideQuotaRequestWith(ctx, id, approve, actor, comment, nil)
}

// DecideQuotaRequestWith is DecideQuotaRequest with evidence (nil: none)
// added to the decision's audit entry and, for an approval, to its
// set_quota entry — e.g. the policy experiment an admin overrode
// (override_experiment, override_reason; docs/design.md §4,
// "Experiments"). Errors as DecideQuotaRequest's.
func (s *Store) DecideQuotaRequestWith(ctx context.Context, id string, approve bool, actor, comment string, evidence map[string]any) (*QuotaRequest, *QuotaChangeResult, error) {
	if err := required("actor", actor, "comment", comment); err != nil {
		return nil, nil, fmt.Errorf("store: decide quota request: %w", err)
	}
	if err := textField("comment", comment); err != nil {
		return nil, nil, fmt.Errorf("store: decide quota request: %w", err)
	}
	var out QuotaRequest
	var change *QuotaChangeResult
	err := s.inTx(ctx, "decide quota request "+id, func(tx pgx.Tx) error {
		change = nil
		rows, _ := tx.Query(ctx, `SELECT `+quotaRequestColumns+` FROM quota_requests WHERE id = $1 FOR UPDATE`, id)
		r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[QuotaRequest])
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("quota request %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if r.State != vocab.QuotaRequestPending {
			return fmt.Errorf("quota request %s is %s, not pending: %w", id, r.State, ErrConflict)
		}
		current, err := storedQuotaTx(ctx, tx, r.Pool, r.Project)
		if err != nil {
			return err
		}
		state, action := vocab.QuotaRequestDenied, AuditDenyQuotaRequest
		var policyHash *string
		ev := map[string]any{"pool": r.Pool, "project": r.Project, "before": quotaDoc(current),
			"wanted": map[string]any{"nominal_milli": r.NominalMilli, "borrowing_limit_milli": r.BorrowingLimitMilli}}
		for k, v := range evidence {
			ev[k] = v
		}
		if approve {
			state, action = vocab.QuotaRequestApproved, AuditApproveQuotaRequest
			borrow := int64(0)
			switch {
			case r.BorrowingLimitMilli != nil:
				borrow = *r.BorrowingLimitMilli
			case current != nil:
				borrow = current.BorrowingLimitMilli
			}
			change, err = setQuotaTx(ctx, tx, QuotaChange{Pool: r.Pool, Project: r.Project, NominalMilli: r.NominalMilli,
				BorrowingLimitMilli: borrow, Actor: actor, Evidence: evidence,
				Reason: clipText(fmt.Sprintf("quota request %s approved: %s (asked: %s)", id, comment, r.Reason))},
				map[string]any{"request_id": id})
			if err != nil {
				return err
			}
			policyHash = &change.Policy
			ev["after"], ev["policy"] = quotaDoc(&change.After), change.Policy
		} else {
			ev["after"] = quotaDoc(current)
		}
		now := time.Now()
		rows, _ = tx.Query(ctx, `UPDATE quota_requests SET state = $2, decided_by = $3, decided_at = $4, decision_comment = $5, policy_hash = $6
			WHERE id = $1 RETURNING `+quotaRequestColumns, id, string(state), actor, now, comment, policyHash)
		if out, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[QuotaRequest]); err != nil {
			return err
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: action, Subject: id, Reason: comment, Evidence: ev})
	})
	if err != nil {
		return nil, nil, err
	}
	out = out.utc()
	return &out, change, nil
}

// SyncQuotas makes the stored quotas (what the snapshot reads) exactly the
// active policy version's (docs/design.md §4), read with that version's
// row locked in the same transaction: a quota change (SetQuota, an
// approval) that committed after the caller activated a version derived
// its own version from it, which is then the active one, and is kept. It
// deletes the stored quotas the version leaves out, inserts or updates the
// others, and audits each quota that changed (AuditSetQuota, actor and
// reason as given, before and after, and the policy hash; after null for a
// removed quota, which leaves the project unlimited in the pool), in one
// transaction. It returns the changed pairs as "pool/project", sorted.
// Repeating the call changes nothing. A duplicate (project, pool) pair
// keeps its first entry, as the scheduler does. Errors: an empty actor
// (ErrInvalid), no active version (ErrNotFound), database errors; wrapped
// with "sync quotas".
func (s *Store) SyncQuotas(ctx context.Context, actor, reason string) ([]string, error) {
	if err := required("actor", actor); err != nil {
		return nil, fmt.Errorf("store: sync quotas: %w", err)
	}
	var changed []string
	err := s.inTx(ctx, "sync quotas", func(tx pgx.Tx) error {
		changed = nil
		hash, _, active, err := lockActiveVersionTx(ctx, tx)
		if err != nil {
			return err
		}
		quotas := active.SchedulingQuotas()
		rows, err := tx.Query(ctx, `SELECT project, pool, nominal_milli, borrowing_limit_milli FROM quotas
			ORDER BY project COLLATE "C", pool COLLATE "C" FOR UPDATE`)
		if err != nil {
			return err
		}
		stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (scheduling.Quota, error) {
			var q scheduling.Quota
			err := r.Scan(&q.Project, &q.Pool, &q.NominalMilli, &q.BorrowingLimitMilli)
			return q, err
		})
		if err != nil {
			return err
		}
		type key struct{ pool, project string }
		old := make(map[key]scheduling.Quota, len(stored))
		for _, q := range stored {
			old[key{q.Pool, q.Project}] = q
		}
		want := make(map[key]scheduling.Quota, len(quotas))
		var order []key
		for _, q := range quotas {
			k := key{q.Pool, q.Project}
			if _, dup := want[k]; !dup {
				want[k] = q
				order = append(order, k)
			}
		}
		for _, q := range stored {
			k := key{q.Pool, q.Project}
			if _, ok := want[k]; !ok {
				order = append(order, k)
			}
		}
		slices.SortFunc(order, func(a, b key) int { return cmp.Or(cmp.Compare(a.pool, b.pool), cmp.Compare(a.project, b.project)) })
		now := time.Now()
		for _, k := range order {
			before, had := old[k]
			after, keep := want[k]
			var beforeDoc, afterDoc map[string]any
			switch {
			case had && keep && before == after:
				continue
			case keep:
				if _, err := tx.Exec(ctx, `INSERT INTO quotas (project, pool, nominal_milli, borrowing_limit_milli, updated_at)
					VALUES ($1, $2, $3, $4, $5)
					ON CONFLICT (project, pool) DO UPDATE SET nominal_milli = EXCLUDED.nominal_milli,
						borrowing_limit_milli = EXCLUDED.borrowing_limit_milli, updated_at = EXCLUDED.updated_at`,
					k.project, k.pool, after.NominalMilli, after.BorrowingLimitMilli, now); err != nil {
					return err
				}
				afterDoc = quotaDoc(&after)
			default:
				if _, err := tx.Exec(ctx, `DELETE FROM quotas WHERE project = $1 AND pool = $2`, k.project, k.pool); err != nil {
					return err
				}
			}
			if had {
				beforeDoc = quotaDoc(&before)
			}
			subject := k.pool + "/" + k.project
			changed = append(changed, subject)
			if err := appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: AuditSetQuota, Subject: subject, Reason: reason,
				Evidence: map[string]any{"pool": k.pool, "project": k.project, "before": beforeDoc, "after": afterDoc, "policy": hash}}); err != nil {
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

// LoadQuotaAccounting returns what scheduling.QuotaLedger reads, from one
// read-only repeatable-read transaction (one instant): the stored quotas
// (by project then pool), the active allocations of placed and running jobs
// (ID, job, pool, node and GPU shares in milli-GPU; by job ID) and those
// jobs as Running entries with ID, project, pool and allocation. It is
// the quota ledger's source for GET /v1/quotas: LoadSnapshot's
// accounting, read without the inventory, the pending jobs or
// LoadSnapshot's cache (and its lock), so a reader never delays the
// scheduler's snapshot. Errors are wrapped with "load quota accounting".
func (s *Store) LoadQuotaAccounting(ctx context.Context) (*scheduling.Snapshot, error) {
	snap := &scheduling.Snapshot{}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			snap.Quotas, snap.Allocations, snap.Running = nil, nil, nil
			return runQueries(ctx, tx, []rowQuery{
				{sql: `SELECT project, pool, nominal_milli, borrowing_limit_milli FROM quotas
					ORDER BY project COLLATE "C", pool COLLATE "C"`, fn: func(rows pgx.Rows) error {
					var q scheduling.Quota
					err := rows.Scan(&q.Project, &q.Pool, &q.NominalMilli, &q.BorrowingLimitMilli)
					snap.Quotas = append(snap.Quotas, q)
					return err
				}},
				{sql: `SELECT a.id, a.job_id, a.pool, a.node, a.gpu_uuids, a.gpu_milli, j.project
					FROM allocations a
					JOIN job_queue q ON q.job_id = a.job_id AND q.state IN ('placed', 'running')
					JOIN jobs j ON j.id = a.job_id
					WHERE a.released_at IS NULL
					ORDER BY a.job_id`, fn: func(rows pgx.Rows) error {
					var a scheduling.Allocation
					var r scheduling.RunningJob
					var uuids []string
					var milli []int32
					if err := rows.Scan(&a.ID, &a.JobID, &a.Pool, &a.Node, &uuids, &milli, &r.Project); err != nil {
						return err
					}
					if len(uuids) != len(milli) {
						return fmt.Errorf("allocation %s: %d GPUs but %d shares", a.ID, len(uuids), len(milli))
					}
					a.GPUs = make([]scheduling.GPUShare, len(uuids))
					for i := range uuids {
						a.GPUs[i] = scheduling.GPUShare{UUID: uuids[i], Milli: int(milli[i])}
					}
					r.ID, r.Request.Pool, r.Allocation = a.JobID, a.Pool, a
					snap.Allocations = append(snap.Allocations, a)
					snap.Running = append(snap.Running, r)
					return nil
				}},
			})
		})
	if err != nil {
		return nil, fmt.Errorf("store: load quota accounting: %w", err)
	}
	return snap, nil
}
