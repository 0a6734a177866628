// Package reporttest holds what the queue service report's tests share:
// comparing reports as JSON, the hand-computed fixture, and random records.
// The pure package, the store and the API check their reports against each
// other with the same comparison, so "identical numbers" means one thing.
package reporttest

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Tolerance is the relative difference (to the larger magnitude, at least 1)
// under which two numbers are equal: shares such as 37800/60900 are not exact
// decimals, and JSON rounds floats.
const Tolerance = 1e-9

// Diff lists the differences between two decoded JSON values (maps, slices,
// float64, strings, bools, nil), naming each by its path from path; numbers
// are equal within Tolerance. An empty result means equal.
func Diff(path string, want, have any) []string {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, have %v", path, have)}
		}
		return diffObjects(path, w, h)
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return []string{fmt.Sprintf("%s: want %v, have %v", path, want, have)}
		}
		var out []string
		for i := range w {
			out = append(out, Diff(fmt.Sprintf("%s[%d]", path, i), w[i], h[i])...)
		}
		return out
	case float64:
		h, ok := have.(float64)
		if !ok || math.Abs(w-h) > Tolerance*math.Max(1, math.Max(math.Abs(w), math.Abs(h))) {
			return []string{fmt.Sprintf("%s: want %v, have %v", path, want, have)}
		}
		return nil
	default:
		if want != have {
			return []string{fmt.Sprintf("%s: want %v, have %v", path, want, have)}
		}
		return nil
	}
}

func diffObjects(path string, w, h map[string]any) []string {
	keys := map[string]bool{}
	for k := range w {
		keys[k] = true
	}
	for k := range h {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []string
	for _, k := range names {
		wv, wok := w[k]
		hv, hok := h[k]
		switch {
		case !wok:
			out = append(out, fmt.Sprintf("%s.%s: unexpected %v", path, k, hv))
		case !hok:
			out = append(out, fmt.Sprintf("%s.%s: missing, want %v", path, k, wv))
		default:
			out = append(out, Diff(path+"."+k, wv, hv)...)
		}
	}
	return out
}

// AsJSON returns v marshalled and decoded into generic JSON values (v may
// already be one, or raw JSON as json.RawMessage).
func AsJSON(t testing.TB, v any) any {
	t.Helper()
	b, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// DiffReports compares two reports (or any values with a JSON form) as JSON;
// see Diff.
func DiffReports(t testing.TB, want, have any) []string {
	t.Helper()
	return Diff("report", AsJSON(t, want), AsJSON(t, have))
}

// Fixture is the layout of the shared hand-computed fixture
// (internal/queuereport/testdata/fixture.json; its README and the comment in
// the package's fixture_test.go hold the arithmetic).
type Fixture struct {
	Input    queuereport.Input   `json:"input"`
	Options  queuereport.Options `json:"options"`
	Expected json.RawMessage     `json:"expected"`
}

// FixtureFile returns the fixture's path, wherever the test runs from.
func FixtureFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "fixture.json")
}

// LoadFixture reads and decodes the fixture.
func LoadFixture(t testing.TB) Fixture {
	t.Helper()
	b, err := os.ReadFile(FixtureFile())
	if err != nil {
		t.Fatal(err)
	}
	var f Fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("decode %s: %v", FixtureFile(), err)
	}
	return f
}

// Queues are the queues RandomInput uses, with their tiers; Targets are their
// targets (qd has none), with pool shares for qa and qc.
var (
	Queues = []struct {
		Name string
		Tier vocab.Tier
	}{{"qa", vocab.TierStandard}, {"qb", vocab.TierProduction}, {"qc", vocab.TierExperiment}, {"qd", vocab.TierKeyProject}}
	Targets = []queuereport.QueueTarget{
		{Queue: "qa", ServiceShare: 3, MaxWait: 300 * time.Second, MinShare: 0.2, MaxShare: 0.6},
		{Queue: "qb", ServiceShare: 1, MaxWait: 120 * time.Second},
		{Queue: "qc", ServiceShare: 0, MaxShare: 0.3},
	}
	// Capacity is RandomInput's pool capacity: pool q is not listed (no pool share there).
	Capacity = []queuereport.PoolCapacity{{Pool: "p", GPUs: 8}}
	// Pools are RandomInput's pools; Models the GPU models of their nodes.
	Pools  = []string{"p", "q"}
	Models = []string{"A", "B"}
)

// RandomInput makes n random jobs submitted in [t0, t0+2000 units) in two pools,
// the four Queues, two projects and three job types (one empty), asking 0 to
// 4 GPUs, whole or shared, of any or given models, with 0 to 3 runs each
// (the GPUs of a run's node, one model of Models, are released at its end),
// wait events splitting every wait into reasons, and some jobs cancelled
// while waiting or still waiting. Times are whole units after t0, so that
// records share instants (the edge cases of half-open intervals); a unit of
// a second keeps the records within 45 minutes, a unit of minutes spreads
// them over days. Jobs are in ID order, runs and events in time order per job.
func RandomInput(rng *rand.Rand, n int, t0 time.Time, unit time.Duration) queuereport.Input {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s) * unit) }
	atp := func(s float64) *time.Time { t := at(s); return &t }
	in := queuereport.Input{Targets: append([]queuereport.QueueTarget(nil), Targets...),
		Capacity: append([]queuereport.PoolCapacity(nil), Capacity...), ProjectWeights: map[string]float64{"vision": 3}}
	modelSets := [][]string{nil, {"A"}, {"B"}, {"A", "B"}}
	events := func(id string, a, b float64, open bool) {
		for t := a; ; {
			e := queuereport.WaitEvent{JobID: id, Reason: vocab.WaitReasons[rng.IntN(4)], Start: at(t)}
			next := t + float64(1+rng.IntN(150))
			if next >= b || (open && next >= 2500) {
				if !open {
					e.End = atp(b)
				}
				in.WaitEvents = append(in.WaitEvents, e)
				return
			}
			e.End = atp(next)
			in.WaitEvents = append(in.WaitEvents, e)
			t = next
		}
	}
	for i := 0; i < n; i++ {
		q := Queues[rng.IntN(len(Queues))]
		submit := float64(rng.IntN(2000))
		j := queuereport.Job{ID: fmt.Sprintf("j%03d", i), Queue: q.Name, Tier: q.Tier,
			JobType: []string{"train", "serve", ""}[rng.IntN(3)], Pool: Pools[rng.IntN(2)],
			Project: []string{"vision", "speech"}[rng.IntN(2)], SubmitTime: at(submit), State: string(vocab.JobWaiting)}
		j.Request = queuereport.Request{GPUs: []int{0, 1, 1, 1, 2, 4}[rng.IntN(6)], Models: modelSets[rng.IntN(4)]}
		if j.Request.GPUs == 1 {
			j.Request.GPUMilli = []int{0, 250, 500}[rng.IntN(3)]
		}
		t := submit
		runs := rng.IntN(4)
		open := false
		for k := 0; k < runs; k++ {
			start := t + float64(rng.IntN(400))
			events(j.ID, t, start, false)
			if k == 0 {
				j.FirstStart = atp(start)
			}
			r := queuereport.Run{JobID: j.ID, Start: at(start), GPUMilli: j.Request.DemandMilli()}
			j.State = string(vocab.JobRunning)
			if k < runs-1 || rng.IntN(2) == 0 {
				t = start + float64(1+rng.IntN(300))
				r.End = atp(t)
				in.Releases = append(in.Releases, queuereport.Release{At: at(t), Pool: j.Pool,
					Models: []string{Models[rng.IntN(2)]}, GPUMilli: r.GPUMilli})
				j.State = string(vocab.JobWaiting)
			} else {
				open = true
			}
			in.Runs = append(in.Runs, r)
		}
		if !open {
			switch rng.IntN(3) {
			case 0:
				events(j.ID, t, 1e9, true)
			case 1:
				end := t + float64(min(runs, 1)+rng.IntN(500)) // after its last run, if any; at its submit, sometimes
				events(j.ID, t, end, false)
				j.End, j.Cancelled, j.CancelledWhileWaiting, j.State = atp(end), true, true, string(vocab.JobCancelled)
			default:
				if runs > 0 {
					j.End, j.State = atp(t), string(vocab.JobSucceeded)
				} else {
					events(j.ID, t, 1e9, true)
				}
			}
		}
		in.Jobs = append(in.Jobs, j)
	}
	return in
}

// Details answers queuereport.DetailFunc from in as Compute reads it: the
// job's State and the reason of its latest wait event that starts before end
// among those overlapping [from, end) or ending at from (ties: the first
// reason in byte order).
func Details(in queuereport.Input, from, end time.Time) queuereport.DetailFunc {
	return func(ids []string) (map[string]queuereport.JobDetail, error) {
		want := map[string]bool{}
		for _, id := range ids {
			want[id] = true
		}
		out := map[string]queuereport.JobDetail{}
		for _, j := range in.Jobs {
			if want[j.ID] {
				out[j.ID] = queuereport.JobDetail{State: j.State}
			}
		}
		last := map[string]queuereport.WaitEvent{}
		for _, e := range in.WaitEvents {
			if !want[e.JobID] || !e.Start.Before(end) || (e.End != nil && e.End.Before(from)) {
				continue
			}
			l, ok := last[e.JobID]
			if !ok || e.Start.After(l.Start) || (e.Start.Equal(l.Start) && e.Reason < l.Reason) {
				last[e.JobID] = e
			}
		}
		for id, e := range last {
			d := out[id]
			d.LastReason = string(e.Reason)
			out[id] = d
		}
		return out, nil
	}
}
