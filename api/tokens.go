package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Principal is the caller a bearer token stands for.
type Principal struct {
	// Name is the actor recorded in the audit log; it defaults to
	// "<role>@<project>" when the config leaves it empty.
	Name    string     `json:"name" yaml:"name"`
	Project string     `json:"project" yaml:"project"`
	Role    vocab.Role `json:"role" yaml:"role"`
	// Node is the node an agent token reports for (required for role agent,
	// refused for the other roles): it may report that node's inventory and
	// samples, take the runs placed there and report their checkpoints only.
	Node string `json:"node,omitempty" yaml:"node,omitempty"`
}

// owns reports whether p may see and change a job of project.
func (p Principal) owns(project string) bool {
	return p.Role.SeesAllProjects() || p.Project == project
}

// Validate checks a principal as a token entry must be: a known role, a
// project, a node exactly when the role is agent. The error names the field.
func (p Principal) Validate() error {
	switch {
	case !p.Role.Valid():
		return fmt.Errorf("role %q is not submitter, operator, admin or agent", p.Role)
	case p.Project == "":
		return errors.New("project is required")
	case p.Role == vocab.RoleAgent && p.Node == "":
		return errors.New("node is required for an agent token (the node it reports for)")
	case p.Role != vocab.RoleAgent && p.Node != "":
		return fmt.Errorf("node is only for agent tokens, not %s", p.Role)
	}
	return nil
}

// TokenDigestPrefix starts the hashed form of a token file entry:
// "sha256:" followed by the 64 hex digits of the token's SHA-256.
const TokenDigestPrefix = "sha256:"

// TokenDigest is the SHA-256 of a bearer token: what is kept of it, in
// memory and in PostgreSQL (api_tokens.digest). Tokens are high-entropy
// (NewToken's are 256 random bits), so finding a token from its digest is a
// 2^256 preimage search; a slow password KDF would add nothing (docs/design.md
// §2 "API tokens").
type TokenDigest [sha256.Size]byte

// DigestToken returns the SHA-256 of token.
func DigestToken(token string) TokenDigest { return sha256.Sum256([]byte(token)) }

// String returns the digest in the token file's hashed form, "sha256:<hex>".
func (d TokenDigest) String() string { return TokenDigestPrefix + hex.EncodeToString(d[:]) }

// ParseTokenDigest reads "sha256:<64 hex digits>". The error says what is wrong.
func ParseTokenDigest(s string) (TokenDigest, error) {
	var d TokenDigest
	h, ok := strings.CutPrefix(s, TokenDigestPrefix)
	if !ok {
		return d, fmt.Errorf("not of the form %s<64 hex digits>", TokenDigestPrefix)
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return d, fmt.Errorf("%s must be followed by 64 hex digits", TokenDigestPrefix)
	}
	copy(d[:], b)
	return d, nil
}

// TokenPrefix starts every token NewToken makes, so that a leaked one is
// easy to recognise (secret scanners) and to tell from a digest.
const TokenPrefix = "ggv_"

// NewToken returns a new bearer token: TokenPrefix and 32 bytes from
// crypto/rand in unpadded base64url (43 characters), 256 bits of entropy.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// TokenLookup finds a token's principal by its digest in a shared store
// (store.Store.LookupToken over the api_tokens table, so that every replica
// sees a token created or revoked by `gpugov token`). found false means no
// live (unrevoked) token has that digest; err is a store failure.
type TokenLookup interface {
	LookupToken(ctx context.Context, digest []byte) (p Principal, found bool, err error)
}

// tokenEntry is one configured token: its digest and principal.
type tokenEntry struct {
	digest    TokenDigest
	principal Principal
}

// Tokens are the bearer tokens of the token file. Only their SHA-256
// digests are kept (a plain entry is hashed at load, a "sha256:<hex>" entry
// is taken as is), and Lookup compares a presented token's digest with every
// entry in constant time (crypto/subtle), so neither the secret nor which
// entry matched shows in the time taken.
type Tokens struct {
	entries []tokenEntry
}

// NewTokens builds Tokens from a token → principal map, where a key is a
// plain token or its digest "sha256:<64 hex>". It returns an error naming
// the first bad entry (in key order, by position and name, never the token
// itself): an empty token, a malformed digest, two keys of one token, or a
// principal that Principal.Validate refuses.
func NewTokens(m map[string]Principal) (Tokens, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t := Tokens{entries: make([]tokenEntry, 0, len(m))}
	seen := make(map[TokenDigest]bool, len(m))
	for i, k := range keys {
		p := m[k]
		if k == "" {
			return Tokens{}, fmt.Errorf("token entry %d: empty token", i+1)
		}
		if err := p.Validate(); err != nil {
			return Tokens{}, fmt.Errorf("token entry %d (%s): %w", i+1, p.Name, err)
		}
		if p.Name == "" {
			p.Name = string(p.Role) + "@" + p.Project
		}
		d := DigestToken(k)
		if strings.HasPrefix(k, TokenDigestPrefix) {
			var err error
			if d, err = ParseTokenDigest(k); err != nil {
				return Tokens{}, fmt.Errorf("token entry %d (%s): %w", i+1, p.Name, err)
			}
		}
		if seen[d] {
			return Tokens{}, fmt.Errorf("token entry %d (%s): the same token as another entry (plain and hashed)", i+1, p.Name)
		}
		seen[d] = true
		t.entries = append(t.entries, tokenEntry{digest: d, principal: p})
	}
	return t, nil
}

// ParseTokens reads a token config in YAML or JSON (JSON is YAML): a mapping of
// token → {name, project, role, node}, the token plain or as "sha256:<hex>".
// Unknown keys are rejected so that a typo such as "rol" does not silently
// make a token useless.
func ParseTokens(data []byte) (Tokens, error) {
	var m map[string]Principal
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return Tokens{}, errors.New("token config: no tokens defined")
		}
		return Tokens{}, fmt.Errorf("token config: %w", err)
	}
	return NewTokens(m)
}

// LoadTokens reads the token config file at path (see ParseTokens).
func LoadTokens(path string) (Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Tokens{}, fmt.Errorf("token config: %w", err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return Tokens{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Lookup returns the principal of a bearer token and whether it is known.
// Every entry is compared (subtle.ConstantTimeCompare of the digests, no
// early exit).
func (t Tokens) Lookup(token string) (Principal, bool) {
	if token == "" {
		return Principal{}, false
	}
	return t.lookupDigest(DigestToken(token))
}

// lookupDigest is Lookup of a digest.
func (t Tokens) lookupDigest(d TokenDigest) (Principal, bool) {
	var found Principal
	match := 0
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(t.entries[i].digest[:], d[:])
		if eq == 1 {
			found = t.entries[i].principal
		}
		match |= eq
	}
	return found, match == 1
}

// Len returns the number of configured tokens.
func (t Tokens) Len() int { return len(t.entries) }
