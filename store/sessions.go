package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ConsoleSession is one row of console_sessions: a web console sign-in
// (docs/design.md §2 "Web console"). Only digests are kept: IDDigest is the
// SHA-256 of the session ID in the browser's cookie, TokenDigest the SHA-256
// of the API token the session acts as (api.TokenDigest).
type ConsoleSession struct {
	IDDigest    []byte    `db:"id_digest"`
	TokenDigest []byte    `db:"token_digest"`
	CreatedAt   time.Time `db:"created_at"`
	ExpiresAt   time.Time `db:"expires_at"`
}

// CreateConsoleSession stores sess and deletes every session that expired
// before sess.CreatedAt, in one transaction. Digests that are not 32 bytes
// or an expiry not after the creation are ErrInvalid; an ID digest already
// stored is ErrConflict. Errors are wrapped with "create console session".
func (s *Store) CreateConsoleSession(ctx context.Context, sess ConsoleSession) error {
	switch {
	case len(sess.IDDigest) != 32 || len(sess.TokenDigest) != 32:
		return fmt.Errorf("store: create console session: %w: digests must be 32 bytes", ErrInvalid)
	case !sess.ExpiresAt.After(sess.CreatedAt):
		return fmt.Errorf("store: create console session: %w: expires_at must be after created_at", ErrInvalid)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at <= $1`, sess.CreatedAt); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO console_sessions (id_digest, token_digest, created_at, expires_at)
			VALUES ($1, $2, $3, $4) ON CONFLICT (id_digest) DO NOTHING`,
			sess.IDDigest, sess.TokenDigest, sess.CreatedAt, sess.ExpiresAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: a session with this ID is already stored", ErrConflict)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: create console session: %w", err)
	}
	return nil
}

// LookupConsoleSession returns the session whose ID has digest idDigest and
// that has not expired at now, or ErrNotFound. Errors are wrapped with
// "lookup console session".
func (s *Store) LookupConsoleSession(ctx context.Context, idDigest []byte, now time.Time) (*ConsoleSession, error) {
	sess, err := queryOne[ConsoleSession](ctx, s.pool,
		`SELECT id_digest, token_digest, created_at, expires_at FROM console_sessions WHERE id_digest = $1 AND expires_at > $2`,
		idDigest, now)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: lookup console session: %w", ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: lookup console session: %w", err)
	}
	return &sess, nil
}

// DeleteConsoleSession removes the session whose ID has digest idDigest (a
// sign-out); deleting one that is not stored is no error. Errors are
// wrapped with "delete console session".
func (s *Store) DeleteConsoleSession(ctx context.Context, idDigest []byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_digest = $1`, idDigest); err != nil {
		return fmt.Errorf("store: delete console session: %w", err)
	}
	return nil
}
