package store_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestAllocationCacheSeesOtherWriters checks the snapshot's cache of
// allocation grants (docs/design.md §8, "The whole cycle at scale"): after
// another Store releases an allocation and grants the GPUs again, this
// Store's next snapshot shows the new allocations with their own GPUs and
// not the released one; a placement this Store plans on a stale view is
// still refused by ApplyCycle's capacity check; and the grant's columns
// cannot be changed behind the cache (migration 00350), while the run and
// release updates go through.
func TestAllocationCacheSeesOtherWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{testPool("p", 1, 2)}})
	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	a, b, c := submit(t, s, "vision", "p", 1, 0), submit(t, s, "vision", "p", 1, 0), submit(t, s, "vision", "p", 1, 0)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	node, gpu0, gpu1 := storetest.NodeName("p", 0), storetest.GPUName("p", 0, 0), storetest.GPUName("p", 0, 1)
	held := func(snap *scheduling.Snapshot) map[string]string {
		t.Helper()
		m := map[string]string{}
		for _, al := range snap.Allocations {
			if len(al.GPUs) != 1 || al.Node != node || al.Pool != "p" {
				t.Fatalf("allocation %+v: want one GPU on %s in p", al, node)
			}
			m[al.GPUs[0].UUID] = al.JobID
		}
		return m
	}

	placedA := storetest.Place(t, other, "other-1", at(1), place(a.ID, "p", node, 1000, gpu0))
	snap, err := s.LoadSnapshot(ctx, at(2))
	if err != nil {
		t.Fatal(err)
	}
	if got := held(snap); len(got) != 1 || got[gpu0] != a.ID {
		t.Fatalf("first load: GPUs held %v, want %s on %s", got, a.ID, gpu0)
	}

	// The other Store releases a and grants gpu0 to b and gpu1 to a.
	if err := other.ReleasePlacement(ctx, a.ID, placedA.Placed[0].AllocationID, vocab.RunRequeued, "requeued", at(3)); err != nil {
		t.Fatal(err)
	}
	storetest.Place(t, other, "other-2", at(4), place(b.ID, "p", node, 1000, gpu0), place(a.ID, "p", node, 1000, gpu1))
	snap, err = s.LoadSnapshot(ctx, at(5))
	if err != nil {
		t.Fatal(err)
	}
	if got := held(snap); len(got) != 2 || got[gpu0] != b.ID || got[gpu1] != a.ID {
		t.Fatalf("after the other Store's changes: GPUs held %v, want %s on %s and %s on %s", got, b.ID, gpu0, a.ID, gpu1)
	}
	if len(snap.Running) != 2 || len(snap.Pending) != 1 || snap.Pending[0].ID != c.ID {
		t.Fatalf("running %d, pending %+v: want a and b running, c pending", len(snap.Running), snap.Pending)
	}

	// A plan made on a stale view (c onto gpu0, which b holds) is refused.
	out, err := s.ApplyCycle(ctx, "stale", &scheduling.Result{Placements: []scheduling.Placement{place(c.ID, "p", node, 1000, gpu0)}}, at(6))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Placed) != 0 || len(out.Conflicts) != 1 {
		t.Fatalf("placement onto a held GPU: placed %+v, conflicts %+v; want one conflict", out.Placed, out.Conflicts)
	}

	// The grant is fixed; the run and release columns are not.
	_, err = s.Pool().Exec(ctx, `UPDATE allocations SET gpu_uuids = ARRAY[$2] WHERE job_id = $1 AND released_at IS NULL`, b.ID, gpu1)
	if err == nil || !strings.Contains(err.Error(), "fixed at grant") {
		t.Fatalf("update of gpu_uuids: %v, want refused as fixed at grant", err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE allocations SET node = node, run_id = NULL WHERE job_id = $1 AND released_at IS NULL`, b.ID); err != nil {
		t.Fatalf("update leaving the grant as it is: %v", err)
	}
	snap, err = s.LoadSnapshot(ctx, at(7))
	if err != nil {
		t.Fatal(err)
	}
	if got := held(snap); len(got) != 2 || got[gpu0] != b.ID || got[gpu1] != a.ID {
		t.Fatalf("last load: GPUs held %v", got)
	}
	// What the cached loads give is what a Store with no cache reads.
	fresh, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	want, err := fresh.LoadSnapshot(ctx, at(7))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snap.Allocations, want.Allocations) || !reflect.DeepEqual(snap.Running, want.Running) ||
		!reflect.DeepEqual(snap.Pending, want.Pending) {
		t.Fatalf("cached load differs from a fresh Store's:\n%+v\n%+v\nwant\n%+v\n%+v", snap.Allocations, snap.Running, want.Allocations, want.Running)
	}
}
