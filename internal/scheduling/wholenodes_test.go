package scheduling

import (
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestWholeNodes checks the whole-nodes topology: a 16-GPU request takes
// the two nodes with every GPU free (lowest first), never the free GPUs of
// a partly used node, and waits, naming whole nodes, when fewer than two
// nodes are whole, though the pool has 16 GPUs free in all.
func TestWholeNodes(t *testing.T) {
	mk := func(busyA, busyC bool) *Snapshot {
		a, b, c, d := mkNode("a", 8, "V100", 16384, 0), mkNode("b", 8, "V100", 16384, 0),
			mkNode("c", 8, "V100", 16384, 0), mkNode("d", 4, "V100", 16384, 0)
		j := mkJob("j", vocab.TierStandard, 16, "p", 0)
		j.Request.Topology = TopologyWholeNodes
		s := &Snapshot{Pools: []Pool{mkPool("p", a, b, c, d)}, Pending: []PendingJob{j}}
		withRunning(s, busyNode("p", d, 0)...) // d: 3 of 4 free, never whole
		if busyA {
			withRunning(s, busyNode("p", a, 7)...)
		}
		if busyC {
			withRunning(s, busyNode("p", c, 0)...)
		}
		return s
	}
	res := Plan(mk(true, false), testPolicy(), t0)
	p := placementOf(res, "j")
	if p == nil {
		t.Fatalf("not placed: %+v", res.Waiting)
	}
	for _, g := range p.GPUs {
		if !strings.HasPrefix(g.UUID, "b-") && !strings.HasPrefix(g.UUID, "c-") {
			t.Errorf("placement %s uses a node that is not whole", gpusOf(p))
			break
		}
	}
	if len(p.GPUs) != 16 || p.Node != "b" {
		t.Errorf("placement on %s: %s", p.Node, gpusOf(p))
	}
	res = Plan(mk(true, true), testPolicy(), t0)
	w := waitOf(res, "j")
	if w == nil || placementOf(res, "j") != nil {
		t.Fatalf("placed with one whole node: %+v", res.Placements)
	}
	t.Logf("wait %s: %s", w.Reason, w.Detail)
	if !strings.Contains(w.Detail, "whole") {
		t.Errorf("wait %s: %q does not name whole nodes", w.Reason, w.Detail)
	}
}
