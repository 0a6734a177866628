package main

import (
	"cmp"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/store"
)

// defaultDatabaseURL is the database used when neither --database-url nor
// DATABASE_URL is given (docs/design.md §10).
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/gpugov?sslmode=disable"

func init() {
	var databaseURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the gpugov database if missing and apply the embedded schema migrations",
		Long: `migrate applies gpugov's embedded goose migrations to PostgreSQL.

The database is --database-url, else $DATABASE_URL, else
` + defaultDatabaseURL + `.
When that database does not exist, migrate first creates it by connecting to
the server's "postgres" maintenance database with the same host, port, user and
password (the role needs CREATEDB). migrate is the only command that creates a
database: serve, inventory import, token and the others fail with "database X
does not exist" (exit code 2) so that a mistyped --database-url creates nothing. Concurrent migrators are serialised by a
PostgreSQL advisory lock; running migrate again applies nothing.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return newUsageError("migrate takes no arguments, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			url := cmp.Or(databaseURL, os.Getenv("DATABASE_URL"), defaultDatabaseURL)
			if _, err := pgx.ParseConfig(url); err != nil {
				return newUsageError("database URL: %v", err)
			}
			created, err := store.EnsureDatabase(cmd.Context(), url)
			if err != nil {
				return err
			}
			if created {
				cfg, _ := pgx.ParseConfig(url) // parsed above
				fmt.Fprintf(cmd.OutOrStdout(), "created database %q\n", cfg.Database)
			}
			applied, err := store.MigrateUp(cmd.Context(), url)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied %s %v; schema is up to date\n", plural.Count(len(applied), "migration", "migrations"), applied)
			return nil
		},
	}
	cmd.Flags().StringVar(&databaseURL, "database-url", "", "PostgreSQL URL (default $DATABASE_URL, else "+defaultDatabaseURL+")")
	rootCmd.AddCommand(cmd)
}
