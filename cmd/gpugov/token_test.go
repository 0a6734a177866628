package main

import (
	"context"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestTokenCommands: create prints a new token once and stores only its
// digest, which the API's lookup finds; list shows the row, never the
// token; revoke ends it; bad flags are usage errors.
func TestTokenCommands(t *testing.T) {
	ctx := context.Background()
	url := storetest.NewDatabase(t)
	out, errOut, err := runGpugov(ctx, "token", "create", "--role", "agent", "--project", "platform", "--node", "dgx-01",
		"--name", "agent-dgx-01", "--database-url", url)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out)
	if !strings.HasPrefix(tok, api.TokenPrefix) || strings.Contains(errOut, tok) {
		t.Fatalf("create printed %q (stderr %q), want the token once on stdout", out, errOut)
	}
	st := storetest.OpenStore(t, url, storetest.Fixture{})
	p, found, err := api.StoreTokens(st).LookupToken(ctx, func() []byte { d := api.DigestToken(tok); return d[:] }())
	if err != nil || !found || p.Node != "dgx-01" || p.Name != "agent-dgx-01" {
		t.Fatalf("lookup: %+v %v %v", p, found, err)
	}
	list, _, err := runGpugov(ctx, "token", "list", "--database-url", url)
	if err != nil || !strings.Contains(list, "agent-dgx-01") || strings.Contains(list, tok) {
		t.Fatalf("list: %v\n%s", err, list)
	}
	ts, err := st.ListAPITokens(ctx)
	if err != nil || len(ts) != 1 {
		t.Fatalf("rows %+v %v", ts, err)
	}
	if out, _, err := runGpugov(ctx, "token", "revoke", ts[0].ID, "--reason", "rotated", "--database-url", url); err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %v %s", err, out)
	}
	if _, found, err := api.StoreTokens(st).LookupToken(ctx, ts[0].Digest); found || err != nil {
		t.Fatalf("a revoked token still found (%v)", err)
	}
	entries, err := st.AuditFor(ctx, ts[0].ID, 10)
	actions := map[string]bool{}
	for _, en := range entries {
		actions[en.Action] = true
	}
	if err != nil || len(entries) != 2 || !actions[store.AuditTokenCreate] || !actions[store.AuditTokenRevoke] {
		t.Fatalf("audit %+v %v, want the create and the revoke", entries, err)
	}
	for _, args := range [][]string{
		{"token", "create", "--role", "root", "--project", "p"},
		{"token", "create", "--role", "agent", "--project", "p"},
		{"token", "create", "--role", "admin", "--project", "p", "--node", "n"},
		{"token", "create", "--role", "admin"},
		{"token", "revoke", "t-nosuch", "--database-url", url},
		{"token", "revoke"},
	} {
		if _, _, err := runGpugov(ctx, args...); !isUsageError(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
