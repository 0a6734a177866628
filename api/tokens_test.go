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
