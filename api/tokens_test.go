package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

func TestParseTokensYAMLAndJSON(t *testing.T) {
	t.Parallel()
	yamlCfg := `
s3cr3t-a:
  name: alice
  project: vision
  role: submitter
s3cr3t-o:
  project: platform
  role: operator
`
	jsonCfg := `{"s3cr3t-a": {"name": "alice", "project": "vision", "role": "submitter"},
	             "s3cr3t-o": {"project": "platform", "role": "operator"}}`
	for name, cfg := range map[string]string{"yaml": yamlCfg, "json": jsonCfg} {
		toks, err := ParseTokens([]byte(cfg))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p, ok := toks.Lookup("s3cr3t-a"); !ok || p != (Principal{Name: "alice", Project: "vision", Role: vocab.RoleSubmitter}) {
			t.Fatalf("%s: alice %+v %v", name, p, ok)
		}
		if p, ok := toks.Lookup("s3cr3t-o"); !ok || p.Name != "operator@platform" || !p.Role.SeesAllProjects() {
			t.Fatalf("%s: operator %+v %v", name, p, ok)
		}
		for _, bad := range []string{"", "s3cr3t", "S3CR3T-A"} {
			if _, ok := toks.Lookup(bad); ok {
				t.Fatalf("%s: %q accepted", name, bad)
			}
		}
	}
}

func TestParseTokensRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for cfg, want := range map[string]string{
		"t: {project: p, role: root}":          `role "root"`,
		"t: {role: submitter}":                 "project is required",
		"t: {project: p, role: admin, rol: x}": "field rol not found",
		"":                                     "no tokens",
		`"": {project: p, role: admin}`:        "empty token",
	} {
		_, err := ParseTokens([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", cfg, err, want)
		}
	}
}

func TestLoadTokensFromFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte("tok: {name: ci, project: infra, role: admin}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := LoadTokens(path)
	if err != nil || toks.Len() != 1 {
		t.Fatalf("%v, %d tokens", err, toks.Len())
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestTokensHashedFormAndAgentNode(t *testing.T) {
	t.Parallel()
	plain := "s3cr3t-plain"
	cfg := "\"" + DigestToken("s3cr3t-hashed").String() + "\": {name: ci, project: infra, role: admin}\n" +
		plain + ": {name: agent-7, project: platform, role: agent, node: dgx-07}\n"
	toks, err := ParseTokens([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := toks.Lookup("s3cr3t-hashed"); !ok || p.Name != "ci" {
		t.Fatalf("hashed entry: %+v %v", p, ok)
	}
	if _, ok := toks.Lookup(DigestToken("s3cr3t-hashed").String()); ok {
		t.Fatal("the digest itself was accepted as a token")
	}
	if p, ok := toks.Lookup(plain); !ok || p.Node != "dgx-07" {
		t.Fatalf("agent entry: %+v %v", p, ok)
	}
	for cfg, want := range map[string]string{
		"t: {project: p, role: agent}":             "node is required",
		"t: {project: p, role: admin, node: n1}":   "node is only for agent tokens",
		`"sha256:abcd": {project: p, role: admin}`: "64 hex digits",
		"s3cr3t-plain: {project: p, role: admin}\n\"" + DigestToken("s3cr3t-plain").String() + "\": {project: p, role: admin}": "the same token",
	} {
		if _, err := ParseTokens([]byte(cfg)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", cfg, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%q: the error shows the token: %v", cfg, err)
		}
	}
}

func TestNewTokenIsHighEntropy(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		tok, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != len(TokenPrefix)+43 || seen[tok] {
			t.Fatalf("token %q (len %d), or a repeat", tok, len(tok))
		}
		seen[tok] = true
		if d, err := ParseTokenDigest(DigestToken(tok).String()); err != nil || d != DigestToken(tok) {
			t.Fatalf("digest round trip: %v", err)
		}
	}
}
