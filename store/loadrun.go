package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// JobIDsWithEnv returns, in ID order, the IDs of every job whose spec sets
// environment variable name to value (`gpugov load --burst` and --backlog
// label their jobs so, to count a run's rows: docs/design.md §8 "Bursts and
// backlogs"). It reads the whole jobs table in one query (no index covers
// the spec). Errors are wrapped with "job IDs with env".
func (s *Store) JobIDsWithEnv(ctx context.Context, name, value string) ([]string, error) {
	var ids []string
	err := forEachRow(ctx, s.pool, `SELECT id FROM jobs WHERE spec->'env'->>$1 = $2 ORDER BY id`,
		[]any{name, value}, func(rows pgx.Rows) error {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("store: job IDs with env: %w", err)
	}
	return ids, nil
}
