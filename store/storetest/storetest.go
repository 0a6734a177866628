// Package storetest gives tests a fresh, migrated PostgreSQL database of
// their own, and the one factory of test stores (NewStore, Pool, Submit) that
// the store, API, workflow, activity and command tests share. The server is
// GPUGOV_TEST_DATABASE_URL when set, otherwise
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable (docs/design.md);
// the URL must name a database the test role can connect to and the role needs
// CREATEDB.
//
// Databases are copies of a template database migrated once (see
// NewDatabase): copying is a file copy inside PostgreSQL, far cheaper than
// running every migration for every test.
//
// Every helper here needs PostgreSQL, so each skips its test under
// `go test -short` (`make test-unit`, the tier that needs no service). In the
// full run (`make test`, CI) an unreachable server fails the test instead.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpugov/gpugov/store"
)

// DefaultAdminURL is the server tests use when GPUGOV_TEST_DATABASE_URL is unset.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL returns the URL of the maintenance database tests create their
// databases from.
func AdminURL() string {
	if u := os.Getenv("GPUGOV_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// SkipShort skips t under `go test -short`: the test needs PostgreSQL, and
// -short is the tier that needs no service (`make test-unit`).
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL: skipped under -short (make test-unit); `make test` runs it")
	}
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates a database with a unique name derived from the test's
// name as a copy of the migrated template (Template), registers a t.Cleanup
// that drops it (terminating leftover connections), and returns its URL. It
// skips the test under -short (SkipShort) and fails it with the server's
// error when PostgreSQL cannot be reached or the template cannot be built.
func NewDatabase(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adminCfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		t.Fatalf("storetest: parse %s: %v", AdminURL(), err)
	}
	tmpl, err := Template(ctx)
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	name := databaseName(t.Name())
	admin, err := pgx.ConnectConfig(ctx, adminCfg)
	if err != nil {
		t.Fatalf("storetest: connect to PostgreSQL (%s): %v", AdminURL(), err)
	}
	defer admin.Close(context.Background())
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	if err := retryInUse(ctx, func() error { _, err := admin.Exec(ctx, create); return err }); err != nil {
		t.Fatalf("storetest: create database %s from %s: %v", name, tmpl, err)
	}
	t.Cleanup(func() { dropDatabase(t, adminCfg, name) })
	return withDatabase(AdminURL(), name)
}

// template is the test binary's migrated template, built once (Template).
var template struct {
	mu   sync.Mutex
	name string
}

// Template returns the name of a database migrated with store.Migrate that
// NewDatabase copies. Its name is "gpugov_tmpl_" + the first 16 hex digits of
// the SHA-256 of the embedded migrations (file names and contents), so test
// binaries of different migration sets (other branches on the same server)
// never share one. It is built once: the first call of a test binary takes
// a PostgreSQL advisory lock keyed by that hash (serialising concurrent test
// binaries), migrates a scratch database, renames it to the template's name
// (so the name exists only for a complete template) and forbids connections
// to it (PostgreSQL refuses to copy a database another session is connected
// to). The template is left in place: the next run, and every other test
// binary of the same migrations, reuses it instead of migrating again. Errors
// name the step that failed.
func Template(ctx context.Context) (string, error) {
	template.mu.Lock()
	defer template.mu.Unlock()
	if template.name != "" {
		return template.name, nil
	}
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "gpugov_tmpl_" + hex.EncodeToString(sum[:8])
	if err := buildTemplate(ctx, name, int64(binary.BigEndian.Uint64(sum[8:16]))); err != nil {
		return "", fmt.Errorf("template %s: %w", name, err)
	}
	template.name = name
	return name, nil
}

// migrationsHash is the SHA-256 of store.Migrations(): each file's name and
// contents, in name order.
func migrationsHash() ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	fsys := store.Migrations()
	var names []string
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, path)
		}
		return nil
	})
	if err != nil {
		return sum, fmt.Errorf("read migrations: %w", err)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return sum, fmt.Errorf("read migration %s: %w", n, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// buildTemplate makes database name a migrated template unless it exists,
// under the session advisory lock lockKey.
func buildTemplate(ctx context.Context, name string, lockKey int64) error {
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL (%s): %w", AdminURL(), err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer func() { _, _ = admin.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey) }()
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up: %w", err)
	}
	if exists {
		return nil
	}
	// A scratch database left by a test binary killed while building: the
	// lock is held, so no one else is using it.
	scratch := name + "_build"
	ident := pgx.Identifier{scratch}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop leftover %s: %w", scratch, err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return fmt.Errorf("create %s: %w", scratch, err)
	}
	if err := store.Migrate(ctx, withDatabase(AdminURL(), scratch)); err != nil {
		return fmt.Errorf("migrate %s: %w", scratch, err)
	}
	// The migrator's connections are closed, but their server processes may
	// still be exiting: renaming waits for them.
	rename := "ALTER DATABASE " + ident + " RENAME TO " + pgx.Identifier{name}.Sanitize()
	if err := retryInUse(ctx, func() error { _, err := admin.Exec(ctx, rename); return err }); err != nil {
		return fmt.Errorf("rename %s: %w", scratch, err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("forbid connections: %w", err)
	}
	return nil
}

// retryInUse runs f until it succeeds, fails with an error other than
// PostgreSQL's object_in_use (55006: "source database is being accessed by
// other users", raised when concurrent CREATE DATABASE … TEMPLATE statements
// or a closing session overlap), or ctx ends; waits grow from 20 ms to 1 s.
func retryInUse(ctx context.Context, f func() error) error {
	wait := 20 * time.Millisecond
	for {
		err := f()
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (still in use when %v)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// databaseName is "gpugov_test_" + a sanitised prefix of the test name + 8
// random hex digits, within PostgreSQL's 63-byte identifier limit.
func databaseName(testName string) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	base := unsafeChars.ReplaceAllString(strings.ToLower(testName), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return "gpugov_test_" + strings.Trim(base, "_") + "_" + hex.EncodeToString(b[:])
}

// withDatabase returns url pointing at database name. URL-form inputs keep
// their query parameters; key=value DSNs get a dbname override appended.
func withDatabase(url, name string) string {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		rest := url[strings.Index(url, "://")+3:]
		query := ""
		if i := strings.IndexByte(rest, '?'); i >= 0 {
			rest, query = rest[:i], rest[i:]
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i]
		}
		return url[:strings.Index(url, "://")+3] + rest + "/" + name + query
	}
	return fmt.Sprintf("%s dbname=%s", url, name)
}

func dropDatabase(t testing.TB, adminCfg *pgx.ConnConfig, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, adminCfg)
	if err != nil {
		t.Errorf("storetest: drop %s: connect: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("storetest: drop database %s: %v", name, err)
	}
}
