package store_test

import (
	"context"
	"testing"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// TestSnapshotInventoryVersion checks that LoadSnapshot's InventoryVersion
// (the key of scheduling.Planner's reuse) stays while the inventory does,
// moves with an agent report that changes a GPU's health and with an import
// that changes a node, and stays on a repeated, unchanged report.
func TestSnapshotInventoryVersion(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 2, 2)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	version := func() int64 {
		t.Helper()
		snap, err := s.LoadSnapshot(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if snap.InventoryVersion == 0 {
			t.Fatal("snapshot InventoryVersion is 0")
		}
		return snap.InventoryVersion
	}
	v0 := version()
	if v := version(); v != v0 {
		t.Fatalf("InventoryVersion moved %d -> %d with no change", v0, v)
	}
	// An agent report: GPU 0 of node 1 turned unhealthy (same counts).
	n1 := pool.Nodes[1]
	n1.GPUs = append(n1.GPUs[:0:0], n1.GPUs...)
	n1.GPUs[0].Healthy = false
	if _, err := s.UpsertNode(ctx, "p", n1, "agent@"+n1.Name); err != nil {
		t.Fatal(err)
	}
	v1 := version()
	if v1 == v0 {
		t.Fatal("a GPU health change did not move InventoryVersion")
	}
	if _, err := s.UpsertNode(ctx, "p", n1, "agent@"+n1.Name); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != v1 {
		t.Fatalf("an unchanged report moved InventoryVersion %d -> %d", v1, v)
	}
	// An import cordons node 0.
	imported := testPool("p", 2, 2)
	imported.Nodes[1] = n1
	imported.Nodes[0].Schedulable = false
	if err := s.UpsertInventory(ctx, []scheduling.Pool{imported}); err != nil {
		t.Fatal(err)
	}
	if v := version(); v == v1 {
		t.Fatal("an import that cordons a node did not move InventoryVersion")
	}
}
