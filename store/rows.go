package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Static queries read their rows by column name into small structs tagged
// `db:"column"` (pgx.RowToStructByName), which are then converted to the
// domain types; a column added to a select list without a matching field (or
// the other way round) fails the query instead of shifting every later value.
// The scheduling snapshot (LoadSnapshot, run every cycle) and the inventory
// and queue rows it reads keep positional scans; snapshotLoader's comment
// gives the measurement. ApplyCycle's per-row reads of the cycle's jobs and
// GPUs (cycle.go) are positional on the same grounds.

// queryOne runs sql on q and scans its only row by name into a T. It returns
// an error wrapping pgx.ErrNoRows when there is no row.
func queryOne[T any](ctx context.Context, q querier, sql string, args ...any) (T, error) {
	rows, _ := q.Query(ctx, sql, args...) // a query error is returned by CollectOneRow
	return pgx.CollectOneRow(rows, pgx.RowToStructByName[T])
}

// queryAll runs sql on q and scans every row by name into a T, in order; no
// rows give a nil slice (as appending to a nil slice did before).
func queryAll[T any](ctx context.Context, q querier, sql string, args ...any) ([]T, error) {
	rows, _ := q.Query(ctx, sql, args...) // a query error is returned by AppendRows
	return pgx.AppendRows([]T(nil), rows, pgx.RowToStructByName[T])
}

// utcPtr returns t in UTC; nil stays nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
