package queuereport

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

func TestNearestRankPercentile(t *testing.T) {
	seq := func(n int) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = float64(i + 1)
		}
		return s
	}
	cases := []struct {
		name   string
		sample []float64
		p      int
		want   float64
		ok     bool
	}{
		{"empty", nil, 50, 0, false},
		{"single p50", []float64{7}, 50, 7, true},
		{"single p99", []float64{7}, 99, 7, true},
		{"odd p50: rank ⌈2.5⌉=3", seq(5), 50, 3, true},
		{"odd p20: rank ⌈1.0⌉=1", seq(5), 20, 1, true},
		{"odd p21: rank ⌈1.05⌉=2", seq(5), 21, 2, true},
		{"odd p95: rank ⌈4.75⌉=5", seq(5), 95, 5, true},
		{"even p50: rank ⌈2⌉=2", seq(4), 50, 2, true},
		{"even p75: rank 3", seq(4), 75, 3, true},
		{"even p95: rank ⌈3.8⌉=4", seq(4), 95, 4, true},
		{"20 values p95: rank exactly 19", seq(20), 95, 19, true},
		{"20 values p99: rank ⌈19.8⌉=20", seq(20), 99, 20, true},
		{"p100 is the max", seq(20), 100, 20, true},
		{"p0 undefined", seq(5), 0, 0, false},
		{"p101 undefined", seq(5), 101, 0, false},
	}
	for _, c := range cases {
		got, ok := Percentile(c.sample, c.p)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: Percentile = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if r := NearestRank(200, 95); r != 190 {
		t.Errorf("NearestRank(200, 95) = %d, want 190", r)
	}
}

// kthOf over several sorted lists agrees with sorting their union.
func TestKthOfLists(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 200; trial++ {
		lists := make([][]int64, 1+rng.IntN(6))
		var all []int64
		for i := range lists {
			for n := rng.IntN(8); n > 0; n-- {
				lists[i] = append(lists[i], rng.Int64N(40)-10)
			}
			slices.Sort(lists[i])
			all = append(all, lists[i]...)
		}
		slices.Sort(all)
		for k := 1; k <= len(all); k++ {
			if got := kthOf(lists, k); got != all[k-1] {
				t.Fatalf("lists %v: kth(%d) = %d, want %d", lists, k, got, all[k-1])
			}
		}
	}
}

func TestParseGroupBy(t *testing.T) {
	got, err := ParseGroupBy(nil)
	if err != nil || !slices.Equal(got, DefaultGroupBy) {
		t.Errorf("nil: got %v, %v; want the default %v", got, err, DefaultGroupBy)
	}
	got, err = ParseGroupBy([]string{})
	if err != nil || len(got) != 0 {
		t.Errorf("empty: got %v, %v; want no keys", got, err)
	}
	got, err = ParseGroupBy([]string{"project", "pool", "queue"})
	if err != nil || !slices.Equal(got, []string{"queue", "pool", "project"}) {
		t.Errorf("reordered: got %v, %v; want canonical order", got, err)
	}
	if _, err = ParseGroupBy([]string{"queue", "team"}); err == nil || !strings.Contains(err.Error(), `"team"`) {
		t.Errorf("unknown key: err = %v, want one naming \"team\"", err)
	}
	if _, err = ParseGroupBy([]string{"pool", "pool"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("repeated key: err = %v", err)
	}
	o := window(0, 10, 10, []string{"gpu_model"})
	if _, err := Compute(Input{}, o); err == nil || !strings.Contains(err.Error(), `"gpu_model"`) {
		t.Errorf("Compute with unknown key: err = %v, want one naming \"gpu_model\"", err)
	}
}

func TestOptionErrors(t *testing.T) {
	cases := map[string]struct {
		mod  func(*Options)
		want string
	}{
		"to before from":     {func(o *Options) { o.Window.To = at(-1) }, "window"},
		"now before from":    {func(o *Options) { o.Now = at(-5) }, "now"},
		"no now":             {func(o *Options) { o.Now = time.Time{} }, "now"},
		"negative threshold": {func(o *Options) { o.StarvationReleases = -1 }, "starvation_releases"},
		"limit below -1":     {func(o *Options) { o.StarvingLimit = -2 }, "starving_limit"},
	}
	for name, c := range cases {
		o := window(0, 100, 100, nil)
		c.mod(&o)
		if _, err := Compute(Input{}, o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", name, err, c.want)
		}
	}
	r := mustCompute(t, Input{}, Options{Window: Window{From: at(0), To: at(10)}, Now: at(10)})
	if r.Options.OvertakenThreshold != 1 || r.Options.StarvationReleases != 3 || r.Options.TierArrivalThreshold != 3 ||
		r.Options.StarvingLimit != DefaultStarvingLimit {
		t.Errorf("defaults not applied: %+v", r.Options)
	}
}

func TestInputErrors(t *testing.T) {
	base := func() Input {
		return Input{
			Jobs: []Job{testJob("a", 0, started(10)), testJob("b", 0)},
			Runs: []Run{testRun("a", 10, 20)},
		}
	}
	cases := map[string]struct {
		mod  func(*Input)
		want string
	}{
		"duplicate job":        {func(in *Input) { in.Jobs = append(in.Jobs, testJob("a", 5)) }, `"a"`},
		"run of unknown job":   {func(in *Input) { in.Runs = append(in.Runs, testRun("zz", 1, 2)) }, `"zz"`},
		"event of unknown job": {func(in *Input) { in.WaitEvents = []WaitEvent{{JobID: "yy", Reason: "held", Start: at(0)}} }, `"yy"`},
		"overlapping runs":     {func(in *Input) { in.Runs = append(in.Runs, testRun("a", 15, 30)) }, "overlap"},
		"first start mismatch": {func(in *Input) { in.Jobs[0].FirstStart = atp(11) }, "first_start"},
		"runs without first start": {func(in *Input) {
			in.Jobs[1].FirstStart = nil
			in.Runs = append(in.Runs, testRun("b", 3, 4))
		}, "first_start"},
		"cancelled without end": {func(in *Input) { in.Jobs[1].CancelledWhileWaiting = true }, "cancelled_while_waiting"},
		"run ends before start": {func(in *Input) { in.Runs[0].End = atp(5) }, "end is before start"},
		"end before last run":   {func(in *Input) { in.Jobs[0].End = atp(15) }, "end"},
		"duplicate target": {func(in *Input) {
			in.Targets = []QueueTarget{{Queue: "q", ServiceShare: 1}, {Queue: "q", ServiceShare: 2}}
		}, "twice"},
		"negative share": {func(in *Input) { in.Targets = []QueueTarget{{Queue: "q", ServiceShare: -1}} }, "service_share"},
	}
	for name, c := range cases {
		in := base()
		c.mod(&in)
		if _, err := Compute(in, window(0, 100, 100, nil)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", name, err, c.want)
		}
	}
	if _, err := Compute(base(), window(0, 100, 100, nil)); err != nil {
		t.Errorf("valid input: %v", err)
	}
}

// A job still waiting has the longest wait, measured to now when now is
// before the window end, and to the window end when now is after it.
func TestLongestWaitIncludesStillWaiting(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("S", -100, started(500)), // waited 600, started in the window
			testJob("W", 200),                // never started
			testJob("L", 100, started(1200)), // starts after now: still waiting at the end
		},
		Runs: []Run{testRun("S", 500, -1), testRun("L", 1200, -1)},
	}
	r := mustCompute(t, in, window(0, 5000, 1000, []string{}))
	g := r.Total
	// Measured to now (1000): L 900 and W 800, both still waiting, beat S's 600.
	if val(g.LongestWaitS) != 900 || g.LongestWaitJobID != "L" || !g.LongestWaitOngoing {
		t.Errorf("now before window end: longest = %v %q ongoing=%v, want 900 L ongoing", val(g.LongestWaitS), g.LongestWaitJobID, g.LongestWaitOngoing)
	}
	if g.StillWaiting != 2 || g.Started != 1 || val(g.WaitMaxS) != 600 {
		t.Errorf("still waiting %d (want 2), started %d (want 1), max %v (want 600)", g.StillWaiting, g.Started, val(g.WaitMaxS))
	}
	if !r.End.Equal(at(1000)) {
		t.Errorf("report end %v, want now", r.End)
	}

	// Window ends at 400, read at 5000: waits are measured to 400; S has not
	// started yet at 400 (it waits 500 so far), W 200, L 300.
	r = mustCompute(t, in, window(0, 400, 5000, []string{}))
	g = r.Total
	if val(g.LongestWaitS) != 500 || g.LongestWaitJobID != "S" || !g.LongestWaitOngoing || g.StillWaiting != 3 || g.Started != 0 {
		t.Errorf("window end before now: longest %v %q ongoing=%v waiting %d started %d; want 500 S ongoing, 3 waiting, 0 started",
			val(g.LongestWaitS), g.LongestWaitJobID, g.LongestWaitOngoing, g.StillWaiting, g.Started)
	}
}

func TestWindowClipping(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("X", 0, started(1500)),               // submitted before, starts inside
			testJob("Y", 100, started(900), ended(1200)), // starts before, runs into the window
			testJob("Z", 1900, started(2100)),            // starts after the window
			testJob("Q", 2500),                           // submitted after the window
			testJob("P", 0, started(0), ended(500)),      // gone before the window
		},
		Runs: []Run{
			testRun("X", 1500, 2500),
			{JobID: "Y", Start: at(900), End: atp(1200), GPUMilli: 2000},
			testRun("Z", 2100, -1),
			testRun("P", 0, 500),
		},
		WaitEvents: []WaitEvent{
			{JobID: "X", Reason: vocab.ReasonCapacityBusy, Start: at(0), End: atp(1500)},
			{JobID: "Y", Reason: vocab.ReasonCapacityBusy, Start: at(100), End: atp(900)},
			{JobID: "Z", Reason: vocab.ReasonHeld, Start: at(1900), End: atp(2100)},
		},
	}
	g := mustCompute(t, in, window(1000, 2000, 3000, []string{})).Total
	if g.Jobs != 3 || g.Submitted != 1 {
		t.Errorf("jobs %d submitted %d, want 3 (X, Y, Z) and 1 (Z)", g.Jobs, g.Submitted)
	}
	if g.Started != 1 || val(g.WaitP50S) != 1500 {
		t.Errorf("started %d p50 %v, want X's 1500 s wait only", g.Started, val(g.WaitP50S))
	}
	if val(g.LongestWaitS) != 1500 || g.LongestWaitJobID != "X" || g.LongestWaitOngoing {
		t.Errorf("longest %v %q, want X 1500 (measured from its submit before the window)", val(g.LongestWaitS), g.LongestWaitJobID)
	}
	if g.StillWaiting != 1 {
		t.Errorf("still waiting %d, want 1 (Z at the window end)", g.StillWaiting)
	}
	// X: [1500, 2000) × 1 = 500; Y: [1000, 1200) × 2 = 400.
	if g.GPUSeconds != 900 {
		t.Errorf("gpu seconds %v, want 900", g.GPUSeconds)
	}
	want := map[string]float64{"capacity_busy": 500, "held": 100}
	if len(g.WaitReasonSeconds) != len(want) || g.WaitReasonSeconds["capacity_busy"] != 500 || g.WaitReasonSeconds["held"] != 100 {
		t.Errorf("reason seconds %v, want %v", g.WaitReasonSeconds, want)
	}
}

func TestWaitReasonSeconds(t *testing.T) {
	in := Input{
		Jobs: []Job{testJob("a", 0), testJob("b", 0, inQueue("other", vocab.TierStandard))},
		WaitEvents: []WaitEvent{
			{JobID: "a", Reason: vocab.ReasonEnvironmentNotReady, Start: at(0), End: atp(30)},
			{JobID: "a", Reason: vocab.ReasonQuotaExhausted, Start: at(30), End: atp(70)},
			{JobID: "a", Reason: vocab.ReasonEnvironmentNotReady, Start: at(70), End: atp(75)},
			{JobID: "a", Reason: vocab.ReasonCapacityBusy, Start: at(75)}, // open: runs to the end (100)
			{JobID: "b", Reason: vocab.ReasonHeld, Start: at(10), End: atp(20)},
		},
	}
	r := mustCompute(t, in, window(0, 100, 100, []string{KeyQueue}))
	a := findGroup(t, r, map[string]string{"queue": "q"})
	want := map[string]float64{"environment_not_ready": 35, "quota_exhausted": 40, "capacity_busy": 25}
	for k, v := range want {
		if a.WaitReasonSeconds[k] != v {
			t.Errorf("queue q %s: %v s, want %v", k, a.WaitReasonSeconds[k], v)
		}
	}
	if len(a.WaitReasonSeconds) != 3 || r.Total.WaitReasonSeconds["held"] != 10 {
		t.Errorf("queue q reasons %v, total %v", a.WaitReasonSeconds, r.Total.WaitReasonSeconds)
	}
}

// A reason outside the catalogue is rejected, naming it: its time would
// belong to no reason group of the reason shares. Known reasons are summed
// per reason whatever their order (the lookup keys on length first).
func TestWaitReasonsOutsideTheCatalogue(t *testing.T) {
	in := Input{
		Jobs: []Job{testJob("a", 0)},
		WaitEvents: []WaitEvent{
			{JobID: "a", Reason: "held", Start: at(0), End: atp(10)},
			{JobID: "a", Reason: "fragmented", Start: at(10), End: atp(30)},
			{JobID: "a", Reason: "held", Start: at(30), End: atp(35)},
			{JobID: "a", Reason: "capacity_busy", Start: at(35), End: atp(36)},
		},
	}
	got := mustCompute(t, in, window(0, 100, 100, []string{})).Total.WaitReasonSeconds
	if got["held"] != 15 || got["fragmented"] != 20 || got["capacity_busy"] != 1 || len(got) != 3 {
		t.Errorf("reason seconds %v, want held 15, fragmented 20, capacity_busy 1", got)
	}
	in.WaitEvents = append(in.WaitEvents, WaitEvent{JobID: "a", Reason: "hold", Start: at(36), End: atp(40)})
	if _, err := Compute(in, window(0, 100, 100, []string{})); err == nil || !strings.Contains(err.Error(), `unknown reason "hold"`) {
		t.Errorf("an unknown reason: %v", err)
	}
}

func TestFirstDuplicateID(t *testing.T) {
	jobs := make([]Job, 20000)
	for i := range jobs {
		jobs[i].ID = fmt.Sprintf("job-%05d", i)
	}
	if id, dup := firstDuplicateID(jobs); dup {
		t.Fatalf("unique IDs: reported %q", id)
	}
	jobs[17321].ID = "job-00042"
	if id, dup := firstDuplicateID(jobs); !dup || id != "job-00042" {
		t.Errorf("duplicate: got %q, %v; want job-00042", id, dup)
	}
}

func TestCancellationRate(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("C1", 0, cancelledWaiting(100)),
			testJob("C2", 0, started(200)),
			testJob("C3", 0, started(50), cancelledWaiting(400)), // ran [50, 300), requeued, cancelled
			testJob("C4", 0, cancelledWaiting(1500)),             // cancelled after the window
			testJob("C5", 0, ended(600)),                         // removed while waiting, not cancelled
		},
		Runs: []Run{testRun("C2", 200, -1), testRun("C3", 50, 300)},
	}
	g := mustCompute(t, in, window(0, 1000, 1000, []string{})).Total
	// Ended in the window: C1 cancel, C2 start, C3 start, C3 cancel → 2 / 4.
	if g.WaitsEnded != 4 || g.CancelledWhileWaiting != 2 || val(g.CancellationRate) != 0.5 {
		t.Errorf("ended %d cancelled %d rate %v, want 4, 2, 0.5", g.WaitsEnded, g.CancelledWhileWaiting, val(g.CancellationRate))
	}
	if g.Cancelled != 2 || g.StillWaiting != 1 || g.RequeueStarts != 0 {
		t.Errorf("cancelled %d (want 2), still waiting %d (want 1: C4), requeue starts %d (want 0)", g.Cancelled, g.StillWaiting, g.RequeueStarts)
	}
	g = mustCompute(t, Input{Jobs: []Job{testJob("w", 0)}}, window(0, 10, 10, []string{})).Total
	if g.CancellationRate != nil {
		t.Errorf("no wait ended: rate %v, want null", *g.CancellationRate)
	}
}

func TestServiceShare(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("a1", 0, started(0), ofProject("x"), inPool("p1")),
			testJob("a2", 0, started(0), ofProject("y"), inPool("p2")),
			testJob("b1", 0, started(0), inQueue("qb", vocab.TierStandard), inPool("p1"), asking(2, 0)),
			testJob("n1", 0, started(0), inQueue("nt", vocab.TierStandard), inPool("p3")),
		},
		Runs: []Run{
			testRun("a1", 0, 1000), testRun("a2", 0, 1000),
			{JobID: "b1", Start: at(0), End: atp(1000), GPUMilli: 2000},
			{JobID: "n1", Start: at(0), End: atp(1000), GPUMilli: 0}, // holds no GPU
		},
		Targets: []QueueTarget{{Queue: "q", ServiceShare: 2}, {Queue: "qb", ServiceShare: 2}},
	}
	byQueue := mustCompute(t, in, window(0, 1000, 1000, []string{KeyQueue}))
	q := findGroup(t, byQueue, map[string]string{"queue": "q"})
	if q.GPUSeconds != 2000 || val(q.ServiceShare) != 0.5 || val(q.TargetShare) != 0.5 || val(q.ShareVsTarget) != 1 {
		t.Errorf("by queue: q gpu %v share %v target %v ratio %v; want 2000, 0.5, 0.5, 1",
			q.GPUSeconds, val(q.ServiceShare), val(q.TargetShare), val(q.ShareVsTarget))
	}
	nt := findGroup(t, byQueue, map[string]string{"queue": "nt"})
	if nt.TargetShare != nil || nt.ShareVsTarget != nil || val(nt.ServiceShare) != 0 {
		t.Errorf("queue without target: target %v share %v", val(nt.TargetShare), val(nt.ServiceShare))
	}

	byPool := mustCompute(t, in, window(0, 1000, 1000, []string{KeyQueue, KeyPool}))
	qp1 := findGroup(t, byPool, map[string]string{"queue": "q", "pool": "p1"})
	qp2 := findGroup(t, byPool, map[string]string{"queue": "q", "pool": "p2"})
	bp1 := findGroup(t, byPool, map[string]string{"queue": "qb", "pool": "p1"})
	// p1 holds 1000 + 2000 GPU-s, p2 1000: shares are per pool.
	if val(qp1.ServiceShare) != 1000.0/3000 || val(qp2.ServiceShare) != 1 || val(bp1.ServiceShare) != 2000.0/3000 {
		t.Errorf("per-pool shares %v %v %v, want 1/3, 1, 2/3", val(qp1.ServiceShare), val(qp2.ServiceShare), val(bp1.ServiceShare))
	}
	if val(qp1.ShareVsTarget) != 1000.0/3000/0.5 {
		t.Errorf("q in p1 vs target %v, want 2/3", val(qp1.ShareVsTarget))
	}
	if np3 := findGroup(t, byPool, map[string]string{"queue": "nt", "pool": "p3"}); np3.ServiceShare != nil {
		t.Errorf("pool without GPU-seconds: share %v, want null", val(np3.ServiceShare))
	}

	// Split by project: each row keeps its own share but compares the whole
	// queue (2000 of 4000 GPU-s = 0.5) with its target.
	byProject := mustCompute(t, in, window(0, 1000, 1000, []string{KeyQueue, KeyProject}))
	x := findGroup(t, byProject, map[string]string{"queue": "q", "project": "x"})
	if val(x.ServiceShare) != 0.25 || val(x.TargetShare) != 0.5 || val(x.ShareVsTarget) != 1 {
		t.Errorf("by project: share %v target %v ratio %v, want 0.25, 0.5, 1", val(x.ServiceShare), val(x.TargetShare), val(x.ShareVsTarget))
	}
	onlyPool := mustCompute(t, in, window(0, 1000, 1000, []string{KeyPool}))
	if g := findGroup(t, onlyPool, map[string]string{"pool": "p1"}); g.TargetShare != nil {
		t.Errorf("not grouped by queue: target %v, want null", val(g.TargetShare))
	}
	if val(onlyPool.Total.ServiceShare) != 1 || onlyPool.Total.GPUSeconds != 4000 {
		t.Errorf("total share %v gpu %v", val(onlyPool.Total.ServiceShare), onlyPool.Total.GPUSeconds)
	}
}

func TestOverObjectiveIsStrict(t *testing.T) {
	in := Input{
		Jobs:    []Job{testJob("eq", 0, started(60)), testJob("over", 0, started(61))},
		Runs:    []Run{testRun("eq", 60, -1), testRun("over", 61, -1)},
		Targets: []QueueTarget{{Queue: "q", ServiceShare: 1, MaxWait: time.Minute}},
	}
	if g := mustCompute(t, in, window(0, 100, 100, []string{})).Total; g.JobsOverObjective != 1 {
		t.Errorf("over objective %d, want 1 (61 s > 60 s; 60 s is not over)", g.JobsOverObjective)
	}
}

// Shuffling the records changes nothing in the report.
func TestDeterministicUnderShuffle(t *testing.T) {
	f := loadFixture(t)
	want, err := json.Marshal(mustCompute(t, f.Input, f.Options))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		in := f.Input
		in.Jobs, in.Runs = slices.Clone(in.Jobs), slices.Clone(in.Runs)
		in.WaitEvents, in.Releases = slices.Clone(in.WaitEvents), slices.Clone(in.Releases)
		rng.Shuffle(len(in.Jobs), func(a, b int) { in.Jobs[a], in.Jobs[b] = in.Jobs[b], in.Jobs[a] })
		rng.Shuffle(len(in.Runs), func(a, b int) { in.Runs[a], in.Runs[b] = in.Runs[b], in.Runs[a] })
		rng.Shuffle(len(in.WaitEvents), func(a, b int) { in.WaitEvents[a], in.WaitEvents[b] = in.WaitEvents[b], in.WaitEvents[a] })
		rng.Shuffle(len(in.Releases), func(a, b int) { in.Releases[a], in.Releases[b] = in.Releases[b], in.Releases[a] })
		got, err := json.Marshal(mustCompute(t, in, f.Options))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("shuffle %d changed the report:\n%s\nwant\n%s", i, got, want)
		}
	}
}

// Inputs and options survive a JSON round trip (the fixture and the API use it).
func TestInputJSONRoundTrip(t *testing.T) {
	in := Input{
		Jobs:       []Job{testJob("a", 0, started(10), ended(20), inQueue("prod", vocab.TierProduction), asking(1, 250, "A100"))},
		Runs:       []Run{testRun("a", 10, 20)},
		WaitEvents: []WaitEvent{{JobID: "a", Reason: vocab.ReasonHeld, Start: at(0), End: atp(10)}},
		Releases:   []Release{{At: at(20), Pool: "p", Models: []string{"A100"}, GPUMilli: 250}},
		Targets:    []QueueTarget{{Queue: "prod", ServiceShare: 2, MaxWait: 1500 * time.Millisecond}},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"tier":"production"`, `"max_wait_s":1.5`, `"gpu_models":["A100"]`, `"first_start":`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
	var back Input
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Jobs[0].Tier != vocab.TierProduction || back.Targets[0].MaxWait != 1500*time.Millisecond ||
		!back.Jobs[0].End.Equal(at(20)) || back.Jobs[0].Request.GPUMilli != 250 {
		t.Errorf("round trip changed the input: %+v", back)
	}
	if err := json.Unmarshal([]byte(`{"jobs":[{"id":"x","tier":"gold"}]}`), &back); err == nil || !strings.Contains(err.Error(), "gold") {
		t.Errorf("unknown tier: err = %v", err)
	}
}
