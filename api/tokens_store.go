package api

import (
	"context"
	"crypto/subtle"
	"errors"

	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// StoreTokens returns st's api_tokens table (the tokens `gpugov token
// create` made) as a TokenLookup. PostgreSQL finds the row by its digest
// through the unique index — a comparison whose timing could at most tell
// an attacker about the SHA-256 of a token they already hold, never about
// another token — and the digest found is compared again in constant time.
func StoreTokens(st *store.Store) TokenLookup { return storeTokens{st} }

type storeTokens struct{ st *store.Store }

// LookupToken implements TokenLookup.
func (s storeTokens) LookupToken(ctx context.Context, digest []byte) (Principal, bool, error) {
	t, err := s.st.LookupAPIToken(ctx, digest)
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, false, nil
	}
	if err != nil {
		return Principal{}, false, err
	}
	if subtle.ConstantTimeCompare(t.Digest, digest) != 1 {
		return Principal{}, false, nil
	}
	return Principal{Name: t.Name, Project: t.Project, Role: vocab.Role(t.Role), Node: t.Node}, true, nil
}
