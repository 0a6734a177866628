// Package storetest gives tests a fresh, migrated PostgreSQL database of
// their own. The server is GPUGOV_TEST_DATABASE_URL when set, otherwise
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable (DESIGN.md §5);
// the URL must name a database the test role can connect to and the role needs
// CREATEDB.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates a database with a unique name derived from the test's
// name, applies the embedded migrations, registers a t.Cleanup that drops it
// (terminating leftover connections), and returns its URL. It fails the test
// with the server's error when PostgreSQL cannot be reached.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adminCfg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		t.Fatalf("storetest: parse %s: %v", AdminURL(), err)
	}
	name := databaseName(t.Name())
	admin, err := pgx.ConnectConfig(ctx, adminCfg)
	if err != nil {
		t.Fatalf("storetest: connect to PostgreSQL (%s): %v", AdminURL(), err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("storetest: create database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, adminCfg, name) })

	url := withDatabase(AdminURL(), name)
	if err := store.Migrate(ctx, url); err != nil {
		t.Fatalf("storetest: migrate %s: %v", name, err)
	}
	return url
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
