package scheduling

import (
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// share is a one-GPU request of milli milli-GPU with cpu milli-cores.
func share(milli int, cpu int64) ResourceRequest {
	return ResourceRequest{GPUs: 1, GPUMilli: milli, Pool: "p", CPUMilli: cpu}
}

// TestFragOfHandMade: a node of 2 GPUs (one half used) and 8 cores against
// four request shapes, each worked out by the FGD paper's definition.
func TestFragOfHandMade(t *testing.T) {
	n := mkNode("a", 2, "T4", 16384, 0)
	n.CPUMilli = 8000
	pool := mkPool("p", n)
	wl := []WorkloadShape{
		{Request: share(600, 1000), Weight: 1},                                                                // fits g1: g0's 500 free is a fragment → 500
		{Request: ResourceRequest{GPUs: 1, Pool: "p", CPUMilli: 1000}, Weight: 1},                             // fits g1: g0's 500 → 500
		{Request: ResourceRequest{GPUs: 2, Pool: "p", Topology: TopologySameNode, CPUMilli: 1000}, Weight: 1}, // one free GPU: all 1500
		{Request: ResourceRequest{Pool: "p", CPUMilli: 16000}, Weight: 1},                                     // CPU never fits: all 1500
	}
	pk := NewPacker(&pool, PlacementFGD, wl)
	if out := pk.Place(&ResourceRequest{GPUs: 1, GPUMilli: 500, Pool: "p"}); !out.Placed {
		t.Fatalf("first share: %+v", out)
	}
	ps := pk.ps
	if got := ps.nodeFrag(0); got != 500+500+1500+1500 {
		t.Fatalf("weighted fragmentation %d, want 4000", got)
	}
	if st := pk.Stats(); st.FragmentedMilli != 1000 || st.AllocatedMilli != 500 || st.GPUsInUse != 1 || st.TotalMilli != 2000 {
		t.Fatalf("stats %+v, want 1000 fragmented of 1500 free", st)
	}
	// Spending 7.5 of the 8 cores makes every GPU shape fail on CPU: all
	// 1500 free milli fragment for all four.
	if got := ps.fragOf(0, 7500, 0, []int32{500, 0}); got != 4*1500 {
		t.Fatalf("CPU-bound fragmentation %d, want 6000", got)
	}
}

// TestFGDAvoidsTheFragmentBestFitMakes: against a workload of 600-milli
// shares, a 100-milli share on a GPU with 650 free leaves 550 no share can
// use; FGD (and gpugov's rule) take the empty GPU instead, best fit the
// partly used one.
func TestFGDAvoidsTheFragmentBestFitMakes(t *testing.T) {
	want := map[PlacementRule]string{PlacementBestFit: "a", PlacementFGD: "b", PlacementFragmentation: "b"}
	for _, rule := range PlacementRules {
		pool := mkPool("p", mkNode("a", 1, "T4", 16384, 0), mkNode("b", 1, "T4", 16384, 0))
		pk := NewPacker(&pool, rule, []WorkloadShape{{Request: share(600, 0), Weight: 1}})
		if out := pk.Place(&ResourceRequest{GPUs: 1, GPUMilli: 350, Pool: "p"}); out.Node != "a" {
			t.Fatalf("%s: first share on %+v, want a", rule, out)
		}
		if out := pk.Place(&ResourceRequest{GPUs: 1, GPUMilli: 100, Pool: "p"}); out.Node != want[rule] {
			t.Errorf("%s: second share on %q, want %s", rule, out.Node, want[rule])
		}
	}
}

// TestFragmentationKeepsCPURichNodesForCPU: a CPU-heavy CPU-only pod goes,
// under gpugov's rule, to the node whose CPU per GPU can spare it (it would
// strand the CPU-poor node's GPUs); FGD sees no fragmentation change on
// either and takes the first.
func TestFragmentationKeepsCPURichNodesForCPU(t *testing.T) {
	poor, rich := mkNode("a", 2, "T4", 16384, 0), mkNode("b", 2, "T4", 16384, 0)
	poor.CPUMilli, rich.CPUMilli = 16000, 64000
	wl := []WorkloadShape{{Request: share(500, 4000), Weight: 1}}
	for rule, want := range map[PlacementRule]string{PlacementFGD: "a", PlacementFragmentation: "b"} {
		pool := mkPool("p", poor, rich)
		pk := NewPacker(&pool, rule, wl)
		if out := pk.Place(&ResourceRequest{Pool: "p", CPUMilli: 4000}); out.Node != want {
			t.Errorf("%s: CPU-only pod on %+v, want %s", rule, out, want)
		}
	}
}

// TestPackerReasons: the wait reasons of requests that do not fit.
func TestPackerReasons(t *testing.T) {
	n := mkNode("a", 1, "T4", 16384, 0)
	n.CPUMilli = 4000
	pool := mkPool("p", n)
	pk := NewPacker(&pool, PlacementFragmentation, []WorkloadShape{{Request: share(500, 1000), Weight: 1}})
	cases := []struct {
		req  ResourceRequest
		want vocab.WaitReason
	}{
		{ResourceRequest{GPUs: 1, Pool: "p", GPUModels: []string{"A100"}}, vocab.ReasonNoMatchingCapacity},
		{share(500, 3500), ""},
		{share(400, 1000), vocab.ReasonFragmented}, // 500 milli free, but 500 milli-cores left
		{ResourceRequest{GPUs: 1, Pool: "p"}, vocab.ReasonCapacityBusy},
	}
	for i, tc := range cases {
		if out := pk.Place(&tc.req); out.Reason != tc.want || out.Placed != (tc.want == "") {
			t.Errorf("case %d: %+v, want reason %q", i, out, tc.want)
		}
	}
}

// TestPlanUsesThePlacementRule: Plan under Policy.Placement places as the
// Packer does (one search for both): the pending 600-milli share, part of
// the cycle's target workload, makes the higher-ranked 100-milli share avoid
// the GPU it would fragment, so both fit (under best fit the 600 fits too,
// on the empty GPU, but the partly used one is left with 550 free).
func TestPlanUsesThePlacementRule(t *testing.T) {
	for rule, want := range map[PlacementRule]string{PlacementBestFit: "a", PlacementFGD: "b", PlacementFragmentation: "b"} {
		s := &Snapshot{Pools: []Pool{mkPool("p", mkNode("a", 1, "T4", 16384, 0), mkNode("b", 1, "T4", 16384, 0))}}
		withRunning(s, mkRunning("r", vocab.TierStandard, "p", "a", 0, "a-gpu0"))
		s.Running[0].Allocation.GPUs[0].Milli = 350
		small := mkJob("small", vocab.TierProduction, 1, "p", 0)
		small.Request.GPUMilli = 100
		big := mkJob("big", vocab.TierExperiment, 1, "p", 0)
		big.Request.GPUMilli = 600
		s.Pending = []PendingJob{small, big}
		p := testPolicy()
		p.Placement = rule
		res := Plan(s, p, t0)
		if pl := placementOf(res, "small"); pl == nil || pl.Node != want {
			t.Errorf("%s: placement %+v, want node %s", rule, pl, want)
		}
		if pl := placementOf(res, "big"); pl == nil {
			t.Errorf("%s: the 600-milli share did not fit", rule)
		}
	}
}

func TestParsePlacementRule(t *testing.T) {
	if r, err := ParsePlacementRule(""); err != nil || r != PlacementBestFit {
		t.Fatalf("empty: %q %v", r, err)
	}
	if _, err := ParsePlacementRule("worstfit"); err == nil {
		t.Fatal("worstfit accepted")
	}
}
