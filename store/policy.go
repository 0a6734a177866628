package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/policy"
)

// PolicyVersion is one immutable, hashed set of scheduling rules.
type PolicyVersion struct {
	Hash      string
	Body      json.RawMessage
	CreatedAt time.Time
	Active    bool
	// DerivedFrom is the version that was active when this one was last
	// activated through the store (a quota change, SetQuota; a version
	// applied through the API or an experiment, ActivatePolicy); "" for a
	// version loaded from the policy file.
	DerivedFrom string
	// BaseHash is the file-loaded version the chain of derivations started
	// from; "" for a version loaded from the policy file. A restart on the
	// file whose hash this is keeps the version (docs/design.md §4).
	BaseHash string
}

// SavePolicyVersion stores a policy version under its content hash. Saving
// the same hash again is a no-op when the body is the same JSON value (retries
// are safe) and an error wrapping ErrConflict when it differs, because policy
// versions are immutable.
func (s *Store) SavePolicyVersion(ctx context.Context, hash string, body json.RawMessage) error {
	if hash == "" {
		return fmt.Errorf("store: save policy version: %w", invalidf("hash", "hash is required"))
	}
	if !json.Valid(body) {
		return fmt.Errorf("store: save policy version %s: %w", hash, invalidf("body", "body must be a JSON document"))
	}
	// Two statements: the second one's fresh snapshot sees a row that a
	// concurrent saver committed while our insert waited on it.
	if _, err := s.pool.Exec(ctx, `INSERT INTO policy_versions (hash, body) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`,
		hash, []byte(body)); err != nil {
		return fmt.Errorf("store: save policy version %s: %w", hash, err)
	}
	var same bool
	if err := s.pool.QueryRow(ctx, `SELECT body = $2::jsonb FROM policy_versions WHERE hash = $1`, hash, []byte(body)).
		Scan(&same); err != nil {
		return fmt.Errorf("store: save policy version %s: %w", hash, err)
	}
	if !same {
		return fmt.Errorf("store: save policy version %s: stored with a different body: %w", hash, ErrConflict)
	}
	return nil
}

// AuditActivatePolicy is the audit action of a policy version switch
// (evidence: previous, the hash that was active before).
const AuditActivatePolicy = "activate_policy"

// ActivatePolicyVersion makes hash the only active policy version as a
// version loaded from the policy file — its own base: its derived_from and
// base_hash are cleared, so a version the API derives from it next records
// it as the base (docs/design.md §4, restart rule) — and audits the switch
// (action AuditActivatePolicy). Activating the active version changes
// nothing else and audits nothing. Errors wrap ErrNotFound or database
// errors.
func (s *Store) ActivatePolicyVersion(ctx context.Context, hash, actor, reason string) error {
	return s.inTx(ctx, "activate policy version "+hash, func(tx pgx.Tx) error {
		var active bool
		err := tx.QueryRow(ctx, `SELECT active FROM policy_versions WHERE hash = $1 FOR UPDATE`, hash).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("policy version %s: %w", hash, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE policy_versions SET derived_from = NULL, base_hash = NULL
			WHERE hash = $1 AND (derived_from IS NOT NULL OR base_hash IS NOT NULL)`, hash); err != nil {
			return err
		}
		if active {
			return nil
		}
		return activatePolicyTx(ctx, tx, hash, actor, reason, nil)
	})
}

// activatePolicyTx switches the active version to hash (stored, not active)
// and audits the switch, in tx, with evidence (may be nil) merged with
// {"previous": the hash that was active, "" for none}.
func activatePolicyTx(ctx context.Context, tx pgx.Tx, hash, actor, reason string, evidence map[string]any) error {
	var previous string
	err := tx.QueryRow(ctx, `UPDATE policy_versions SET active = false WHERE active RETURNING hash`).Scan(&previous)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE policy_versions SET active = true WHERE hash = $1`, hash); err != nil {
		return err
	}
	ev := make(map[string]any, len(evidence)+1)
	for k, v := range evidence {
		ev[k] = v
	}
	ev["previous"] = previous
	return appendAuditTx(ctx, tx, AuditEntry{At: time.Now(), Actor: actor, Action: AuditActivatePolicy, Subject: hash,
		Reason: reason, Evidence: ev})
}

// activateDerivedTx makes the stored version hash active as a version
// derived from the active one, activeHash (base: its base hash, its own
// hash for a file-loaded one): it records that lineage on the version's
// row (derived_from activeHash, base_hash base) — the lineage of its
// latest activation, which the restart rule reads — or clears it when
// hash is the base itself (a switch back to the file's version), then
// switches and audits as activatePolicyTx. Every version the API or an
// experiment activates (ActivatePolicy, SetQuota) goes through it.
func activateDerivedTx(ctx context.Context, tx pgx.Tx, hash, activeHash, base, actor, reason string, evidence map[string]any) error {
	var err error
	if hash == base || activeHash == "" {
		_, err = tx.Exec(ctx, `UPDATE policy_versions SET derived_from = NULL, base_hash = NULL WHERE hash = $1`, hash)
	} else {
		_, err = tx.Exec(ctx, `UPDATE policy_versions SET derived_from = $2, base_hash = $3 WHERE hash = $1`, hash, activeHash, base)
	}
	if err != nil {
		return err
	}
	return activatePolicyTx(ctx, tx, hash, actor, reason, evidence)
}

// MaxPolicyReason bounds an ActivatePolicy reason, in bytes.
const MaxPolicyReason = MaxQuotaText

// ActivatePolicy stores body under hash (when body is non-nil, under
// SavePolicyVersion's rules: the same hash with another body is an error
// wrapping ErrConflict) and makes it the active version as a version
// derived from the active one — derived_from the active hash, base_hash
// the active's base_hash, or its hash when it has none; a switch back to
// that base makes it the file's version again, without lineage — audited
// as AuditActivatePolicy with actor, reason and evidence merged with
// {"previous": the active hash}, in one transaction that holds the active
// version's row lock (as SetQuota and SyncQuotas do). The lineage is
// written on the version's row even when it was stored before: it is the
// lineage of the version's latest activation, which the service's restart
// rule reads (docs/design.md §4). The body (given or stored) must decode
// (policy.FromCanonical) to a policy whose Hash is hash, since the service
// runs the active version decoded. With no active version the version is
// activated without lineage. Activating the active hash changes nothing
// and returns (false, nil). Errors: hash not 64 lower-case hex digits, an
// empty actor or reason, a reason over MaxPolicyReason, a body that is not
// the canonical JSON of a policy with this hash (ErrInvalid naming hash,
// actor, reason or body); hash unknown and no body (ErrNotFound); database
// errors; wrapped with "activate policy".
func (s *Store) ActivatePolicy(ctx context.Context, hash string, body json.RawMessage, actor, reason string, evidence map[string]any) (changed bool, err error) {
	if err := validActivation(hash, body, actor, reason); err != nil {
		return false, fmt.Errorf("store: activate policy %s: %w", hash, err)
	}
	err = s.inTx(ctx, "activate policy "+hash, func(tx pgx.Tx) error {
		var err error
		changed, err = activatePolicyInTx(ctx, tx, hash, body, actor, reason, evidence)
		return err
	})
	if err != nil {
		return false, err
	}
	return changed, nil
}

// activatePolicyInTx is ActivatePolicy's transaction in tx, its input
// already checked (validActivation): it returns whether the active
// version changed.
func activatePolicyInTx(ctx context.Context, tx pgx.Tx, hash string, body json.RawMessage, actor, reason string,
	evidence map[string]any) (bool, error) {
	activeHash, base, _, err := lockActiveVersionTx(ctx, tx)
	if errors.Is(err, ErrNotFound) {
		activeHash, base, err = "", "", nil
	}
	if err != nil {
		return false, err
	}
	if body != nil {
		if _, err := tx.Exec(ctx, `INSERT INTO policy_versions (hash, body) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING`,
			hash, []byte(body)); err != nil {
			return false, err
		}
	}
	var stored []byte
	var same bool
	err = tx.QueryRow(ctx, `SELECT body, $2::jsonb IS NULL OR body = $2::jsonb FROM policy_versions WHERE hash = $1`,
		hash, nullableJSON(body)).Scan(&stored, &same)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("policy version %s: %w", hash, ErrNotFound)
	}
	if err != nil {
		return false, err
	}
	if !same {
		return false, fmt.Errorf("policy version %s is stored with a different body: %w", hash, ErrConflict)
	}
	if body == nil {
		if err := canonicalBody(hash, stored); err != nil {
			return false, err
		}
	}
	if hash == activeHash {
		return false, nil
	}
	return true, activateDerivedTx(ctx, tx, hash, activeHash, base, actor, reason, evidence)
}

// validActivation checks what ActivatePolicy can check without the database.
func validActivation(hash string, body json.RawMessage, actor, reason string) error {
	if !fullHash(hash) {
		return invalidf("hash", "hash %q is not a policy version hash (64 lower-case hex digits)", hash)
	}
	if err := required("actor", actor, "reason", reason); err != nil {
		return err
	}
	if err := textField("reason", reason); err != nil {
		return err
	}
	if body != nil {
		return canonicalBody(hash, body)
	}
	return nil
}

// canonicalBody returns an ErrInvalid naming "body" unless body decodes to
// a policy whose Hash is hash.
func canonicalBody(hash string, body []byte) error {
	p, err := policy.FromCanonical(body)
	if err != nil {
		return invalidf("body", "body of policy version %s: %v", hash, err)
	}
	if h := p.Hash(); h != hash {
		return invalidf("body", "body of policy version %s decodes to a policy with hash %s", hash, h)
	}
	return nil
}

// nullableJSON is body as a query argument: nil for none.
func nullableJSON(body json.RawMessage) any {
	if body == nil {
		return nil
	}
	return []byte(body)
}

// fullHash reports whether h is a whole policy hash: 64 lower-case hex digits.
func fullHash(h string) bool {
	return len(h) == 64 && lowerHex(h)
}

// lowerHex reports whether h is non-empty and only lower-case hex digits.
func lowerHex(h string) bool {
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return h != ""
}

// MinPolicyPrefix is the fewest hex digits GetPolicyVersion accepts as a
// prefix of a policy hash.
const MinPolicyPrefix = 8

const policyVersionColumns = `hash, body, created_at, active, coalesce(derived_from, ''), coalesce(base_hash, '')`

// scanPolicyVersion scans one policyVersionColumns row.
func scanPolicyVersion(row pgx.Row) (PolicyVersion, error) {
	var p PolicyVersion
	err := row.Scan(&p.Hash, &p.Body, &p.CreatedAt, &p.Active, &p.DerivedFrom, &p.BaseHash)
	p.CreatedAt = p.CreatedAt.UTC()
	return p, err
}

// ListPolicyVersions returns the stored policy versions, newest first (by
// created_at, then hash), at most limit (DefaultListLimit when limit ≤ 0,
// capped at MaxListLimit). Errors: database errors, wrapped with "list
// policy versions".
func (s *Store) ListPolicyVersions(ctx context.Context, limit int) ([]PolicyVersion, error) {
	limit = pageLimit(limit)
	rows, err := s.pool.Query(ctx, `SELECT `+policyVersionColumns+` FROM policy_versions
		ORDER BY created_at DESC, hash DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: list policy versions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PolicyVersion, error) { return scanPolicyVersion(r) })
	if err != nil {
		return nil, fmt.Errorf("store: list policy versions: %w", err)
	}
	return out, nil
}

// GetPolicyVersion finds a version by its hash or a unique prefix of at
// least MinPolicyPrefix hex digits (upper-case digits are read as lower
// case). Errors: not hex or too short, or a prefix more than one version
// has (ErrInvalid naming "hash"; the message names two of the versions);
// no such version (ErrNotFound); database errors; wrapped with "policy
// version".
func (s *Store) GetPolicyVersion(ctx context.Context, hashOrPrefix string) (*PolicyVersion, error) {
	h := strings.ToLower(hashOrPrefix)
	if len(h) < MinPolicyPrefix || len(h) > 64 || !lowerHex(h) {
		return nil, fmt.Errorf("store: policy version %q: %w", hashOrPrefix, invalidf("hash",
			"hash %q is not a policy version hash or a prefix of one (%d to 64 hex digits)", hashOrPrefix, MinPolicyPrefix))
	}
	rows, err := s.pool.Query(ctx, `SELECT `+policyVersionColumns+` FROM policy_versions
		WHERE hash LIKE $1 || '%' ORDER BY hash LIMIT 2`, h)
	if err != nil {
		return nil, fmt.Errorf("store: policy version %s: %w", h, err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PolicyVersion, error) { return scanPolicyVersion(r) })
	switch {
	case err != nil:
		return nil, fmt.Errorf("store: policy version %s: %w", h, err)
	case len(found) == 0:
		return nil, fmt.Errorf("store: policy version %s: %w", h, ErrNotFound)
	case len(found) > 1:
		return nil, fmt.Errorf("store: policy version %s: %w", h, invalidf("hash",
			"hash prefix %s is ambiguous: it matches %s, %s and possibly more; give more digits", h, found[0].Hash, found[1].Hash))
	}
	return &found[0], nil
}

// ActivePolicyVersion returns the active policy version, or an error wrapping
// ErrNotFound when none is active.
func (s *Store) ActivePolicyVersion(ctx context.Context) (*PolicyVersion, error) {
	var p PolicyVersion
	err := s.pool.QueryRow(ctx, `SELECT hash, body, created_at, active, coalesce(derived_from, ''), coalesce(base_hash, '')
		FROM policy_versions WHERE active`).
		Scan(&p.Hash, &p.Body, &p.CreatedAt, &p.Active, &p.DerivedFrom, &p.BaseHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: active policy version: %w", ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: active policy version: %w", err)
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return &p, nil
}

// ActivePolicyHash returns the hash of the active policy version, or an
// error wrapping ErrNotFound when none is active: the cheap check the
// service makes each cycle to see whether the policy in force changed.
func (s *Store) ActivePolicyHash(ctx context.Context) (string, error) {
	var hash string
	err := s.pool.QueryRow(ctx, `SELECT hash FROM policy_versions WHERE active`).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store: active policy hash: %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: active policy hash: %w", err)
	}
	return hash, nil
}
