package store

import (
	"context"
	"fmt"
)

// Names of the PostgreSQL advisory locks that make the service's per-process
// passes safe with several `gpugov serve` replicas on one database
// (docs/design.md §10 "Several replicas"). Each is the second key of the
// two-key lock (hashtext('gpugov.singleton'), hashtext(name)).
const (
	// LockPolicy serializes, across replicas, the writes of a policy put in
	// force: applying the start policy, a policy file reload and a refresh
	// to a version activated through the store (queues, low-risk flags,
	// quotas, pool stages, and their audit entries).
	LockPolicy = "policy"
	// LockDrillPass lets one replica at a time run the governance loop's
	// drill pass (the automatic drill choice and the restart of unstarted
	// drills).
	LockDrillPass = "drill_pass"
	// LockRetention lets one replica at a time run the gpu_samples and
	// decisions retention pass.
	LockRetention = "retention"
)

// lockSQL, tryLockSQL and unlockSQL take, try and release the session
// advisory lock of a name.
const (
	lockSQL    = `SELECT pg_advisory_lock(hashtext('gpugov.singleton'), hashtext($1))`
	tryLockSQL = `SELECT pg_try_advisory_lock(hashtext('gpugov.singleton'), hashtext($1))`
	unlockSQL  = `SELECT pg_advisory_unlock(hashtext('gpugov.singleton'), hashtext($1))`
)

// WithLock runs fn while holding the session advisory lock of name (one of
// the Lock* names), waiting for it as long as ctx allows. The lock is held
// on a connection of its own for fn's duration — fn's store calls use the
// pool's other connections — and released when fn returns; a process that
// dies holding it loses its connection, and PostgreSQL releases the lock
// then. It returns fn's error, or the error of taking the lock (fn not run).
func (s *Store) WithLock(ctx context.Context, name string, fn func(context.Context) error) error {
	_, err := s.withLock(ctx, name, false, fn)
	return err
}

// TryWithLock runs fn while holding the session advisory lock of name, as
// WithLock does, when no other session holds it; ran reports whether fn ran
// (false, nil: another replica holds the lock, and the caller skips its
// pass). err is fn's error or the error of trying the lock.
func (s *Store) TryWithLock(ctx context.Context, name string, fn func(context.Context) error) (ran bool, err error) {
	return s.withLock(ctx, name, true, fn)
}

func (s *Store) withLock(ctx context.Context, name string, try bool, fn func(context.Context) error) (ran bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("store: lock %s: %w", name, err)
	}
	defer conn.Release()
	if try {
		var got bool
		if err := conn.QueryRow(ctx, tryLockSQL, name).Scan(&got); err != nil {
			return false, fmt.Errorf("store: try lock %s: %w", name, err)
		}
		if !got {
			return false, nil
		}
	} else if _, err := conn.Exec(ctx, lockSQL, name); err != nil {
		return false, fmt.Errorf("store: lock %s: %w", name, err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session: closing the
		// connection (the pool then drops it) releases it.
		uctx := context.WithoutCancel(ctx)
		if _, uerr := conn.Exec(uctx, unlockSQL, name); uerr != nil {
			_ = conn.Conn().Close(uctx)
			if err == nil {
				err = fmt.Errorf("store: unlock %s: %w", name, uerr)
			}
		}
	}()
	return true, fn(ctx)
}
