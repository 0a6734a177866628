package api

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

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
}

// owns reports whether p may see and change a job of project.
func (p Principal) owns(project string) bool {
	return p.Role.SeesAllProjects() || p.Project == project
}

// Tokens maps bearer tokens to principals. Tokens are kept only as SHA-256
// digests so that a lookup compares fixed-size hashes, not the secret itself.
type Tokens struct {
	byDigest map[[sha256.Size]byte]Principal
}

// NewTokens builds Tokens from a token → principal map. It returns an error
// naming the first entry (in token order, the token itself not shown) with an
// empty token, a missing project or an unknown role.
func NewTokens(m map[string]Principal) (Tokens, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	t := Tokens{byDigest: make(map[[sha256.Size]byte]Principal, len(m))}
	for i, k := range keys {
		p := m[k]
		if k == "" {
			return Tokens{}, fmt.Errorf("token entry %d: empty token", i+1)
		}
		if !p.Role.Valid() {
			return Tokens{}, fmt.Errorf("token entry %d (%s): role %q is not submitter, operator, admin or agent", i+1, p.Name, p.Role)
		}
		if p.Project == "" {
			return Tokens{}, fmt.Errorf("token entry %d (%s): project is required", i+1, p.Name)
		}
		if p.Name == "" {
			p.Name = string(p.Role) + "@" + p.Project
		}
		t.byDigest[sha256.Sum256([]byte(k))] = p
	}
	return t, nil
}

// ParseTokens reads a token config in YAML or JSON (JSON is YAML): a mapping of
// token → {name, project, role}. Unknown keys are rejected so that a typo such
// as "rol" does not silently make a token useless.
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
func (t Tokens) Lookup(token string) (Principal, bool) {
	if token == "" {
		return Principal{}, false
	}
	p, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return p, ok
}

// Len returns the number of configured tokens.
func (t Tokens) Len() int { return len(t.byDigest) }
