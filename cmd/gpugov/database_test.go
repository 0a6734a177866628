package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/store/storetest"
)

// TestMistypedDatabaseURLCreatesNothing: every command that opens the
// database, given a URL naming a database that does not exist, fails with a
// usage error (exit code 2) that names the database and --database-url and
// says to run gpugov migrate, and leaves the server without that database;
// `gpugov migrate` on the same URL then creates and migrates it.
func TestMistypedDatabaseURLCreatesNothing(t *testing.T) {
	storetest.SkipShort(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	name := fmt.Sprintf("gpugov_typo_%d", time.Now().UnixNano())
	cfg, err := pgx.ParseConfig(storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	exists := func() bool {
		t.Helper()
		var ok bool
		if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	t.Cleanup(func() { // drop, then close: a deferred Close would run first
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		_ = admin.Close(context.Background())
	})
	nodes := filepath.Join(t.TempDir(), "nodes.csv")
	if err := os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\nnode-1,96000,786432,8,V100M32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commands := map[string][]string{
		// serve fails before it dials Temporal (nothing listens on port 1).
		"serve":            {"serve", "--database-url", url, "--temporal-address", "127.0.0.1:1", "--api-addr", "127.0.0.1:0", "--tokens-file", devTokens, "--log-level", "error"},
		"inventory import": {"inventory", "import", "--database-url", url, nodes},
		"token list":       {"token", "list", "--database-url", url},
		"token create":     {"token", "create", "--database-url", url, "--role", "submitter", "--project", "vision", "--name", "typo"},
	}
	for label, args := range commands {
		_, _, err := runGpugov(ctx, args...)
		if err == nil {
			t.Fatalf("%s on a missing database: no error", label)
		}
		msg := err.Error()
		for _, want := range []string{fmt.Sprintf("database %q does not exist", name), "--database-url", "gpugov migrate --database-url 'postgres://"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: error %q does not say %q", label, msg, want)
			}
		}
		if !isUsage(err) {
			t.Errorf("%s: error %q is not a usage error (exit code 2)", label, msg)
		}
		if exists() {
			t.Fatalf("%s created database %s", label, name)
		}
	}
	out, _, err := runGpugov(ctx, "migrate", "--database-url", url)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if !strings.Contains(out, fmt.Sprintf("created database %q", name)) || !exists() {
		t.Fatalf("migrate did not create %s: %q", name, out)
	}
	if _, _, err := runGpugov(ctx, "token", "list", "--database-url", url); err != nil {
		t.Fatalf("token list after migrate: %v", err)
	}
}
