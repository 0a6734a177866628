package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

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
// wrapped with the failing step (open, lock, up).
func Migrate(ctx context.Context, databaseURL string) error {
	_, err := MigrateUp(ctx, databaseURL)
	return err
}

// MigrateUp is Migrate that also reports the versions it applied, for the
// `gpugov migrate` command's output.
func MigrateUp(ctx context.Context, databaseURL string) ([]int64, error) {
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

// EnsureDatabase creates the database named in databaseURL when it does not
// exist, by connecting to the server's `postgres` maintenance database with
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
