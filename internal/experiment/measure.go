package experiment

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// ReportOptions are the queue report options an experiment measures with:
// the window and now, every threshold at its default, as `gpugov report`
// and GET /v1/reports/queue-service use them (store.QueueReport with only
// the window, now and the grouping set), so that an experiment's numbers
// are the report's. groupBy is the grouping (an empty list: the total only).
func ReportOptions(w queuereport.Window, now time.Time, groupBy ...string) queuereport.Options {
	if groupBy == nil {
		groupBy = []string{}
	}
	return queuereport.Options{Window: w, Now: now, GroupBy: groupBy}
}

func measure(in queuereport.Input, scope Scope, w queuereport.Window, now time.Time, gov Governance) (Measurement, error) {
	sub := ScopeInput(in, scope.Pools)
	m := Measurement{Window: w, Governance: gov, ByTier: []queuereport.Group{}, ByQueue: []queuereport.Group{}}
	byTier, err := queuereport.Compute(sub, ReportOptions(w, now, queuereport.KeyTier))
	if err != nil {
		return Measurement{}, fmt.Errorf("measure %s: %w", windowText(w), err)
	}
	byQueue, err := queuereport.Compute(sub, ReportOptions(w, now, queuereport.KeyQueue))
	if err != nil {
		return Measurement{}, fmt.Errorf("measure %s: %w", windowText(w), err)
	}
	// The total is every job whatever the grouping.
	m.Total = byTier.Total
	watched := func(string) bool { return true }
	tiers := func(string) bool { return true }
	if len(scope.Queues) > 0 {
		watched = func(q string) bool { return slices.Contains(scope.Queues, q) }
		has := map[string]bool{}
		for _, j := range sub.Jobs {
			if watched(j.Queue) {
				has[j.Tier.String()] = true
			}
		}
		tiers = func(t string) bool { return has[t] }
	}
	for _, g := range byTier.Groups {
		if tiers(g.Key[queuereport.KeyTier]) {
			m.ByTier = append(m.ByTier, g)
		}
	}
	for _, g := range byQueue.Groups {
		if watched(g.Key[queuereport.KeyQueue]) {
			m.ByQueue = append(m.ByQueue, g)
		}
	}
	return m, nil
}

// ScopeInput returns the records of in that belong to pools (all of in when
// pools is empty): the jobs of those pools with their runs and wait events,
// the releases and capacity of those pools; the queue targets and project
// weights are kept whole (the report's target shares are normalised over
// every queue). in is not modified; the result shares its records' values.
func ScopeInput(in queuereport.Input, pools []string) queuereport.Input {
	if len(pools) == 0 {
		return in
	}
	inScope := func(p string) bool { return slices.Contains(pools, p) }
	out := queuereport.Input{Targets: in.Targets, ProjectWeights: in.ProjectWeights,
		Jobs: []queuereport.Job{}, Runs: []queuereport.Run{}, WaitEvents: []queuereport.WaitEvent{}, Releases: []queuereport.Release{}}
	kept := map[string]bool{}
	for _, j := range in.Jobs {
		if inScope(j.Pool) {
			out.Jobs = append(out.Jobs, j)
			kept[j.ID] = true
		}
	}
	for _, r := range in.Runs {
		if kept[r.JobID] {
			out.Runs = append(out.Runs, r)
		}
	}
	for _, e := range in.WaitEvents {
		if kept[e.JobID] {
			out.WaitEvents = append(out.WaitEvents, e)
		}
	}
	for _, r := range in.Releases {
		if inScope(r.Pool) {
			out.Releases = append(out.Releases, r)
		}
	}
	for _, c := range in.Capacity {
		if inScope(c.Pool) {
			out.Capacity = append(out.Capacity, c)
		}
	}
	return out
}

// BaselineWindow returns the window the baseline is measured over for an
// experiment switched in at start: Baseline when stated, else the window
// of WindowSeconds ending at start.
func (s *Spec) BaselineWindow(start time.Time) queuereport.Window {
	if s.Baseline.From != nil && s.Baseline.To != nil {
		return queuereport.Window{From: *s.Baseline.From, To: *s.Baseline.To}
	}
	return queuereport.Window{From: start.Add(-s.Window()), To: start}
}

// ObservationWindow returns the candidate's window for an experiment
// switched in at start: WindowSeconds from start.
func (s *Spec) ObservationWindow(start time.Time) queuereport.Window {
	return queuereport.Window{From: start, To: start.Add(s.Window())}
}

// Window returns WindowSeconds as a duration.
func (s *Spec) Window() time.Duration { return seconds(s.WindowSeconds) }

// CheckInterval returns how often the rollback conditions are checked:
// CheckIntervalSeconds, or when it is 0 the window divided by DefaultChecks,
// at least cycleInterval (and never more than the window).
func (s *Spec) CheckInterval(cycleInterval time.Duration) time.Duration {
	if s.CheckIntervalSeconds > 0 {
		return seconds(s.CheckIntervalSeconds)
	}
	return min(max(s.Window()/DefaultChecks, cycleInterval), s.Window())
}

// EffectiveMinSample returns MinSample, or DefaultMinSample when it is 0.
func (s *Spec) EffectiveMinSample() int {
	if s.MinSample > 0 {
		return s.MinSample
	}
	return DefaultMinSample
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func windowText(w queuereport.Window) string {
	return w.From.UTC().Format(time.RFC3339) + ".." + w.To.UTC().Format(time.RFC3339)
}

// tierOrder sorts tier names highest first, unknown names last.
func tierRank(name string) int {
	t, err := vocab.ParseTier(name)
	if err != nil {
		return -1
	}
	return int(t)
}
