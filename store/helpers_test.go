package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// t0 is the tests' clock origin, at microsecond precision like timestamptz.
var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// newStore opens a store on a fresh, empty database; closed at cleanup.
func newStore(t testing.TB) (*store.Store, string) {
	t.Helper()
	return storetest.NewStore(t, storetest.Fixture{})
}

// newStoreWith opens a store on a fresh database holding the inventory of
// pools; closed at cleanup.
func newStoreWith(t testing.TB, pools ...scheduling.Pool) *store.Store {
	t.Helper()
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: pools})
	return s
}

// testPool is storetest.Pool at stage automate.
func testPool(name string, nodes, gpusPerNode int) scheduling.Pool {
	return storetest.Pool(name, vocab.StageAutomate, nodes, gpusPerNode)
}

// submit creates a pending job of queue "train" submitted at t0 in pool
// asking for gpus × milli.
func submit(t testing.TB, s *store.Store, project, pool string, gpus, milli int) *store.Job {
	t.Helper()
	return storetest.Submit(t, s, &store.NewJob{
		Project: project, Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0,
		Request: scheduling.ResourceRequest{GPUs: gpus, GPUMilli: milli, Pool: pool, CPUMilli: 4000, MemoryMiB: 16384},
	})
}

// place builds a placement of job on the given GPUs of node with milli each,
// at the priority of a standard job submitted at t0.
func place(jobID, pool, node string, milli int, uuids ...string) scheduling.Placement {
	p := storetest.Placement(jobID, pool, node, milli, uuids...)
	p.Priority = scheduling.Priority{Score: 10000, TierBase: 10000, SubmitTime: t0}
	return p
}

// queryInt runs a one-value integer query.
func queryInt(t testing.TB, s *store.Store, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
