package scheduling

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// gpusOf lists the UUIDs of a placement, sorted.
func gpusOf(p *Placement) string {
	var u []string
	for _, g := range p.GPUs {
		u = append(u, g.UUID)
	}
	sort.Strings(u)
	return strings.Join(u, ",")
}

// TestPlacement checks best fit and the request constraints.
func TestPlacement(t *testing.T) {
	tests := []struct {
		name  string
		build func() *Snapshot
		want  string // GPUs of job j, or "" for not placed
		node  string
	}{
		{
			name: "best fit node leaves the big free group whole",
			build: func() *Snapshot {
				a, b := mkNode("a", 8, "A100", 81920, 0), mkNode("b", 8, "A100", 81920, 0)
				j := mkJob("j", vocab.TierStandard, 2, "p", 0)
				j.Request.Topology = TopologySameNode
				s := &Snapshot{Pools: []Pool{mkPool("p", a, b)}, Pending: []PendingJob{j}}
				withRunning(s, busyNode("p", b, 0, 1, 2, 3, 4)...) // b has 3 free, a has 8
				return s
			},
			want: "b-gpu5,b-gpu6", node: "b",
		},
		{
			name: "best fit NVLink domain",
			build: func() *Snapshot {
				a := mkNode("a", 8, "H100", 81920, 4)
				j := mkJob("j", vocab.TierStandard, 2, "p", 0)
				j.Request.Topology = TopologyNVLinkDomain
				s := &Snapshot{Pools: []Pool{mkPool("p", a)}, Pending: []PendingJob{j}}
				withRunning(s, busyNode("p", a, 4, 5)...) // nvl0: 4 free, nvl1: 2 free
				return s
			},
			want: "a-gpu6,a-gpu7", node: "a",
		},
		{
			name: "nvlink-domain needs one domain",
			build: func() *Snapshot {
				a := mkNode("a", 8, "H100", 81920, 4)
				j := mkJob("j", vocab.TierStandard, 4, "p", 0)
				j.Request.Topology = TopologyNVLinkDomain
				s := &Snapshot{Pools: []Pool{mkPool("p", a)}, Pending: []PendingJob{j}}
				withRunning(s, busyNode("p", a, 0, 4)...) // 3 + 3 free
				return s
			},
			want: "",
		},
		{
			name: "share packs onto a partly used GPU",
			build: func() *Snapshot {
				a := mkNode("a", 2, "T4", 15360, 0)
				j := mkJob("j", vocab.TierStandard, 1, "p", 0)
				j.Request.GPUMilli = 250
				s := &Snapshot{Pools: []Pool{mkPool("p", a)}, Pending: []PendingJob{j}}
				r := mkRunning("half", vocab.TierStandard, "p", "a", time.Hour, "a-gpu1")
				r.Allocation.GPUs[0].Milli = 500
				withRunning(s, r)
				return s
			},
			want: "a-gpu1", node: "a",
		},
		{
			name: "share skips a GPU without room",
			build: func() *Snapshot {
				a := mkNode("a", 2, "T4", 15360, 0)
				j := mkJob("j", vocab.TierStandard, 1, "p", 0)
				j.Request.GPUMilli = 600
				s := &Snapshot{Pools: []Pool{mkPool("p", a)}, Pending: []PendingJob{j}}
				r := mkRunning("half", vocab.TierStandard, "p", "a", time.Hour, "a-gpu0")
				r.Allocation.GPUs[0].Milli = 500
				withRunning(s, r)
				return s
			},
			want: "a-gpu1", node: "a",
		},
		{
			name: "whole GPU never lands on a shared one",
			build: func() *Snapshot {
				a := mkNode("a", 1, "T4", 15360, 0)
				s := &Snapshot{Pools: []Pool{mkPool("p", a)}, Pending: []PendingJob{mkJob("j", vocab.TierStandard, 1, "p", 0)}}
				r := mkRunning("sliver", vocab.TierStandard, "p", "a", time.Hour, "a-gpu0")
				r.Allocation.GPUs[0].Milli = 100
				withRunning(s, r)
				return s
			},
			want: "",
		},
		{
			name: "model and memory filter",
			build: func() *Snapshot {
				a, b := mkNode("a", 4, "A100-40GB", 40960, 0), mkNode("b", 4, "H100", 81920, 0)
				j := mkJob("j", vocab.TierStandard, 1, "p", 0)
				j.Request.GPUMemoryMiB = 81920
				j.Request.GPUModels = []string{"H200", "H100"}
				return &Snapshot{Pools: []Pool{mkPool("p", a, b)}, Pending: []PendingJob{j}}
			},
			want: "b-gpu0", node: "b",
		},
		{
			name: "unhealthy GPU and cordoned node are skipped",
			build: func() *Snapshot {
				a, b := mkNode("a", 2, "A100", 81920, 0), mkNode("b", 2, "A100", 81920, 0)
				a.GPUs[0].Healthy = false
				b.Schedulable = false
				j := mkJob("j", vocab.TierStandard, 2, "p", 0)
				return &Snapshot{Pools: []Pool{mkPool("p", a, b)}, Pending: []PendingJob{j}}
			},
			want: "",
		},
		{
			name: "node CPU and memory",
			build: func() *Snapshot {
				a, b := mkNode("a", 4, "A100", 81920, 0), mkNode("b", 4, "A100", 81920, 0)
				a.CPUMilli, a.MemoryMiB = 16000, 65536
				b.CPUMilli, b.MemoryMiB = 64000, 262144
				j := mkJob("j", vocab.TierStandard, 1, "p", 0)
				j.Request.CPUMilli, j.Request.MemoryMiB = 12000, 131072
				s := &Snapshot{Pools: []Pool{mkPool("p", a, b)}, Pending: []PendingJob{j}}
				r := mkRunning("cpu", vocab.TierStandard, "p", "b", time.Hour, "b-gpu0")
				r.Allocation.CPUMilli, r.Allocation.MemoryMiB = 48000, 65536
				withRunning(s, r) // b has 16000 milli-CPU left; a lacks memory
				return s
			},
			want: "b-gpu1", node: "b",
		},
		{
			name: "any topology spreads over small groups",
			build: func() *Snapshot {
				a, b, c := mkNode("a", 4, "A100", 81920, 0), mkNode("b", 4, "A100", 81920, 0), mkNode("c", 4, "A100", 81920, 0)
				j := mkJob("j", vocab.TierStandard, 5, "p", 0)
				s := &Snapshot{Pools: []Pool{mkPool("p", a, b, c)}, Pending: []PendingJob{j}}
				withRunning(s, busyNode("p", a, 0, 1)...)
				withRunning(s, busyNode("p", b, 0)...)
				return s // a: 2 free, b: 3, c: 4 → take a and b, keep c whole
			},
			want: "a-gpu2,a-gpu3,b-gpu1,b-gpu2,b-gpu3", node: "a",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Plan(tc.build(), testPolicy(), t0)
			pl := placementOf(res, "j")
			if tc.want == "" {
				if pl != nil {
					t.Fatalf("placed %+v", pl)
				}
				return
			}
			if pl == nil {
				t.Fatalf("not placed: %+v", res.Waiting)
			}
			if gpusOf(pl) != tc.want || pl.Node != tc.node {
				t.Fatalf("placed on %s %s, want %s %s", pl.Node, gpusOf(pl), tc.node, tc.want)
			}
		})
	}
}

// TestPlacementsShareCapacity checks that jobs of one cycle see each other's
// placements: three 400-milli shares fit two per GPU on two GPUs.
func TestPlacementsShareCapacity(t *testing.T) {
	a := mkNode("a", 2, "T4", 15360, 0)
	var pending []PendingJob
	for i, id := range []string{"s1", "s2", "s3", "s4", "s5"} {
		j := mkJob(id, vocab.TierStandard, 1, "p", time.Duration(10-i)*time.Minute)
		j.Request.GPUMilli = 400
		pending = append(pending, j)
	}
	res := Plan(&Snapshot{Pools: []Pool{mkPool("p", a)}, Pending: pending}, testPolicy(), t0)
	if len(res.Placements) != 4 || placementOf(res, "s2").GPUs[0].UUID != placementOf(res, "s1").GPUs[0].UUID {
		t.Fatalf("placements %+v", res.Placements)
	}
	if w := waitOf(res, "s5"); w == nil || w.Reason != vocab.ReasonCapacityBusy {
		t.Fatalf("s5 %+v", w)
	}
}
