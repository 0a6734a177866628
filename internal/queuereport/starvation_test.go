package queuereport

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// startedJob is a job with one run from start, still running.
func startedJob(id string, submit, start float64, mods ...func(*Job)) (Job, Run) {
	return testJob(id, submit, append(mods, started(start))...), testRun(id, start, -1)
}

func TestOvertakenSignal(t *testing.T) {
	in := Input{Jobs: []Job{
		testJob("W", 100, asking(2, 0, "A100", "H100")),                     // waits all along
		testJob("W2", 100, asking(1, 0, "A100"), started(300)),              // starts together with O1
		testJob("W3", 0, asking(1, 0), started(10), inPool("r")),            // requeued at 1000, rerun at 2000
		testJob("N", 100, asking(0, 0)),                                     // requests no GPU: no signal
		testJob("H", 100, asking(1, 0, "A100"), started(9000), ended(9500)), // held until 9000
	}}
	in.Runs = append(in.Runs, testRun("W2", 300, -1), testRun("W3", 10, 1000), testRun("W3", 2000, -1), testRun("H", 9000, 9500))
	add := func(j Job, r Run) { in.Jobs, in.Runs = append(in.Jobs, j), append(in.Runs, r) }
	add(startedJob("O1", 200, 300, asking(1, 0, "A100")))              // counts for W (subset, smaller)
	add(startedJob("O2", 50, 400, asking(1, 0, "A100")))               // submitted before W: no
	add(startedJob("O3", 200, 500, asking(4, 0, "A100")))              // larger than W: no
	add(startedJob("O4", 200, 600, asking(1, 0)))                      // any model ⊄ {A100, H100}: no
	add(startedJob("O5", 200, 700, asking(1, 0, "A100"), inPool("q"))) // other pool: no
	add(startedJob("O6", 300, 800, asking(2, 0, "H100")))              // equal demand: counts
	add(startedJob("O7", 300, 900, asking(1, 250, "H100", "A100")))    // a 250-milli share: counts
	add(startedJob("O8", 500, 1000, asking(1, 0), inPool("r")))        // W3's preemptor, at the instant it was requeued: no
	add(startedJob("O9", 600, 1500, asking(1, 0), inPool("r")))        // during W3's requeue wait: counts
	add(startedJob("O10", 550, 600, asking(1, 0), inPool("r")))        // before W3's requeue wait: no
	add(startedJob("O11", 20000, 20000, asking(1, 0, "A100")))         // after the window: no

	o := window(0, 10000, 10000, nil)
	o.OvertakenThreshold = 3
	r := mustCompute(t, in, o)
	s := starvingByID(r)
	if s["W"].Overtaken != 3 || !slices.Contains(s["W"].Signals, SignalOvertaken) {
		t.Errorf("W overtaken %d signals %v, want 3 (O1, O6, O7) and the signal", s["W"].Overtaken, s["W"].Signals)
	}
	if s["W2"].Overtaken != 0 {
		t.Errorf("W2 overtaken %d, want 0: O1 started in the same instant", s["W2"].Overtaken)
	}
	if r.Total.OvertakenJobs != 1 {
		t.Errorf("threshold 3: %d overtaken jobs, want 1 (W; W3 and H have one overtaking start each)", r.Total.OvertakenJobs)
	}
	if _, ok := s["N"]; ok {
		t.Errorf("a job without GPUs has starvation signals: %+v", s["N"])
	}

	o.OvertakenThreshold = 1
	s = starvingByID(mustCompute(t, in, o))
	if s["W3"].Overtaken != 1 {
		t.Errorf("W3 overtaken %d, want 1 (only O9)", s["W3"].Overtaken)
	}
	// H waited [100, 9000) with models {A100}: O1 counts; O6 (H100) and O7 ({A100,
	// H100} ⊄ {A100}) do not.
	if s["H"].Overtaken != 1 {
		t.Errorf("H overtaken %d, want 1 (O1)", s["H"].Overtaken)
	}

	o.OvertakenThreshold = 4
	if g := mustCompute(t, in, o).Total; g.OvertakenJobs != 0 {
		t.Errorf("threshold 4: %d overtaken jobs, want 0", g.OvertakenJobs)
	}
}

// Overtaking starts before the window are not counted.
func TestOvertakenClippedToWindow(t *testing.T) {
	in := Input{Jobs: []Job{testJob("W", 0)}}
	for i, start := range []float64{500, 1500, 2500} {
		j, r := startedJob(fmt.Sprint("O", i), 100, start)
		in.Jobs, in.Runs = append(in.Jobs, j), append(in.Runs, r)
	}
	s := starvingByID(mustCompute(t, in, window(1000, 2000, 3000, nil)))
	if s["W"].Overtaken != 1 {
		t.Errorf("overtaken %d, want 1: only the start at 1500 is inside [1000, 2000)", s["W"].Overtaken)
	}
}

func TestReleasesSignal(t *testing.T) {
	in := Input{
		Jobs: []Job{testJob("W", 100, asking(1, 0, "A100")), testJob("N", 100, asking(0, 0))},
		Releases: []Release{
			{At: at(100), Pool: "p", Models: []string{"A100"}},         // the instant the wait began: no
			{At: at(200), Pool: "p", Models: []string{"A100"}},         // yes
			{At: at(300), Pool: "p", Models: []string{"H100", "A100"}}, // yes
			{At: at(400), Pool: "p", Models: []string{"H100"}},         // model not accepted: no
			{At: at(500), Pool: "q", Models: []string{"A100"}},         // other pool: no
			{At: at(600), Pool: "p"},                                   // unknown model: yes
			{At: at(5000), Pool: "p", Models: []string{"A100"}},        // after the window: no
		},
	}
	o := window(0, 1000, 1000, nil)
	o.StarvationReleases = 3
	r := mustCompute(t, in, o)
	s := starvingByID(r)
	if s["W"].Releases != 3 || !slices.Equal(s["W"].Signals, []string{SignalReleases}) {
		t.Errorf("W releases %d signals %v, want 3 and [releases]", s["W"].Releases, s["W"].Signals)
	}
	if r.Total.ReleaseStarvedJobs != 1 || r.Total.StarvingJobs != 1 {
		t.Errorf("release-starved %d starving %d, want 1 and 1", r.Total.ReleaseStarvedJobs, r.Total.StarvingJobs)
	}
	o.StarvationReleases = 4
	if r := mustCompute(t, in, o); len(r.Starving) != 0 || r.Total.ReleaseStarvedJobs != 0 {
		t.Errorf("threshold 4: starving %v", r.Starving)
	}
}

func TestHigherTierArrivalsSignal(t *testing.T) {
	in := Input{Jobs: []Job{
		testJob("W", 100, asking(1, 0)),
		testJob("a1", 200, inQueue("prod", vocab.TierProduction), asking(0, 0)), // yes, whatever it asks
		testJob("a2", 300, inQueue("key", vocab.TierKeyProject)),                // yes
		testJob("a3", 400, inQueue("std", vocab.TierStandard)),                  // same tier: no
		testJob("a4", 500, inQueue("exp", vocab.TierExperiment)),                // lower: no
		testJob("a5", 600, inQueue("prod", vocab.TierProduction), inPool("q")),  // other pool: no
		testJob("a6", 700, inQueue("key", vocab.TierKeyProject)),                // yes
		testJob("a7", 1500, inQueue("prod", vocab.TierProduction)),              // after the window end: no
	}}
	o := window(0, 1000, 2000, nil)
	o.OvertakenThreshold, o.StarvationReleases, o.TierArrivalThreshold = 100, 100, 3
	r := mustCompute(t, in, o)
	s := starvingByID(r)
	if s["W"].HigherTierArrivals != 3 || !slices.Equal(s["W"].Signals, []string{SignalHigherTierArrivals}) {
		t.Errorf("W arrivals %d signals %v, want 3 and [higher_tier_arrivals]", s["W"].HigherTierArrivals, s["W"].Signals)
	}
	if _, ok := s["a2"]; ok {
		t.Errorf("a2 (key-project) was reached only by a6 (same tier) and a1 (earlier): %+v", s["a2"])
	}
	o.TierArrivalThreshold = 4
	if r := mustCompute(t, in, o); r.Total.TierStarvedJobs != 0 {
		t.Errorf("threshold 4: %d tier-starved jobs, want 0", r.Total.TierStarvedJobs)
	}
}

func TestStarvingListOrderAndLimit(t *testing.T) {
	in := Input{Jobs: []Job{testJob("b", 0), testJob("a", 0), testJob("c", 50)},
		WaitEvents: []WaitEvent{
			{JobID: "a", Reason: vocab.ReasonCapacityBusy, Start: at(0), End: atp(40)},
			{JobID: "a", Reason: vocab.ReasonQuotaExhausted, Start: at(40)},
		},
		Releases: []Release{{At: at(60), Pool: "p"}},
	}
	o := window(0, 100, 100, nil)
	r := mustCompute(t, in, o)
	var ids []string
	for _, s := range r.Starving {
		ids = append(ids, s.JobID)
	}
	if !slices.Equal(ids, []string{"a", "b", "c"}) {
		t.Errorf("order %v, want a, b (100 s, by ID) then c (50 s)", ids)
	}
	if r.Starving[0].LastReason != "quota_exhausted" || !r.Starving[0].WaitOngoing || r.Starving[0].WaitS != 100 {
		t.Errorf("a: %+v", r.Starving[0])
	}
	o.StarvingLimit = 2
	r = mustCompute(t, in, o)
	if len(r.Starving) != 2 || r.Total.StarvingJobs != 3 || r.Starving[0].JobID != "a" || r.Starving[1].JobID != "b" {
		t.Errorf("limit 2: listed %v, counted %d; want a, b listed, 3 counted", r.Starving, r.Total.StarvingJobs)
	}
	// 150 starving jobs: the default lists 100, NoStarvingLimit all.
	for i := 0; i < 147; i++ {
		in.Jobs = append(in.Jobs, testJob(fmt.Sprint("x", i), 10))
	}
	o.StarvingLimit = 0
	if r = mustCompute(t, in, o); len(r.Starving) != DefaultStarvingLimit || r.Total.StarvingJobs != 150 {
		t.Errorf("default limit: listed %d, counted %d; want %d and 150", len(r.Starving), r.Total.StarvingJobs, DefaultStarvingLimit)
	}
	// a and b (100 s), then the x jobs (90 s) by ID: x0, x1, x10, x100, …
	if r.Starving[0].JobID != "a" || r.Starving[2].JobID != "x0" || r.Starving[99].JobID != "x54" {
		t.Errorf("default limit kept %s, %s … %s; want a, x0 … x54 (the 98th ID in string order)", r.Starving[0].JobID, r.Starving[2].JobID, r.Starving[99].JobID)
	}
	o.StarvingLimit = NoStarvingLimit
	if r = mustCompute(t, in, o); len(r.Starving) != 150 {
		t.Errorf("no limit: listed %d, want 150", len(r.Starving))
	}
}

// TestSignalsMatchBruteForce checks the sweep-based counts against a direct
// reading of the definitions on random records.
func TestSignalsMatchBruteForce(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 60
		if seed%5 == 0 {
			n = 500 // enough releases and starts per pool for the bucket tables
		}
		in := randomInput(rng, n)
		from, to := float64(rng.IntN(300)), 700+float64(rng.IntN(400))
		now := to - 200 + float64(rng.IntN(400))
		o := window(from, to, now, nil)
		r, err := Compute(in, o)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		got := starvingByID(r)
		want := bruteSignals(in, from, min(to, now))
		t.Logf("seed %d: %d jobs with signals", seed, len(want))
		for id, w := range want {
			g := got[id]
			if g.Overtaken != w[0] || g.Releases != w[1] || g.HigherTierArrivals != w[2] {
				t.Errorf("seed %d job %s: got overtaken/releases/arrivals %d/%d/%d, want %v",
					seed, id, g.Overtaken, g.Releases, g.HigherTierArrivals, w)
			}
		}
		for id := range got {
			if _, ok := want[id]; !ok {
				t.Errorf("seed %d: job %s listed but has no signal by brute force", seed, id)
			}
		}
	}
}

// randomInput makes n jobs in two pools with random shapes, 0–3 runs and
// releases at every run end.
func randomInput(rng *rand.Rand, n int) Input {
	var in Input
	modelSets := [][]string{nil, {"A"}, {"B"}, {"A", "B"}}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("j%02d", i)
		submit := float64(rng.IntN(1000))
		j := testJob(id, submit, inPool([]string{"p", "q"}[rng.IntN(2)]),
			asking([]int{0, 1, 1, 1, 2, 4}[rng.IntN(6)], []int{0, 250, 500}[rng.IntN(3)], modelSets[rng.IntN(4)]...))
		j.Tier = vocab.Tiers[rng.IntN(4)]
		t := submit
		runs := rng.IntN(4)
		for k := 0; k < runs; k++ {
			start := t + float64(rng.IntN(200))
			if k == 0 {
				j.FirstStart = atp(start)
			}
			r := Run{JobID: id, Start: at(start), GPUMilli: j.Request.DemandMilli()}
			if k < runs-1 || rng.IntN(2) == 0 { // the last run may still be open
				t = start + float64(1+rng.IntN(200))
				r.End = atp(t)
				in.Releases = append(in.Releases, Release{At: at(t), Pool: j.Pool, Models: modelSets[1+rng.IntN(2)]})
			}
			in.Runs = append(in.Runs, r)
		}
		if runs > 0 && in.Runs[len(in.Runs)-1].End != nil && rng.IntN(2) == 0 {
			j.End = atp(t + float64(rng.IntN(2)*50)) // finished, or cancelled later while waiting
		}
		in.Jobs = append(in.Jobs, j)
	}
	return in
}

// bruteSignals reads the definitions directly: per job and wait, count each
// signal over (wait start, wait end) ∩ [from, end), keep the largest per job,
// and return jobs with any count ≥ 1 (the thresholds of window()).
func bruteSignals(in Input, from, end float64) map[string][3]int {
	sec := func(tm interface{ Unix() int64 }) float64 { return float64(tm.Unix() - t0.Unix()) }
	runsOf := map[string][]Run{}
	for _, r := range in.Runs {
		runsOf[r.JobID] = append(runsOf[r.JobID], r)
	}
	type span struct{ a, b float64 }
	waitsOf := func(j Job) []span {
		var out []span
		open := 1e18
		rs := runsOf[j.ID]
		slices.SortFunc(rs, func(x, y Run) int { return x.Start.Compare(y.Start) })
		endOr := func(def float64) float64 {
			if j.End != nil {
				return sec(*j.End)
			}
			return def
		}
		if len(rs) == 0 {
			return []span{{sec(j.SubmitTime), endOr(open)}}
		}
		out = append(out, span{sec(j.SubmitTime), sec(rs[0].Start)})
		for k := 1; k < len(rs); k++ {
			out = append(out, span{sec(*rs[k-1].End), sec(rs[k].Start)})
		}
		if last := rs[len(rs)-1]; last.End != nil && endOr(open) > sec(*last.End) {
			out = append(out, span{sec(*last.End), endOr(open)})
		}
		return out
	}
	fits := func(a, b Job) bool { // a fits the GPUs b waits for
		if a.Request.DemandMilli() > b.Request.DemandMilli() {
			return false
		}
		if len(b.Request.Models) == 0 {
			return true
		}
		if len(a.Request.Models) == 0 {
			return false
		}
		for _, m := range a.Request.Models {
			if !slices.Contains(b.Request.Models, m) {
				return false
			}
		}
		return true
	}
	matches := func(r Release, j Job) bool {
		if len(r.Models) == 0 || len(j.Request.Models) == 0 {
			return true
		}
		for _, m := range r.Models {
			if slices.Contains(j.Request.Models, m) {
				return true
			}
		}
		return false
	}
	out := map[string][3]int{}
	for _, j := range in.Jobs {
		if j.Request.DemandMilli() == 0 {
			continue
		}
		var best [3]int
		for _, w := range waitsOf(j) {
			inside := func(t float64) bool { return t > w.a && t < w.b && t >= from && t < end }
			var c [3]int
			for _, o := range in.Jobs {
				if o.ID == j.ID || o.Pool != j.Pool {
					continue
				}
				if o.SubmitTime.After(j.SubmitTime) && o.Request.DemandMilli() > 0 && fits(o, j) {
					for _, r := range runsOf[o.ID] {
						if inside(sec(r.Start)) {
							c[0]++
						}
					}
				}
				if o.Tier > j.Tier && inside(sec(o.SubmitTime)) {
					c[2]++
				}
			}
			for _, r := range in.Releases {
				if r.Pool == j.Pool && matches(r, j) && inside(sec(r.At)) {
					c[1]++
				}
			}
			for k := range c {
				best[k] = max(best[k], c[k])
			}
		}
		if best != [3]int{} {
			out[j.ID] = best
		}
	}
	return out
}

func TestTimeIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 5000} {
		for _, span := range []int64{1, 50, 1e6, 1e15} {
			times := make([]int64, n)
			for i := range times {
				times[i] = rng.Int64N(span) - span/2
			}
			slices.Sort(times)
			x := timeIndex{times: times}
			x.build()
			for k := 0; k < 2000; k++ {
				q := rng.Int64N(2*span+2) - span - 1
				if k < len(times) {
					q = times[k] // exact hits, duplicates included
				}
				if got, want := x.before(q), lowerBound(times, q); got != want {
					t.Fatalf("n=%d span=%d: before(%d) = %d, want %d", n, span, q, got, want)
				}
			}
		}
	}
}

func TestRankSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for _, n := range []int{1, 63, 64, 65, 511, 512, 8191, 8192, 8193, 30000} {
		var r rankSet
		r.reset(n)
		member := make([]bool, n)
		for round := 0; round < 2; round++ {
			for _, p := range rng.Perm(n)[:n/2+1] {
				if !member[p] {
					member[p] = true
					r.addIf(p, true)
					r.addIf(p, false) // a no-op: the position stays counted once
				}
			}
			want := int32(0)
			for p := 0; p <= n; p++ {
				if got := r.before(p); got != want {
					t.Fatalf("n=%d round %d: before(%d) = %d, want %d", n, round, p, got, want)
				}
				if p < n && member[p] {
					want++
				}
			}
		}
		r.clear()
		if got := r.before(n); got != 0 {
			t.Errorf("n=%d: %d members after clear", n, got)
		}
	}
}

func TestRadixSorts(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for _, n := range []int{0, 5, 255, 256, 3000} {
		for _, span := range []int64{1, 1000, 1 << 40, math.MaxInt64} {
			a := make([]int64, n)
			refs := make([]startRef, n)
			for i := range a {
				a[i] = rng.Int64N(span) - span/2
				refs[i] = startRef{start: a[i] / 7, idx: int32(i)}
			}
			want := slices.Clone(a)
			slices.Sort(want)
			if got := sortInt64s(a, make([]int64, n)); !slices.Equal(got, want) {
				t.Fatalf("n=%d span=%d: sortInt64s wrong", n, span)
			}
			got := sortStartRefs(refs, make([]startRef, n))
			for i := 1; i < len(got); i++ {
				if got[i-1].start > got[i].start || got[i-1].start == got[i].start && got[i-1].idx > got[i].idx {
					t.Fatalf("n=%d span=%d: sortStartRefs not sorted and stable at %d", n, span, i)
				}
			}
		}
	}
}

// TestStarvationFloor checks Options.StarvationMinWaitS: a wait carries
// signals only once it has lasted max(its queue's objective, the floor),
// measured to its end or the report end, and a job's counts are the largest
// over its waits that reach it.
func TestStarvationFloor(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("short", 0, started(250)),                      // waited 250 s: below the 300 s default floor
			testJob("long", 0, started(400)),                       // waited 400 s: counts
			testJob("obj", 0, inQueue("slow", vocab.TierStandard)), // still waiting; objective 600 s raises its floor
			testJob("rq", 0, started(310)),                         // 310 s initial wait, then a 100 s requeue wait
		},
		Runs:    []Run{testRun("short", 250, -1), testRun("long", 400, -1), testRun("rq", 310, 500), testRun("rq", 600, -1)},
		Targets: []QueueTarget{{Queue: "q", ServiceShare: 1}, {Queue: "slow", ServiceShare: 1, MaxWait: 600 * time.Second}},
	}
	for i := 0; i < 4; i++ { // a release every 100 s matches every job
		in.Releases = append(in.Releases, Release{At: at(float64(100*i + 50)), Pool: "p"})
	}
	for _, t := range []float64{505, 510, 515, 520, 540, 560, 580} { // during rq's requeue wait [500, 600)
		in.Releases = append(in.Releases, Release{At: at(t), Pool: "p"})
	}
	o := window(0, 1000, 550, nil)
	o.StarvationMinWaitS = 0 // the default floor
	r := mustCompute(t, in, o)
	if r.Options.StarvationMinWaitS != DefaultStarvationMinWait.Seconds() {
		t.Errorf("effective floor %v s, want the default %v", r.Options.StarvationMinWaitS, DefaultStarvationMinWait.Seconds())
	}
	s := starvingByID(r)
	if _, ok := s["short"]; ok {
		t.Errorf("a 250 s wait is below the floor but has signals: %+v", s["short"])
	}
	if s["long"].Releases != 4 || s["rq"].Releases != 3 {
		t.Errorf("releases long %d, rq %d; want 4 (50…350) and 3 (the 310 s wait's; its 100 s requeue wait with 4 is below the floor)",
			s["long"].Releases, s["rq"].Releases)
	}
	if _, ok := s["obj"]; ok {
		t.Errorf("obj has waited 550 s of a 600 s objective, yet has signals: %+v", s["obj"])
	}
	o.Now = at(700) // obj now 700 s > 600 s; rq's requeue wait 100 s, still below
	s = starvingByID(mustCompute(t, in, o))
	if s["obj"].Releases != 11 || s["rq"].Releases != 3 {
		t.Errorf("at 700: obj releases %d (want 11), rq %d (want 3)", s["obj"].Releases, s["rq"].Releases)
	}
	o.Now, o.StarvationMinWaitS = at(550), NoStarvationMinWait
	s = starvingByID(mustCompute(t, in, o))
	if s["short"].Releases != 2 || s["rq"].Releases != 5 {
		t.Errorf("without a floor: short %d releases (want 2), rq %d (want 5: its requeue wait's until 550, more than the 3 of its first)",
			s["short"].Releases, s["rq"].Releases)
	}
	if _, ok := s["obj"]; ok {
		t.Errorf("without a floor the queue's objective still applies: obj %+v", s["obj"])
	}
	o.StarvationMinWaitS = -2
	if _, err := Compute(in, o); err == nil || !strings.Contains(err.Error(), "starvation_min_wait_s") {
		t.Errorf("negative floor: error %v, want one naming starvation_min_wait_s", err)
	}
}
