package queuereport_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/queuereport/reporttest"
)

// t0 is the origin of the random records' times.
var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// TestFixtureReport checks Compute against the fixture's hand-computed
// expectation.
func TestFixtureReport(t *testing.T) {
	f := reporttest.LoadFixture(t)
	got, err := queuereport.Compute(f.Input, f.Options)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range reporttest.DiffReports(t, f.Expected, got) {
		t.Error(d)
	}
}

// summarizeParts summarizes in over consecutive segments of [from, end) cut
// at cuts (seconds after t0), each through its binary form.
func summarizeParts(t *testing.T, in queuereport.Input, from, end float64, cuts []float64, now time.Time, groupBy []string, minWait time.Duration) []*queuereport.Summary {
	t.Helper()
	bounds := append(append([]float64{from}, cuts...), end)
	var parts []*queuereport.Summary
	for k := 0; k+1 < len(bounds); k++ {
		s, err := queuereport.Summarize(in, queuereport.Window{From: at(bounds[k]), To: at(bounds[k+1])}, now, groupBy, minWait)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, roundTrip(t, s))
	}
	return parts
}

// roundTrip encodes and decodes a summary, so that every comparison also
// checks the binary form.
func roundTrip(t *testing.T, s *queuereport.Summary) *queuereport.Summary {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var out queuereport.Summary
	if err := out.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestAssembleEqualsCompute is the summaries' contract: on random records,
// windows, options, groupings and cuts (at whole seconds, where records
// start and end), Assemble over the summaries of the pieces — some merged
// first, as days of hours — gives exactly Compute's report of the window.
func TestAssembleEqualsCompute(t *testing.T) {
	K := queuereport.GroupKeys
	groupings := [][]string{nil, {}, {K[0]}, {K[3]}, {K[0], K[3]}, {K[1], K[2]}, {K[0], K[4]}, K}
	for seed := uint64(1); seed <= 80; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		in := reporttest.RandomInput(rng, 20+rng.IntN(150), t0, time.Second)
		from := float64(rng.IntN(1500))
		to := from + float64(1+rng.IntN(1500))
		now := from + float64(rng.IntN(2500))
		end := min(to, now)
		o := queuereport.Options{Window: queuereport.Window{From: at(from), To: at(to)}, Now: at(now),
			GroupBy: groupings[rng.IntN(len(groupings))], OvertakenThreshold: 1 + rng.IntN(2),
			StarvationReleases: 1 + rng.IntN(3), TierArrivalThreshold: 1 + rng.IntN(2),
			StarvingLimit:      []int{0, 3, queuereport.NoStarvingLimit}[rng.IntN(3)],
			StarvationMinWaitS: []float64{0, 60, queuereport.NoStarvationMinWait}[rng.IntN(3)]}
		want, err := queuereport.Compute(in, o)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if end <= from {
			continue
		}
		var cuts []float64
		for c := from + 1; c < end; c++ {
			if rng.IntN(int(end-from)/4+1) == 0 {
				cuts = append(cuts, c)
			}
		}
		need, err := queuereport.RequiredMinWait(o, in.Targets)
		if err != nil {
			t.Fatal(err)
		}
		minWait := time.Duration(rng.Int64N(int64(need) + 1))
		sumBy := K
		if rng.IntN(2) == 0 && !containsKey(o.GroupBy, queuereport.KeyProject) {
			sumBy = queuereport.DefaultGroupBy
		}
		parts := summarizeParts(t, in, from, end, cuts, at(now), sumBy, minWait)
		if len(parts) > 2 && rng.IntN(2) == 0 {
			k := 1 + rng.IntN(len(parts)-1)
			head, err := queuereport.Merge(parts[:k]...)
			if err != nil {
				t.Fatal(err)
			}
			parts = append([]*queuereport.Summary{roundTrip(t, head)}, parts[k:]...)
		}
		got, err := queuereport.Assemble(o, in.Targets, queuereport.ShareBase{Capacity: in.Capacity, ProjectWeights: in.ProjectWeights}, parts, reporttest.Details(in, at(from), at(end)))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for _, d := range reporttest.DiffReports(t, want, got) {
			t.Errorf("seed %d (%d cuts, min wait %s, group by %v): %s", seed, len(cuts), minWait, o.GroupBy, d)
		}
		if t.Failed() {
			return
		}
	}
}

func containsKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// TestAssembleOfFixture checks the hand-computed fixture through summaries
// of every hour.
func TestAssembleOfFixture(t *testing.T) {
	f := reporttest.LoadFixture(t)
	var cuts []float64
	for h := 1; h < 8; h++ {
		cuts = append(cuts, float64(h*3600))
	}
	o := f.Options
	parts := summarizeParts(t, f.Input, 0, 8*3600, cuts, o.Now, nil, 0)
	got, err := queuereport.Assemble(o, f.Input.Targets, queuereport.ShareBase{Capacity: f.Input.Capacity, ProjectWeights: f.Input.ProjectWeights}, parts, reporttest.Details(f.Input, o.Window.From, o.Now))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range reporttest.DiffReports(t, f.Expected, got) {
		t.Error(d)
	}
}

// TestAssembleRefusesWhatItCannotAnswer checks the summaries' limits: a gap
// between parts, a grouping they lack (the report's, or pool for the reason
// shares), a MinWait above what the report
// needs, unobserved time, and corrupt binary forms.
func TestAssembleRefusesWhatItCannotAnswer(t *testing.T) {
	in := reporttest.RandomInput(rand.New(rand.NewPCG(1, 2)), 40, t0, time.Second)
	o := queuereport.Options{Window: queuereport.Window{From: at(0), To: at(1000)}, Now: at(1000)}
	a := summarizeParts(t, in, 0, 500, nil, at(1000), nil, 0)[0]
	b := summarizeParts(t, in, 600, 1000, nil, at(1000), nil, 0)[0]
	if _, err := queuereport.Assemble(o, in.Targets, queuereport.ShareBase{Capacity: in.Capacity, ProjectWeights: in.ProjectWeights}, []*queuereport.Summary{a, b}, nil); err == nil {
		t.Error("a gap between parts was accepted")
	}
	whole := summarizeParts(t, in, 0, 1000, nil, at(1000), nil, 0)
	o.GroupBy = []string{queuereport.KeyProject}
	if _, err := queuereport.Assemble(o, in.Targets, queuereport.ShareBase{Capacity: in.Capacity, ProjectWeights: in.ProjectWeights}, whole, nil); err == nil {
		t.Error("group_by project from summaries without it was accepted")
	}
	byQueue := summarizeParts(t, in, 0, 1000, nil, at(1000), []string{queuereport.KeyQueue}, 0)
	o.GroupBy = []string{queuereport.KeyQueue}
	if _, err := queuereport.Assemble(o, in.Targets, queuereport.ShareBase{}, byQueue, nil); err == nil {
		t.Error("summaries without pool were accepted: the reason shares are per pool")
	}
	o.GroupBy = nil
	long := summarizeParts(t, in, 0, 1000, nil, at(1000), nil, 10*time.Minute)
	if _, err := queuereport.Assemble(o, in.Targets, queuereport.ShareBase{Capacity: in.Capacity, ProjectWeights: in.ProjectWeights}, long, nil); err == nil {
		t.Error("summaries listing waits from 10 min were accepted for objectives of 2 min")
	}
	if _, err := queuereport.Summarize(in, queuereport.Window{From: at(0), To: at(1000)}, at(900), nil, 0); err == nil {
		t.Error("a summary of unobserved time was accepted")
	}
	data, err := whole[0].MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{nil, data[:3], data[:len(data)/2], append([]byte{'X'}, data[1:]...)} {
		if err := new(queuereport.Summary).UnmarshalBinary(bad); err == nil {
			t.Errorf("corrupt summary of %d bytes decoded", len(bad))
		}
	}
}
