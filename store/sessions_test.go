package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/gpugov/gpugov/store"
)

// TestConsoleSessions: a stored session is found by its ID's digest until
// it expires, never after; a second one with the same digest is a
// conflict, bad digests and expiries are invalid; a sign-in deletes the
// expired rows; a deleted session is gone and deleting it again is no error.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	id, tok := sha256.Sum256([]byte("session-1")), sha256.Sum256([]byte("token"))
	sess := store.ConsoleSession{IDDigest: id[:], TokenDigest: tok[:], CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.CreateConsoleSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	got, err := st.LookupConsoleSession(ctx, id[:], now.Add(59*time.Minute))
	if err != nil || !bytes.Equal(got.TokenDigest, tok[:]) || !got.ExpiresAt.Equal(sess.ExpiresAt) {
		t.Fatalf("lookup: %+v %v", got, err)
	}
	if _, err := st.LookupConsoleSession(ctx, id[:], now.Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lookup at expiry: %v, want ErrNotFound", err)
	}
	if err := st.CreateConsoleSession(ctx, sess); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("same ID again: %v, want ErrConflict", err)
	}
	for _, bad := range []store.ConsoleSession{
		{IDDigest: id[:4], TokenDigest: tok[:], CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		{IDDigest: id[:], TokenDigest: nil, CreatedAt: now, ExpiresAt: now.Add(time.Hour)},
		{IDDigest: id[:], TokenDigest: tok[:], CreatedAt: now, ExpiresAt: now},
	} {
		if err := st.CreateConsoleSession(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("create %+v: %v, want ErrInvalid", bad, err)
		}
	}
	id2 := sha256.Sum256([]byte("session-2"))
	if err := st.CreateConsoleSession(ctx, store.ConsoleSession{IDDigest: id2[:], TokenDigest: tok[:],
		CreatedAt: now.Add(2 * time.Hour), ExpiresAt: now.Add(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, st, `SELECT count(*) FROM console_sessions`); n != 1 {
		t.Fatalf("%d sessions after a later sign-in, want the expired one deleted", n)
	}
	if err := st.DeleteConsoleSession(ctx, id2[:]); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteConsoleSession(ctx, id2[:]); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
	if _, err := st.LookupConsoleSession(ctx, id2[:], now.Add(2*time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lookup after delete: %v", err)
	}
}
