package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// DefaultShard is the scheduler shard of every pool no policy assigns
// elsewhere (pools.scheduler_shard's default; temporalx.DefaultShard).
const DefaultShard = "default"

// SetPoolShards makes each pool's scheduler shard byPool[pool], or
// DefaultShard for a pool byPool leaves out, in one transaction that locks
// every pools row (FOR UPDATE, in name order): it waits for the cycles
// applying on those pools (ApplyShardCycle's FOR SHARE), and a cycle of the
// old shard applied after it commits leaves the moved pool alone. A pool
// byPool names that does not exist is ignored (it joins its shard at the
// next SetPoolShards after its creation: serve calls it at each reconcile
// pass). A call that would change nothing reads the pools without locking
// them. It returns the pools whose
// shard changed, as "pool: old -> new", sorted. Repeating the call changes
// nothing. Errors are wrapped with "set pool shards" (docs/design.md §4
// "Scheduler shards").
func (s *Store) SetPoolShards(ctx context.Context, byPool map[string]string) ([]string, error) {
	// Most calls (each reconcile pass) change nothing: read first, without
	// a lock, and take the locks only for a change.
	cur, err := s.PoolShards(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: set pool shards: %w", err)
	}
	same := true
	for pool, shard := range cur {
		want := byPool[pool]
		if want == "" {
			want = DefaultShard
		}
		same = same && want == shard
	}
	if same {
		return nil, nil
	}
	var changed []string
	err = s.inTx(ctx, "set pool shards", func(tx pgx.Tx) error {
		changed = nil
		rows, err := tx.Query(ctx, `SELECT name, scheduler_shard FROM pools ORDER BY name FOR UPDATE`)
		if err != nil {
			return err
		}
		type row struct{ name, shard string }
		cur, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.name, &x.shard)
			return x, err
		})
		if err != nil {
			return err
		}
		for _, p := range cur {
			want := byPool[p.name]
			if want == "" {
				want = DefaultShard
			}
			if want == p.shard {
				continue
			}
			if _, err := tx.Exec(ctx, `UPDATE pools SET scheduler_shard = $2 WHERE name = $1`, p.name, want); err != nil {
				return err
			}
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", p.name, p.shard, want))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(changed)
	return changed, nil
}

// PoolShards returns every pool's scheduler shard, by pool name.
func (s *Store) PoolShards(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := forEachRow(ctx, s.pool, `SELECT name, scheduler_shard FROM pools`, nil, func(rows pgx.Rows) error {
		var name, shard string
		err := rows.Scan(&name, &shard)
		out[name] = shard
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: pool shards: %w", err)
	}
	return out, nil
}
