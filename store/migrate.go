package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver goose runs on
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the embedded goose migrations (files NNNNN_name.sql at
// the root of the returned FS).
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sub
}

// Migrate applies every pending embedded migration to databaseURL with goose's
// Provider API. A PostgreSQL session advisory lock serialises concurrent
// migrators (several `gpugov serve` replicas starting together). Errors are
// wrapped with the failing step (open, lock, up). The database must exist:
// when the server has none of that name Migrate returns a
// *MissingDatabaseError and creates nothing (EnsureDatabase creates it, for
// `gpugov migrate` only).
func Migrate(ctx context.Context, databaseURL string) error {
	_, err := MigrateUp(ctx, databaseURL)
	return err
}

// MigrateUp is Migrate that also reports the versions it applied, for the
// `gpugov migrate` command's output.
func MigrateUp(ctx context.Context, databaseURL string) ([]int64, error) {
	if err := RequireDatabase(ctx, databaseURL); err != nil {
		return nil, err
	}
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: open: %w", err)
	}
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("store: migrate: session locker: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(),
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: migrate up: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// MissingDatabaseError is returned by Open, Migrate and RequireDatabase when
// the PostgreSQL server answers that the database named in the URL does not
// exist (SQLSTATE 3D000): most often a mistyped --database-url. Nothing is
// created; its text says to run `gpugov migrate` on that URL, the only command
// that creates a database.
type MissingDatabaseError struct {
	Database string // the database the URL names
	Server   string // host:port (user …) of the server that answered
	URL      string // the URL as given, its password masked ("" when it is a key=value DSN)
}

// Error names the database, the server and the command that creates it.
func (e *MissingDatabaseError) Error() string {
	target := "that URL"
	if e.URL != "" {
		target = "'" + e.URL + "'"
	}
	return fmt.Sprintf("database %q does not exist on %s; check --database-url (or $DATABASE_URL), or create it with: gpugov migrate --database-url %s",
		e.Database, e.Server, target)
}

// asMissingDatabase is a *MissingDatabaseError when err is PostgreSQL's
// invalid_catalog_name (3D000) for cfg's database, else nil.
func asMissingDatabase(err error, cfg *pgx.ConnConfig, databaseURL string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
		return nil
	}
	e := &MissingDatabaseError{Database: cfg.Database, Server: describeServer(cfg)}
	if u, perr := url.Parse(databaseURL); perr == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		e.URL = u.Redacted()
	}
	return e
}

// describeServer names a server without its password.
func describeServer(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d (user %s)", c.Host, c.Port, c.User)
}

// RequireDatabase connects to databaseURL once and returns a
// *MissingDatabaseError when the server has no database of that name; any
// other failure to connect is returned wrapped. It creates nothing.
func RequireDatabase(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("store: parse database URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if missing := asMissingDatabase(err, cfg, databaseURL); missing != nil {
			return missing
		}
		return fmt.Errorf("store: cannot reach PostgreSQL at %s: %w", describe(cfg), err)
	}
	return conn.Close(ctx)
}

// EnsureDatabase creates the database named in databaseURL when it does not
// exist (only `gpugov migrate` calls it: every other command fails with a
// *MissingDatabaseError instead, so a mistyped URL creates nothing), by connecting to the server's `postgres` maintenance database with
// the same host, port, user and password. It reports whether it created it.
// The connecting role needs CREATEDB for the create; when the database already
// exists nothing is asked of the server beyond a lookup.
func EnsureDatabase(ctx context.Context, databaseURL string) (bool, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return false, fmt.Errorf("store: ensure database: parse database URL: %w", err)
	}
	name := cfg.Database
	if name == "" || name == "postgres" {
		return false, nil
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return false, fmt.Errorf("store: ensure database: connect to %s: %w", describe(admin), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("store: ensure database %q: %w", name, err)
	}
	if exists {
		return false, nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: another migrator won the race
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: ensure database: create %q: %w", name, err)
	}
	return true, nil
}
