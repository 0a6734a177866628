package scheduling

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// applySuggestion returns r with the suggestion's change applied, as a
// submitter would write it in an amended spec.
func applySuggestion(t *testing.T, r ResourceRequest, s Suggestion) ResourceRequest {
	t.Helper()
	switch s.Field {
	case FieldGPUModels:
		r.GPUModels = strings.Split(s.Value, ",")
	case FieldGPUMemoryMiB:
		m, err := strconv.ParseInt(s.Value, 10, 64)
		if err != nil {
			t.Fatalf("memory value %q: %v", s.Value, err)
		}
		r.GPUMemoryMiB = m
	case FieldGPUs:
		n, err := strconv.Atoi(s.Value)
		if err != nil {
			t.Fatalf("gpus value %q: %v", s.Value, err)
		}
		r.GPUs = n
	case FieldTopology:
		r.Topology = Topology(s.Value)
	case FieldNodeSelector:
		r.NodeSelector = nil
		for _, kv := range strings.Split(s.Value, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				if r.NodeSelector == nil {
					r.NodeSelector = map[string]string{}
				}
				r.NodeSelector[k] = v
			}
		}
	default:
		t.Fatalf("unknown suggestion field %q", s.Field)
	}
	return r
}

// withRequest returns a copy of s whose pending job id asks for r.
func withRequest(s *Snapshot, id string, r ResourceRequest) *Snapshot {
	c := *s
	c.Pending = append([]PendingJob(nil), s.Pending...)
	for i := range c.Pending {
		if c.Pending[i].ID == id {
			c.Pending[i].Request = r
		}
	}
	return &c
}

// checkSuggestions proves every suggestion of job id: the changed request is
// placed by Plan when the suggestion says it fits now, and otherwise is no
// longer no_matching_capacity and is placed on the same pool with nothing
// allocated.
func checkSuggestions(t *testing.T, s *Snapshot, id string, w *WaitStatus) {
	t.Helper()
	var orig ResourceRequest
	for _, j := range s.Pending {
		if j.ID == id {
			orig = j.Request
		}
	}
	for _, sg := range w.Suggestions {
		changed := applySuggestion(t, orig, sg)
		r := Plan(withRequest(s, id, changed), testPolicy(), t0)
		if sg.Now {
			if placementOf(r, id) == nil {
				t.Errorf("suggestion %q: changed request not placed: %+v", sg.Text, waitOf(r, id))
			}
			continue
		}
		if w := waitOf(r, id); w != nil && w.Reason == vocab.ReasonNoMatchingCapacity {
			t.Errorf("suggestion %q: changed request still no_matching_capacity: %s", sg.Text, w.Detail)
		}
		empty := withRequest(s, id, changed)
		empty.Running, empty.Allocations = nil, nil
		if placementOf(Plan(empty, testPolicy(), t0), id) == nil {
			t.Errorf("suggestion %q: changed request does not fit the empty pool", sg.Text)
		}
	}
}

// TestSuggestions checks the nearest-fit suggestions of no_matching_capacity
// and fragmented waits on crafted pools: which fields are suggested, with
// which values and texts, and (checkSuggestions) that each one fits.
func TestSuggestions(t *testing.T) {
	type want struct{ field, value, text string }
	busy := func(s *Snapshot, n Node, idx ...int) *Snapshot { withRunning(s, busyNode("p", n, idx...)...); return s }
	h100 := mkNode("h", 4, "H100", 81920, 0)
	a100 := mkNode("a", 4, "A100-80GB", 81920, 0)
	a40 := mkNode("s", 8, "A100-40GB", 40960, 0)
	n1, n2 := mkNode("n1", 4, "H100", 81920, 0), mkNode("n2", 4, "H100", 81920, 0)
	dgx := mkNode("dgx", 8, "H100", 81920, 4)
	tests := []struct {
		name   string
		snap   *Snapshot
		job    PendingJob
		reason vocab.WaitReason
		want   []want
	}{
		{"model not in pool", &Snapshot{Pools: []Pool{mkPool("p", h100, a100)}},
			func() PendingJob {
				j := mkJob("j", vocab.TierStandard, 4, "p", 0)
				j.Request.GPUModels = []string{"H200"}
				return j
			}(), vocab.ReasonNoMatchingCapacity,
			[]want{{FieldGPUModels, "H200,A100-80GB", "fits now if gpu_models also allows A100-80GB: 4 matching GPUs, 4 free"}}},
		{"memory above every GPU, lower memory free", &Snapshot{Pools: []Pool{mkPool("p", a40)}},
			func() PendingJob {
				j := mkJob("j", vocab.TierStandard, 2, "p", 0)
				j.Request.GPUMemoryMiB = 81920
				return j
			}(), vocab.ReasonNoMatchingCapacity,
			[]want{{FieldGPUMemoryMiB, "40960", "fits now with gpu_memory_mib ≤ 40960: 8 matching GPUs, 8 free"}}},
		{"memory above every GPU, lower memory busy", busy(&Snapshot{Pools: []Pool{mkPool("p", a40)}}, a40, 0, 1, 2, 3, 4, 5, 6, 7),
			func() PendingJob {
				j := mkJob("j", vocab.TierStandard, 2, "p", 0)
				j.Request.GPUMemoryMiB = 81920
				return j
			}(), vocab.ReasonNoMatchingCapacity,
			[]want{{FieldGPUMemoryMiB, "40960", "fits when its GPUs are free with gpu_memory_mib ≤ 40960: 8 matching GPUs, 0 free"}}},
		{"more GPUs on one node than any node has", &Snapshot{Pools: []Pool{mkPool("p", n1, n2)}},
			func() PendingJob {
				j := mkJob("j", vocab.TierStandard, 6, "p", 0)
				j.Request.Topology = TopologySameNode
				return j
			}(), vocab.ReasonNoMatchingCapacity,
			[]want{{FieldGPUs, "4", "fits now with gpus ≤ 4 on one node: 8 matching GPUs, 8 free"},
				{FieldTopology, "any", "fits now with topology any: 8 matching GPUs, 8 free"}}},
		{"nvlink domain smaller than the request", &Snapshot{Pools: []Pool{mkPool("p", dgx)}},
			func() PendingJob {
				j := mkJob("j", vocab.TierStandard, 8, "p", 0)
				j.Request.Topology = TopologyNVLinkDomain
				return j
			}(), vocab.ReasonNoMatchingCapacity,
			[]want{{FieldGPUs, "4", "fits now with gpus ≤ 4 in one NVLink domain: 8 matching GPUs, 8 free"},
				{FieldTopology, "same-node", "fits now with topology same-node: 8 matching GPUs, 8 free"}}},
		{"fragmented over two nodes", busy(busy(&Snapshot{Pools: []Pool{mkPool("p", n1, n2)}}, n1, 0, 1), n2, 0, 1),
			func() PendingJob {
				j := mkJob("j", vocab.TierStandard, 4, "p", 0)
				j.Request.Topology = TopologySameNode
				return j
			}(), vocab.ReasonFragmented,
			[]want{{FieldGPUs, "2", "fits now with gpus ≤ 2 on one node: 8 matching GPUs, 4 free"},
				{FieldTopology, "any", "fits now with topology any: 8 matching GPUs, 4 free"}}},
		{"selector pair no node has", &Snapshot{Pools: []Pool{mkPool("p", selectorPool()...)}},
			withSelector(mkJob("j", vocab.TierStandard, 2, "p", 0), "network", "infiniband", "storage", "nfs"),
			vocab.ReasonNoMatchingCapacity,
			[]want{{FieldNodeSelector, "network=infiniband", "fits now without node_selector storage=nfs: 1 nodes, 2 matching GPUs, 2 free"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.snap.Pending = []PendingJob{tc.job}
			r, _ := planBoth(t, tc.snap, "j")
			w := waitOf(r, "j")
			if w == nil || w.Reason != tc.reason {
				t.Fatalf("wait = %+v, want %s", w, tc.reason)
			}
			checkSuggestions(t, tc.snap, "j", w)
			if len(w.Suggestions) != len(tc.want) {
				t.Fatalf("suggestions = %+v, want %d", w.Suggestions, len(tc.want))
			}
			for i, wt := range tc.want {
				got := w.Suggestions[i]
				if got.Field != wt.field || got.Value != wt.value || got.Text != wt.text {
					t.Errorf("suggestion %d = %s %q %q, want %s %q %q", i, got.Field, got.Value, got.Text, wt.field, wt.value, wt.text)
				}
			}
		})
	}
}

// TestSuggestionsBounded checks the cap and order: a request that five
// single changes would make fit gets MaxSuggestions, those that fit now
// first (the model change, whose GPUs are busy, is cut).
func TestSuggestionsBounded(t *testing.T) {
	zone := func(n Node, z string) Node { return labelled(n, "zone", z) }
	x := zone(mkNode("x", 8, "A100-80GB", 81920, 8), "z1") // busy
	z := zone(mkNode("z", 8, "H100", 40960, 8), "z1")
	y := zone(mkNode("y", 8, "H100", 81920, 4), "z1")
	w2 := zone(mkNode("w", 8, "H100", 81920, 8), "z2")
	j := withSelector(mkJob("j", vocab.TierStandard, 8, "p", 0), "zone", "z1")
	j.Request.GPUModels, j.Request.GPUMemoryMiB, j.Request.Topology = []string{"H100"}, 81920, TopologyNVLinkDomain
	s := &Snapshot{Pools: []Pool{mkPool("p", x, z, y, w2)}, Pending: []PendingJob{j}}
	withRunning(s, busyNode("p", x, 0, 1, 2, 3, 4, 5, 6, 7)...)
	r, _ := planBoth(t, s, "j")
	w := waitOf(r, "j")
	if w == nil || w.Reason != vocab.ReasonNoMatchingCapacity {
		t.Fatalf("wait = %+v", w)
	}
	var got []string
	for _, sg := range w.Suggestions {
		got = append(got, sg.Field+"="+sg.Value)
		if !sg.Now {
			t.Errorf("suggestion %q does not fit now; four others do", sg.Text)
		}
	}
	if want := "gpu_memory_mib=40960 gpus=4 topology=same-node"; strings.Join(got, " ") != want {
		t.Fatalf("suggestions %v, want %s", got, want)
	}
	checkSuggestions(t, s, "j", w)
}

// TestNoSuggestionWhenNothingFits checks that a request no single change
// makes fit gets no suggestion, and that the other reasons carry none.
func TestNoSuggestionWhenNothingFits(t *testing.T) {
	n := mkNode("n", 2, "H100", 81920, 0)
	n.CPUMilli = 1000
	j := mkJob("j", vocab.TierStandard, 4, "p", 0)
	j.Request.Topology, j.Request.CPUMilli = TopologySameNode, 64000 // no node has the CPU: no GPU change helps
	k := mkJob("k", vocab.TierStandard, 2, "p", 0)                   // capacity_busy behind the running job
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{j, k}}
	withRunning(s, busyNode("p", n, 0)...)
	r, _ := planBoth(t, s, "j")
	if w := waitOf(r, "j"); w == nil || w.Reason != vocab.ReasonNoMatchingCapacity || w.Suggestions != nil {
		t.Fatalf("wait = %+v, want no_matching_capacity without suggestions", w)
	}
	if w := waitOf(r, "k"); w == nil || w.Reason != vocab.ReasonCapacityBusy || w.Suggestions != nil {
		t.Fatalf("wait = %+v, want capacity_busy without suggestions", w)
	}
}

// TestCapacityReleases checks the expected releases of a capacity_busy wait:
// only running jobs holding matching GPUs with a declared run time, earliest
// first, until the freed GPUs give the request enough on one node.
func TestCapacityReleases(t *testing.T) {
	h := mkNode("h", 4, "H100", 81920, 0)
	a := mkNode("a", 4, "A10", 24576, 0)
	run := func(id string, node Node, runFor time.Duration, idx ...int) RunningJob {
		var uuids []string
		for _, i := range idx {
			uuids = append(uuids, node.GPUs[i].UUID)
		}
		r := mkRunning(id, vocab.TierStandard, "p", node.Name, time.Hour, uuids...)
		r.Recovery.Checkpointable = false
		r.RunSeconds = int64(runFor / time.Second)
		return r
	}
	j := mkJob("j", vocab.TierStandard, 3, "p", 0)
	j.Request.GPUModels, j.Request.Topology = []string{"H100"}, TopologySameNode
	s := &Snapshot{Pools: []Pool{mkPool("p", h, a)}, Pending: []PendingJob{j}}
	withRunning(s,
		run("a10-soon", a, 65*time.Minute, 0, 1, 2, 3), // ends first but holds no matching GPU
		run("h-two", h, 2*time.Hour, 0, 1),             // ends in 1 h
		run("h-one", h, 3*time.Hour, 2),                // ends in 2 h: 3 free on h
		run("h-unknown", h, 0, 3),                      // no declared run time
	)
	r, _ := planBoth(t, s, "j")
	w := waitOf(r, "j")
	if w == nil || w.Reason != vocab.ReasonCapacityBusy {
		t.Fatalf("wait = %+v, want capacity_busy", w)
	}
	want := []ExpectedRelease{
		{JobID: "h-two", Milli: 2000, ExpectedEnd: t0.Add(time.Hour)},
		{JobID: "h-one", Milli: 1000, ExpectedEnd: t0.Add(2 * time.Hour)},
	}
	if len(w.Releases) != len(want) {
		t.Fatalf("releases = %+v, want %+v", w.Releases, want)
	}
	for i := range want {
		if g := w.Releases[i]; g.JobID != want[i].JobID || g.Milli != want[i].Milli || !g.ExpectedEnd.Equal(want[i].ExpectedEnd) {
			t.Fatalf("release %d = %+v, want %+v", i, g, want[i])
		}
	}
	if w.Suggestions != nil {
		t.Fatalf("capacity_busy carries suggestions: %+v", w.Suggestions)
	}

	// A request for one GPU stops at the first matching release.
	s.Pending[0].Request.GPUs = 1
	r, _ = planBoth(t, s, "j")
	if w := waitOf(r, "j"); w == nil || len(w.Releases) != 1 || w.Releases[0].JobID != "h-two" {
		t.Fatalf("one GPU: wait = %+v, want the release of h-two alone", w)
	}
}

// TestQuotaReleases checks the expected releases of a quota_exhausted wait:
// the project's own running jobs in the pool, earliest first, until their
// milli-GPU covers what the quota lacks; other projects' jobs never.
func TestQuotaReleases(t *testing.T) {
	n := mkNode("n", 8, "H100", 81920, 0)
	own := func(id string, runFor time.Duration, gpu int) RunningJob {
		r := mkRunning(id, vocab.TierStandard, "p", "n", time.Hour, n.GPUs[gpu].UUID)
		r.Project, r.RunSeconds = "proj-a", int64(runFor/time.Second)
		return r
	}
	other := mkRunning("other", vocab.TierStandard, "p", "n", time.Hour, n.GPUs[3].UUID)
	other.RunSeconds = 3700 // ends before every job of proj-a
	for _, tc := range []struct {
		gpus int
		want []string
	}{
		{1, []string{"a-soon"}},
		{2, []string{"a-soon", "a-late"}},
	} {
		j := mkJob("j", vocab.TierKeyProject, tc.gpus, "p", 0) // key-project may not borrow
		j.Project = "proj-a"
		s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{j},
			Quotas: []Quota{{Project: "proj-a", Pool: "p", NominalMilli: 3000}}}
		withRunning(s, own("a-late", 3*time.Hour, 0), own("a-soon", 90*time.Minute, 1), own("a-unknown", 0, 2), other)
		r, _ := planBoth(t, s, "j")
		w := waitOf(r, "j")
		if w == nil || w.Reason != vocab.ReasonQuotaExhausted {
			t.Fatalf("wait = %+v, want quota_exhausted", w)
		}
		var got []string
		for _, rel := range w.Releases {
			got = append(got, rel.JobID)
			if rel.Milli != 1000 {
				t.Fatalf("release %+v frees %d milli-GPU, want 1000", rel, rel.Milli)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Fatalf("%d GPUs: releases %v, want %v", tc.gpus, got, tc.want)
		}
		if !w.Releases[0].ExpectedEnd.Equal(t0.Add(30 * time.Minute)) {
			t.Fatalf("a-soon expected end %s, want %s", w.Releases[0].ExpectedEnd, t0.Add(30*time.Minute))
		}
	}
}

// TestQuotaShortfall checks what a project must give back: within nominal,
// or for a tier that may borrow, within the borrowing limit and the cohort.
func TestQuotaShortfall(t *testing.T) {
	pq := &poolQuota{nominal: 10000, used: 9000}
	row := &quotaRow{q: Quota{NominalMilli: 4000, BorrowingLimitMilli: 2000}, used: 5000}
	if got := pq.shortfall(row, false, 1000); got != 2000 {
		t.Fatalf("no borrowing: shortfall %d, want 2000 (back to nominal)", got)
	}
	if got := pq.shortfall(row, true, 1000); got != 0 {
		t.Fatalf("borrowing within limits: shortfall %d, want 0", got)
	}
	if got := pq.shortfall(row, true, 3000); got != 2000 {
		t.Fatalf("borrowing: shortfall %d, want 2000 (limit and cohort both need 2000)", got)
	}
}

// TestFragmentedReleases checks that a fragmented wait lists the releases
// that would complete a group on one node: the earliest matching release on
// a node that then holds enough, after earlier ones that do not suffice.
func TestFragmentedReleases(t *testing.T) {
	n1, n2 := mkNode("n1", 4, "H100", 81920, 0), mkNode("n2", 4, "H100", 81920, 0)
	run := func(id string, n Node, gpu int, runFor time.Duration) RunningJob {
		r := mkRunning(id, vocab.TierStandard, "p", n.Name, time.Hour, n.GPUs[gpu].UUID)
		r.Recovery.Checkpointable, r.RunSeconds = false, int64(runFor/time.Second)
		return r
	}
	j := mkJob("j", vocab.TierStandard, 3, "p", 0)
	j.Request.Topology = TopologySameNode
	s := &Snapshot{Pools: []Pool{mkPool("p", n1, n2)}, Pending: []PendingJob{j}}
	// n1 and n2 have 2 free each (4 in total, 2 together): fragmented.
	withRunning(s, run("n1-a", n1, 0, 90*time.Minute), run("n1-b", n1, 1, 4*time.Hour),
		run("n2-a", n2, 0, 2*time.Hour), run("n2-b", n2, 1, 3*time.Hour))
	r, _ := planBoth(t, s, "j")
	w := waitOf(r, "j")
	if w == nil || w.Reason != vocab.ReasonFragmented {
		t.Fatalf("wait = %+v, want fragmented", w)
	}
	if len(w.Releases) != 1 || w.Releases[0].JobID != "n1-a" || !w.Releases[0].ExpectedEnd.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("releases %+v, want n1-a alone (3 free on n1 after it)", w.Releases)
	}
}

// TestSortEndsPacked checks that the packed-key sort of expected ends gives
// the order of the comparison sort (end, then run index) on ends with many
// ties, and refuses ends that are not whole microseconds.
func TestSortEndsPacked(t *testing.T) {
	var ends []runEnd
	for i := range 500 {
		ends = append(ends, runEnd{end: t0.UnixNano() + int64(i*7919%97)*int64(time.Second), run: int32(i)})
	}
	want := slices.Clone(ends)
	slices.SortFunc(want, func(a, b runEnd) int {
		if a.end != b.end {
			return cmp.Compare(a.end, b.end)
		}
		return int(a.run - b.run)
	})
	if !sortEndsPacked(ends) || !slices.Equal(ends, want) {
		t.Fatal("packed sort differs from the comparison sort")
	}
	if sortEndsPacked([]runEnd{{end: 1500}, {end: 1000}}) {
		t.Fatal("packed sort accepted ends that are not whole microseconds")
	}
}

// TestQuotaReleasesAfterPlacement checks that two same-size waits of one
// project in one cycle each get the releases their own shortfall needs: a
// job of the project placed between them raises the project's usage, so the
// later wait lacks more quota and lists more of the project's jobs.
func TestQuotaReleasesAfterPlacement(t *testing.T) {
	n := mkNode("n", 8, "H100", 81920, 0)
	own := func(id string, runFor time.Duration, gpu int) RunningJob {
		r := mkRunning(id, vocab.TierStandard, "p", "n", time.Hour, n.GPUs[gpu].UUID)
		r.Project, r.RunSeconds = "proj-a", int64(runFor/time.Second)
		return r
	}
	job := func(id string, gpus int, age time.Duration) PendingJob {
		j := mkJob(id, vocab.TierKeyProject, gpus, "p", age) // key-project may not borrow
		j.Project = "proj-a"
		return j
	}
	// Quota 3000, 2000 used: "first" (2 GPUs) lacks 1000, "small" (1 GPU)
	// fits and is placed, then "second" (2 GPUs) lacks 2000.
	s := &Snapshot{Pools: []Pool{mkPool("p", n)},
		Pending: []PendingJob{job("first", 2, 3*time.Hour), job("small", 1, 2*time.Hour), job("second", 2, time.Hour)},
		Quotas:  []Quota{{Project: "proj-a", Pool: "p", NominalMilli: 3000}}}
	withRunning(s, own("a-late", 3*time.Hour, 0), own("a-soon", 90*time.Minute, 1))
	for _, slow := range []bool{false, true} {
		r := plan(s, testPolicy(), t0, slow, nil)
		if placementOf(r, "small") == nil {
			t.Fatalf("slow=%v: small not placed; waits %+v", slow, r.Waiting)
		}
		for id, want := range map[string]string{"first": "a-soon", "second": "a-soon,a-late"} {
			w := waitOf(r, id)
			if w == nil || w.Reason != vocab.ReasonQuotaExhausted {
				t.Fatalf("slow=%v: %s wait = %+v, want quota_exhausted", slow, id, w)
			}
			var got []string
			for _, rel := range w.Releases {
				got = append(got, rel.JobID)
			}
			if strings.Join(got, ",") != want {
				t.Fatalf("slow=%v: %s releases %v, want %s", slow, id, got, want)
			}
		}
	}
}

// TestQuotaTooSmallForTheRequestAlone: a request larger than nominal +
// borrowing limit lists no release (none can make it fit) and its
// re-evaluation says only a quota raise helps, not "when usage is at most 0".
func TestQuotaTooSmallForTheRequestAlone(t *testing.T) {
	n := mkNode("n", 8, "H100", 81920, 0)
	own := mkRunning("a-own", vocab.TierStandard, "p", "n", time.Hour, n.GPUs[0].UUID)
	own.Project, own.RunSeconds = "proj-a", 5400
	j := mkJob("j", vocab.TierStandard, 4, "p", 0)
	j.Project = "proj-a"
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{j},
		Quotas: []Quota{{Project: "proj-a", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 1000}}}
	withRunning(s, own)
	r, _ := planBoth(t, s, "j")
	w := waitOf(r, "j")
	if w == nil || w.Reason != vocab.ReasonQuotaExhausted {
		t.Fatalf("wait = %+v, want quota_exhausted", w)
	}
	if len(w.Releases) != 0 {
		t.Fatalf("releases %+v, want none: no release makes a 4000 milli-GPU request fit 2000 + 1000", w.Releases)
	}
	if !strings.Contains(w.ReEvaluate, "only when the quota is raised") || !strings.Contains(w.ReEvaluate, "3000") {
		t.Fatalf("re-evaluation %q, want the quota raise with nominal + limit 3000", w.ReEvaluate)
	}
}
