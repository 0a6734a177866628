package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PolicyVersion is one immutable, hashed set of scheduling rules.
type PolicyVersion struct {
	Hash      string
	Body      json.RawMessage
	CreatedAt time.Time
	Active    bool
	// DerivedFrom is the version a quota change through the API derived this
	// one from (SetQuota); "" for a version loaded from the policy file.
	DerivedFrom string
	// BaseHash is the file-loaded version the chain of derivations started
	// from; "" for a version loaded from the policy file.
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

// ActivatePolicyVersion makes hash the only active policy version and audits
// the switch (action AuditActivatePolicy). Activating the active version changes
// nothing. Errors wrap ErrNotFound or database errors.
func (s *Store) ActivatePolicyVersion(ctx context.Context, hash, actor, reason string) error {
	return s.inTx(ctx, "activate policy version "+hash, func(tx pgx.Tx) error {
		var active bool
		err := tx.QueryRow(ctx, `SELECT active FROM policy_versions WHERE hash = $1 FOR UPDATE`, hash).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("policy version %s: %w", hash, ErrNotFound)
		}
		if err != nil || active {
			return err
		}
		return activatePolicyTx(ctx, tx, hash, actor, reason)
	})
}

// activatePolicyTx switches the active version to hash (stored, not active)
// and audits the switch, in tx.
func activatePolicyTx(ctx context.Context, tx pgx.Tx, hash, actor, reason string) error {
	var previous string
	err := tx.QueryRow(ctx, `UPDATE policy_versions SET active = false WHERE active RETURNING hash`).Scan(&previous)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE policy_versions SET active = true WHERE hash = $1`, hash); err != nil {
		return err
	}
	return appendAuditTx(ctx, tx, AuditEntry{At: time.Now(), Actor: actor, Action: AuditActivatePolicy, Subject: hash,
		Reason: reason, Evidence: map[string]any{"previous": previous}})
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
