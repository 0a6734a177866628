package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// APIToken is one row of api_tokens: a bearer token made by `gpugov token
// create`, of which only the SHA-256 digest is kept (docs/design.md §2
// "API tokens"). Role is a vocab.Role; Node is set for agent tokens only.
type APIToken struct {
	ID        string     `db:"id"`
	Digest    []byte     `db:"digest"` // 32 bytes, SHA-256 of the token
	Name      string     `db:"name"`
	Project   string     `db:"project"`
	Role      string     `db:"role"`
	Node      string     `db:"node"`
	CreatedAt time.Time  `db:"created_at"`
	RevokedAt *time.Time `db:"revoked_at"`
}

const apiTokenColumns = `id, digest, name, project, role, node, created_at, revoked_at`

// CreateAPIToken stores t (ID assigned "t-…", CreatedAt now when zero) and its
// token_create audit entry, with actor, in one transaction. A digest
// already stored is ErrConflict; a missing name, project or role, a digest
// that is not 32 bytes, or a node given for a non-agent role (or missing for
// an agent) is ErrInvalid naming the field. Errors are wrapped with "create
// api token".
func (s *Store) CreateAPIToken(ctx context.Context, t APIToken, actor string) (*APIToken, error) {
	if err := required("name", t.Name, "project", t.Project, "role", t.Role); err != nil {
		return nil, fmt.Errorf("store: create api token: %w", err)
	}
	if len(t.Digest) != 32 {
		return nil, fmt.Errorf("store: create api token: %w: digest is %d bytes, want 32", ErrInvalid, len(t.Digest))
	}
	if (t.Role == "agent") != (t.Node != "") {
		return nil, fmt.Errorf("store: create api token: %w: node is required for role agent and only for it", ErrInvalid)
	}
	t.ID = newID("t-")
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO api_tokens (id, digest, name, project, role, node, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (digest) DO NOTHING`,
			t.ID, t.Digest, t.Name, t.Project, t.Role, t.Node, t.CreatedAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: a token with this digest is already stored", ErrConflict)
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: t.CreatedAt, Actor: actor, Action: AuditTokenCreate, Subject: t.ID,
			Evidence: map[string]any{"name": t.Name, "role": t.Role, "project": t.Project, "node": t.Node}})
	})
	if err != nil {
		return nil, fmt.Errorf("store: create api token: %w", err)
	}
	return &t, nil
}

// LookupAPIToken returns the live (unrevoked) token with digest, or
// ErrNotFound. Errors are wrapped with "lookup api token".
func (s *Store) LookupAPIToken(ctx context.Context, digest []byte) (*APIToken, error) {
	t, err := queryOne[APIToken](ctx, s.pool, `SELECT `+apiTokenColumns+` FROM api_tokens WHERE digest = $1 AND revoked_at IS NULL`, digest)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: lookup api token: %w", ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: lookup api token: %w", err)
	}
	return &t, nil
}

// ListAPITokens returns every token row, revoked ones too, oldest first.
// Errors are wrapped with "list api tokens".
func (s *Store) ListAPITokens(ctx context.Context) ([]APIToken, error) {
	out, err := queryAll[APIToken](ctx, s.pool, `SELECT `+apiTokenColumns+` FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("store: list api tokens: %w", err)
	}
	return out, nil
}

// RevokeAPIToken marks token id revoked at now and audits token_revoke with
// actor and reason; it returns whether this call revoked it (false: it was
// already revoked). An unknown id is ErrNotFound. Errors are wrapped with
// "revoke api token".
func (s *Store) RevokeAPIToken(ctx context.Context, id, actor, reason string, now time.Time) (bool, error) {
	var revoked bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		t, err := queryOne[APIToken](ctx, tx, `SELECT `+apiTokenColumns+` FROM api_tokens WHERE id = $1 FOR UPDATE`, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil || t.RevokedAt != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE api_tokens SET revoked_at = $2 WHERE id = $1`, id, now); err != nil {
			return err
		}
		revoked = true
		return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: AuditTokenRevoke, Subject: id, Reason: reason,
			Evidence: map[string]any{"name": t.Name, "role": t.Role, "project": t.Project, "node": t.Node}})
	})
	if err != nil {
		return false, fmt.Errorf("store: revoke api token: %w", err)
	}
	return revoked, nil
}
