package store_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// nodeLabels returns the labels of the named node of a loaded inventory.
func nodeLabels(t *testing.T, pools []scheduling.Pool, node string) map[string]string {
	t.Helper()
	for _, p := range pools {
		for _, n := range p.Nodes {
			if n.Name == node {
				return n.Labels
			}
		}
	}
	t.Fatalf("node %s not in inventory", node)
	return nil
}

// TestNodeLabelsRoundTrip checks that node labels written by UpsertInventory
// and UpsertNode come back from GetInventory and LoadSnapshot, that a label
// change moves inventory_version (so the snapshot's cached inventory is
// reread) and is audited, and that an unchanged report moves nothing.
func TestNodeLabelsRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	pool := testPool("p", 2, 1)
	ib := map[string]string{"network": "infiniband", "storage": "local-nvme"}
	pool.Nodes[0].Labels = ib
	if err := s.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	inv, err := s.GetInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeLabels(t, inv, "p-n0000"); !maps.Equal(got, ib) {
		t.Fatalf("labels = %v, want %v", got, ib)
	}
	if got := nodeLabels(t, inv, "p-n0001"); got != nil {
		t.Fatalf("unlabelled node has labels %v", got)
	}
	snap, err := s.LoadSnapshot(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeLabels(t, snap.Pools, "p-n0000"); !maps.Equal(got, ib) {
		t.Fatalf("snapshot labels = %v, want %v", got, ib)
	}
	// The snapshot is the caller's: changing it leaves the cached inventory alone.
	snap.Pools[0].Nodes[0].Labels["network"] = "changed"

	// The agent reports new labels for node 1: inventory_version moves and the
	// next snapshot sees them; the change is audited.
	version := queryInt(t, s, `SELECT version FROM inventory_version`)
	n1 := pool.Nodes[1]
	n1.Labels = map[string]string{"network": "ethernet"}
	change, err := s.UpsertNode(ctx, "p", n1, "agent@p-n0001")
	if err != nil {
		t.Fatal(err)
	}
	if !change.LabelsChanged || change.HostChanged || !change.Changed() {
		t.Fatalf("change = %+v, want labels changed only", change)
	}
	if v := queryInt(t, s, `SELECT version FROM inventory_version`); v == version {
		t.Fatal("a label change did not move inventory_version")
	}
	if n := queryInt(t, s, `SELECT count(*) FROM audit_log WHERE subject = 'node/p-n0001' AND evidence ? 'labels_changed'`); n != 1 {
		t.Fatalf("%d audit entries with labels_changed, want 1", n)
	}
	snap, err = s.LoadSnapshot(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeLabels(t, snap.Pools, "p-n0001"); !maps.Equal(got, n1.Labels) {
		t.Fatalf("snapshot after the report: labels = %v, want %v", got, n1.Labels)
	}
	if got := nodeLabels(t, snap.Pools, "p-n0000"); !maps.Equal(got, ib) {
		t.Fatalf("cached inventory changed through a caller's snapshot: %v", got)
	}

	// The same report again changes nothing.
	version = queryInt(t, s, `SELECT version FROM inventory_version`)
	again, err := s.UpsertNode(ctx, "p", n1, "agent@p-n0001")
	if err != nil || again.Changed() {
		t.Fatalf("repeat report: %+v, %v", again, err)
	}
	if v := queryInt(t, s, `SELECT version FROM inventory_version`); v != version {
		t.Fatalf("inventory_version moved %d -> %d on an unchanged report", version, v)
	}
	// Dropping the labels is a change too.
	n1.Labels = nil
	if change, err := s.UpsertNode(ctx, "p", n1, "agent@p-n0001"); err != nil || !change.LabelsChanged {
		t.Fatalf("dropping labels: %+v, %v", change, err)
	}
}

// TestNodeLabelsRejected checks that bad labels are refused with an
// ErrInvalid naming the field and nothing is stored.
func TestNodeLabelsRejected(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	for _, tc := range []struct {
		labels map[string]string
		field  string
	}{
		{map[string]string{"network": ""}, "node.labels.network"},
		{map[string]string{"": "x"}, "node.labels"},
		{map[string]string{"k": strings.Repeat("v", inventory.MaxLabelLength+1)}, "node.labels.k"},
	} {
		n := agentNode("gpu-01", []string{"GPU-a"})
		n.Labels = tc.labels
		_, err := s.UpsertNode(ctx, "p", n, "agent")
		var ve *store.ValidationError
		if !errors.Is(err, store.ErrInvalid) || !errors.As(err, &ve) || ve.Field != tc.field {
			t.Fatalf("labels %v: err = %v, want ErrInvalid on %s", tc.labels, err, tc.field)
		}
	}
	pool := testPool("p", 1, 1)
	pool.Nodes[0].Labels = map[string]string{"rack": ""}
	err := s.UpsertInventory(ctx, []scheduling.Pool{pool})
	var ve *store.ValidationError
	if !errors.Is(err, store.ErrInvalid) || !errors.As(err, &ve) || ve.Field != "pools[0].nodes[0].labels.rack" {
		t.Fatalf("UpsertInventory err = %v, want ErrInvalid on pools[0].nodes[0].labels.rack", err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM nodes`); n != 0 {
		t.Fatalf("%d nodes stored after rejected input", n)
	}
}

// TestNodeSelectorRoundTrip checks that a job's node selector is stored with
// its request and comes back from GetJob and, through job_queue, from
// LoadSnapshot; its descriptive labels stay apart.
func TestNodeSelectorRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 2)}); err != nil {
		t.Fatal(err)
	}
	sel := map[string]string{"network": "infiniband", "storage": "local-nvme"}
	labels := map[string]string{store.JobTypeLabel: "training"}
	job := storetest.Submit(t, s, &store.NewJob{
		Project: "vision", Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0,
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p", Labels: labels, NodeSelector: sel},
	})
	plain := submit(t, s, "vision", "p", 1, 0)
	got, err := s.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Request.NodeSelector, sel) || !maps.Equal(got.Request.Labels, labels) {
		t.Fatalf("stored request = %+v", got.Request)
	}
	snap, err := s.LoadSnapshot(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, pj := range snap.Pending {
		switch pj.ID {
		case job.ID:
			found++
			if !maps.Equal(pj.Request.NodeSelector, sel) || !maps.Equal(pj.Request.Labels, labels) {
				t.Fatalf("snapshot request = %+v", pj.Request)
			}
		case plain.ID:
			found++
			if pj.Request.NodeSelector != nil {
				t.Fatalf("job without selector loaded with %v", pj.Request.NodeSelector)
			}
		}
	}
	if found != 2 {
		t.Fatalf("%d of 2 jobs in the snapshot", found)
	}
}
