package scheduling

import (
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// labelled returns n with labels set.
func labelled(n Node, kv ...string) Node {
	n.Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

// selectorPool is four 2-GPU nodes: a, b on ethernet, c unlabelled, d on
// InfiniBand with local NVMe.
func selectorPool() []Node {
	return []Node{
		labelled(mkNode("a", 2, "H100", 81920, 0), "network", "ethernet"),
		labelled(mkNode("b", 2, "H100", 81920, 0), "network", "ethernet", "storage", "local-nvme"),
		mkNode("c", 2, "H100", 81920, 0),
		labelled(mkNode("d", 2, "H100", 81920, 0), "network", "infiniband", "storage", "local-nvme", "hostname", "d"),
	}
}

// withSelector returns job j asking for the node selector kv.
func withSelector(j PendingJob, kv ...string) PendingJob {
	j.Request.NodeSelector = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		j.Request.NodeSelector[kv[i]] = kv[i+1]
	}
	return j
}

// planBoth runs Plan through the free-capacity index and the reference scans
// and fails when they disagree on the job's node or wait reason.
func planBoth(t *testing.T, s *Snapshot, job string) (*Result, *Result) {
	t.Helper()
	fast, slow := plan(s, testPolicy(), t0, false, nil), plan(s, testPolicy(), t0, true, nil)
	fp, sp := placementOf(fast, job), placementOf(slow, job)
	if (fp == nil) != (sp == nil) || (fp != nil && (fp.Node != sp.Node || gpusOf(fp) != gpusOf(sp))) {
		t.Fatalf("fast and slow placements differ: %+v vs %+v", fp, sp)
	}
	fw, sw := waitOf(fast, job), waitOf(slow, job)
	if (fw == nil) != (sw == nil) || (fw != nil && (fw.Reason != sw.Reason || fw.Detail != sw.Detail)) {
		t.Fatalf("fast and slow waits differ: %+v vs %+v", fw, sw)
	}
	return fast, slow
}

// TestNodeSelectorPlacement checks that a job with a node selector is placed
// only on nodes whose labels hold every pair, for GPU and host-only requests.
func TestNodeSelectorPlacement(t *testing.T) {
	tests := []struct {
		name string
		job  PendingJob
		want string // node, "" for not placed
	}{
		{"one key", withSelector(mkJob("j", vocab.TierStandard, 2, "p", 0), "network", "infiniband"), "d"},
		{"two keys need both", withSelector(mkJob("j", vocab.TierStandard, 1, "p", 0), "network", "ethernet", "storage", "local-nvme"), "b"},
		{"storage alone", withSelector(mkJob("j", vocab.TierStandard, 2, "p", 0), "storage", "local-nvme"), "b"},
		{"host only", func() PendingJob {
			j := withSelector(mkJob("j", vocab.TierStandard, 0, "p", 0), "network", "infiniband")
			j.Request.CPUMilli = 1000
			return j
		}(), "d"},
		{"spread any", func() PendingJob {
			j := withSelector(mkJob("j", vocab.TierStandard, 4, "p", 0), "storage", "local-nvme")
			j.Request.Topology = TopologyAny
			return j
		}(), "b"},
		{"no selector uses any node", mkJob("j", vocab.TierStandard, 2, "p", 0), "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Snapshot{Pools: []Pool{mkPool("p", selectorPool()...)}, Pending: []PendingJob{tc.job}}
			r, _ := planBoth(t, s, "j")
			p := placementOf(r, "j")
			if p == nil {
				t.Fatalf("not placed: %+v", waitOf(r, "j"))
			}
			if p.Node != tc.want {
				t.Fatalf("placed on %s (%s), want %s", p.Node, gpusOf(p), tc.want)
			}
			if tc.name == "spread any" && gpusOf(p) != "b-gpu0,b-gpu1,d-gpu0,d-gpu1" {
				t.Fatalf("spread over %s, want b and d only", gpusOf(p))
			}
		})
	}
}

// TestNodeSelectorWaits checks the wait details: a busy matching node gives a
// capacity reason that counts the ruled-out nodes, and a selector matching no
// schedulable node gives no_matching_capacity.
func TestNodeSelectorWaits(t *testing.T) {
	t.Run("matching node busy", func(t *testing.T) {
		nodes := selectorPool()
		j := withSelector(mkJob("j", vocab.TierStandard, 1, "p", 0), "network", "infiniband")
		other := mkJob("k", vocab.TierStandard, 1, "p", 0)
		s := &Snapshot{Pools: []Pool{mkPool("p", nodes...)}, Pending: []PendingJob{j, other}}
		withRunning(s, busyNode("p", nodes[3], 0, 1)...)
		r, _ := planBoth(t, s, "j")
		w := waitOf(r, "j")
		if w == nil || w.Reason != vocab.ReasonCapacityBusy {
			t.Fatalf("wait = %+v, want capacity_busy", w)
		}
		for _, part := range []string{"node_selector network=infiniband rules out 3 of 4 schedulable nodes", "2 match in pool, 0 free"} {
			if !strings.Contains(w.Detail, part) {
				t.Fatalf("detail %q lacks %q", w.Detail, part)
			}
		}
		if placementOf(r, "k") == nil {
			t.Fatalf("job without selector not placed: %+v", waitOf(r, "k"))
		}
	})
	t.Run("cordoned nodes are not counted", func(t *testing.T) {
		nodes := selectorPool()
		nodes[0].Schedulable = false
		j := withSelector(mkJob("j", vocab.TierStandard, 4, "p", 0), "network", "infiniband")
		s := &Snapshot{Pools: []Pool{mkPool("p", nodes...)}, Pending: []PendingJob{j}}
		r, _ := planBoth(t, s, "j")
		w := waitOf(r, "j")
		if w == nil || w.Reason != vocab.ReasonNoMatchingCapacity {
			t.Fatalf("wait = %+v, want no_matching_capacity", w)
		}
		if want := "rules out 2 of 3 schedulable nodes; pool p has 2 matching healthy GPUs"; !strings.Contains(w.Detail, want) {
			t.Fatalf("detail %q lacks %q", w.Detail, want)
		}
	})
	for _, tc := range []struct {
		name string
		gpus int
		kv   []string
	}{
		{"unknown value", 1, []string{"network", "omni-path"}},
		{"unknown key", 1, []string{"rack", "r1"}},
		{"pairs on different nodes", 1, []string{"network", "infiniband", "storage", "nfs"}},
		{"host only", 0, []string{"network", "omni-path"}},
	} {
		t.Run("no match: "+tc.name, func(t *testing.T) {
			j := withSelector(mkJob("j", vocab.TierStandard, tc.gpus, "p", 0), tc.kv...)
			s := &Snapshot{Pools: []Pool{mkPool("p", selectorPool()...)}, Pending: []PendingJob{j}}
			r, _ := planBoth(t, s, "j")
			w := waitOf(r, "j")
			if w == nil || w.Reason != vocab.ReasonNoMatchingCapacity {
				t.Fatalf("wait = %+v, want no_matching_capacity", w)
			}
			for _, part := range []string{"rules out 4 of 4 schedulable nodes", "no schedulable node matches the node selector"} {
				if !strings.Contains(w.Detail, part) {
					t.Fatalf("detail %q lacks %q", w.Detail, part)
				}
			}
		})
	}
}

// TestNodeSelectorClasses checks that node labels split GPU classes only by
// the keys some pending selector names, so labels no job asks for (here a
// per-node hostname) leave the class count and the free-capacity index as
// they were.
func TestNodeSelectorClasses(t *testing.T) {
	nodes := selectorPool()
	for i := range nodes {
		nodes[i] = labelled(nodes[i], "hostname", nodes[i].Name, "network", nodes[i].Labels["network"])
	}
	plain := &Snapshot{Pools: []Pool{mkPool("p", nodes...)}, Pending: []PendingJob{mkJob("j", vocab.TierStandard, 1, "p", 0)}}
	if n := len(buildCapacity(plain).pools["p"].classes); n != 1 {
		t.Fatalf("classes without selectors = %d, want 1", n)
	}
	sel := &Snapshot{Pools: plain.Pools, Pending: []PendingJob{withSelector(mkJob("j", vocab.TierStandard, 1, "p", 0), "network", "infiniband")}}
	// network: ethernet (a, b), "" (c, labelled with an empty value), infiniband (d).
	if n := len(buildCapacity(sel).pools["p"].classes); n != 3 {
		t.Fatalf("classes with a network selector = %d, want 3", n)
	}
}

// TestNodeSelectorShapeKey checks that the selector is part of the shape key,
// independent of map order, and that labels are not.
func TestNodeSelectorShapeKey(t *testing.T) {
	var scratch []string
	key := func(r ResourceRequest) string { return string(shapeKeyBytes(nil, &r, &scratch)) }
	base := ResourceRequest{GPUs: 1, Pool: "p", GPUModels: []string{"H200", "H100"}}
	ib := base
	ib.NodeSelector = map[string]string{"network": "infiniband", "storage": "local-nvme", "zone": "z1"}
	ib2 := base
	ib2.NodeSelector = map[string]string{"zone": "z1", "storage": "local-nvme", "network": "infiniband"}
	eth := base
	eth.NodeSelector = map[string]string{"network": "ethernet", "storage": "local-nvme", "zone": "z1"}
	swapped := base // key and value swapped must not collide
	swapped.NodeSelector = map[string]string{"networkinfiniband": ""}
	lab := base
	lab.Labels = map[string]string{"job_type": "training"}
	if key(ib) != key(ib2) {
		t.Fatal("selector key depends on map order")
	}
	if key(ib) == key(base) || key(ib) == key(eth) || key(swapped) == key(base) {
		t.Fatal("different selectors share a shape key")
	}
	if key(lab) != key(base) {
		t.Fatal("labels changed the shape key")
	}
}
