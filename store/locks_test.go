package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestLocksAcrossReplicas: the advisory locks of docs/design.md §10
// "Several replicas" between two stores on one database (two replicas):
// while one holds a lock the other's try skips and its wait blocks; fn's
// error comes back and the lock is released after it; a replica that dies
// holding the lock (its connections closed) releases it.
func TestLocksAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := newStore(t)
	b := storetest.OpenStore(t, url, storetest.Fixture{})
	try := func(s *store.Store) bool {
		t.Helper()
		ran, err := s.TryWithLock(ctx, store.LockDrillPass, func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return ran
	}
	holding, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- a.WithLock(ctx, store.LockDrillPass, func(context.Context) error {
			close(holding)
			<-release
			return errors.New("pass failed")
		})
	}()
	<-holding
	if try(b) {
		t.Fatal("another replica's try ran while the lock was held")
	}
	waited := make(chan error, 1)
	go func() { waited <- b.WithLock(ctx, store.LockDrillPass, func(context.Context) error { return nil }) }()
	select {
	case err := <-waited:
		t.Fatalf("the other replica's wait returned %v while the lock was held", err)
	default:
	}
	close(release)
	if err := <-done; err == nil || err.Error() != "pass failed" {
		t.Fatalf("WithLock returned %v, want fn's error", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiting replica: %v", err)
	}

	// A replica that dies holding the lock releases it with its connection
	// (here the holder's backend is terminated); its deferred unlock then
	// fails and the connection is dropped, and fn's caller hears of it.
	held, stop, ended := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var stopOnce sync.Once
	stopHolder := func() { stopOnce.Do(func() { close(stop) }) }
	// Registered after the stores' cleanups, so it runs before them: a
	// failure below must not leave the holder's connection checked out,
	// which would hang closing its pool.
	t.Cleanup(stopHolder)
	go func() {
		ended <- a.WithLock(ctx, store.LockRetention, func(context.Context) error {
			close(held)
			<-stop
			return nil
		})
	}()
	<-held
	if ran, _ := b.TryWithLock(ctx, store.LockRetention, func(context.Context) error { return nil }); ran {
		t.Fatal("the lock was not held")
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
		t.Fatal(err)
	}
	// pg_terminate_backend signals the backend and returns; the lock goes
	// when the backend has exited, a moment later.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ran, err := b.TryWithLock(ctx, store.LockRetention, func(context.Context) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if ran {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after the holder died: the lock is still held 10 s later")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopHolder()
	if err := <-ended; err == nil {
		t.Error("the dead holder's WithLock returned nil, want its failed unlock")
	}
}
