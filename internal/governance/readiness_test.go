package governance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time    { return t0.Add(time.Duration(s) * time.Second) }
func atp(s int) *time.Time  { v := at(s); return &v }
func fp(v float64) *float64 { return &v }
func win(from, to int) queuereport.Window {
	return queuereport.Window{From: at(from), To: at(to)}
}

// TestPoolUnevaluatedSeconds: the waiting of jobs pending at the end with
// no wait event open, from the start of their current wait, clipped to
// the window; evaluated, running, ended and other pools' jobs left out.
func TestPoolUnevaluatedSeconds(t *testing.T) {
	in := queuereport.Input{
		Jobs: []queuereport.Job{
			{ID: "never", Pool: "p", SubmitTime: at(900)},                     // never evaluated: 900..1000
			{ID: "old", Pool: "p", SubmitTime: at(-500)},                      // never evaluated since before the window: 0..1000
			{ID: "requeued", Pool: "p", SubmitTime: at(0)},                    // ran 100..600, not re-evaluated: 600..1000
			{ID: "evaluated", Pool: "p", SubmitTime: at(0)},                   // an open event: evaluated
			{ID: "relooked", Pool: "p", SubmitTime: at(0)},                    // its event closed at 700, nothing since: 700..1000
			{ID: "running", Pool: "p", SubmitTime: at(0), FirstStart: atp(5)}, // running
			{ID: "ended", Pool: "p", SubmitTime: at(0), End: atp(50)},         // ended
			{ID: "other", Pool: "q", SubmitTime: at(0)},                       // another pool
		},
		Runs: []queuereport.Run{{JobID: "requeued", Start: at(100), End: atp(600)}, {JobID: "running", Start: at(5)}},
		WaitEvents: []queuereport.WaitEvent{
			{JobID: "evaluated", Reason: vocab.ReasonCapacityBusy, Start: at(1)},
			{JobID: "relooked", Reason: vocab.ReasonHeld, Start: at(1), End: atp(700)},
			{JobID: "requeued", Reason: vocab.ReasonCapacityBusy, Start: at(1), End: atp(100)},
		},
	}
	got := PoolUnevaluatedSeconds(in, "p", win(0, 2000), at(1000))
	if want := 100.0 + 1000 + 400 + 300; got != want {
		t.Errorf("PoolUnevaluatedSeconds = %v, want %v", got, want)
	}
}

// readyInput is a pool that passes every check, with the numbers the
// tests change one at a time.
func readyInput() *ReadinessInput {
	p := policy.Default()
	p.Queues = []policy.Queue{{Name: "production", Tier: "production", Protected: true, ProtectionExplicit: true},
		{Name: "experiment", Tier: "experiment", LowRisk: true, ProtectionExplicit: true, MinShare: 0.25}}
	p.ProtectionWindows = []policy.Window{{Name: "launch", Start: at(86000), End: at(90000), Queues: []string{"production"}}}
	last, before := win(86400, 172800), win(0, 86400)
	return &ReadinessInput{
		Pool: "a100", Stage: vocab.StageTrial, Now: at(172800), Policy: p, Evidence: EvidenceRule{MinVerified: 1, MaxFailureRate: 0.2},
		Last: experiment.Measurement{Window: last, Total: queuereport.Group{LongestWaitS: fp(400), StarvingJobs: 0},
			ByTier: []queuereport.Group{{Key: map[string]string{"tier": "production"}, Started: 3, WaitP95S: fp(20)}},
			ByQueue: []queuereport.Group{{Key: map[string]string{"queue": "experiment"}, MinShare: fp(0.25), PoolShare: fp(0.3),
				LongestWaitS: fp(400)}}},
		Before:  experiment.Measurement{Window: before, Total: queuereport.Group{LongestWaitS: fp(500)}},
		Waits:   WaitTime{ReasonSeconds: 900, LatencySeconds: 50, UnevaluatedSeconds: 50},
		Running: RunningObservation{Allocations: 10, Sampled: 6, Progressing: 5, Observed: 9},
		Queues: []QueueProtection{{Queue: "production", Tier: "production", Explicit: true, InPolicy: true, Protected: true},
			{Queue: "experiment", Tier: "experiment", Explicit: true, InPolicy: true, LowRisk: true}},
		Profiles: []ProfileRecord{{ProfileStanding: ProfileStanding{Profile: "vision/train", Verified: 3, Failed: 0}, Jobs: 2}},
		LossLast: Loss{Records: 2, Drills: 1, GPUSeconds: 10000, RecomputeGPUSeconds: 4000},
	}
}

func check(t *testing.T, r *Readiness, c vocab.ReadinessCheck) CheckResult {
	t.Helper()
	for _, cr := range r.Checks {
		if cr.Check == c {
			return cr
		}
	}
	t.Fatalf("no check %s in %+v", c, r.Checks)
	return CheckResult{}
}

func measure(t *testing.T, c CheckResult, name string) Measure {
	t.Helper()
	for _, m := range c.Measures {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("check %s has no measure %s: %+v", c.Check, name, c.Measures)
	return Measure{}
}

// TestReadinessPasses: every check passes with its numbers, in the
// vocabulary's order, and the protection windows are listed.
func TestReadinessPasses(t *testing.T) {
	r := EvaluateReadiness(readyInput())
	if !r.Ready || len(r.Failed) != 0 || len(r.Checks) != len(vocab.ReadinessChecks) {
		t.Fatalf("readiness %+v, want ready with every check", r)
	}
	for i, c := range r.Checks {
		if c.Check != vocab.ReadinessChecks[i] || c.Precondition != c.Check.Precondition() || !c.Passed {
			t.Errorf("check %d: %+v", i, c)
		}
	}
	if w := check(t, r, vocab.ReadinessWaitReasons); *measure(t, w, "reason_share").Value != 900.0/950 ||
		*measure(t, w, "not_yet_evaluated_share").Value != 0.05 ||
		w.Detail != "94.7% of 950 job-seconds waited after a first evaluation carry a wait reason (min 80.0%); 5.0% of all 1000 waiting job-seconds still not_yet_evaluated (max 20.0%); service latency 5.0%" {
		t.Errorf("wait reasons %+v", w)
	}
	if c := check(t, r, vocab.ReadinessRunningIdle); *measure(t, c, "observed_share").Value != 0.9 ||
		!strings.Contains(c.Detail, "9 of 10 running allocations (90.0%, min 90.0%)") {
		t.Errorf("running/idle %+v", c)
	}
	if c := check(t, r, vocab.ReadinessLongestWait); *measure(t, c, "longest_wait_s").Previous != 500 ||
		c.Detail != "longest wait 400 s is not above 550 s (the window before's 500 s + 10%)" {
		t.Errorf("longest wait %+v", c)
	}
	if c := check(t, r, vocab.ReadinessLossBudget); *measure(t, c, "recovery_loss_gpu_s_per_day").Value != 10000 ||
		*measure(t, c, "recovery_loss_gpu_s_per_day").Limit != 28800 {
		t.Errorf("loss %+v", c)
	}
	if len(r.ProtectionWindows) != 1 || r.ProtectionWindows[0].Name != "launch" || r.ProtectionWindows[0].Active {
		t.Errorf("protection windows %+v", r.ProtectionWindows)
	}
	if r.Summary() != "pool a100 is ready: all 8 checks passed" {
		t.Errorf("summary %q", r.Summary())
	}
}

// TestReadinessFailsEachCheck: each change fails exactly its check, whose
// detail says why with the numbers.
func TestReadinessFailsEachCheck(t *testing.T) {
	for _, tc := range []struct {
		check  vocab.ReadinessCheck
		change func(*ReadinessInput)
		detail string
	}{
		{vocab.ReadinessWaitReasons, func(in *ReadinessInput) {
			in.Waits = WaitTime{ReasonSeconds: 500, LatencySeconds: 50, UnevaluatedSeconds: 450}
		},
			"52.6% of 950 job-seconds waited after a first evaluation carry a wait reason (min 80.0%); 45.0% of all 1000 waiting job-seconds still not_yet_evaluated (max 20.0%); service latency 5.0%"},
		{vocab.ReadinessRunningIdle, func(in *ReadinessInput) { in.Running = RunningObservation{Allocations: 4, Sampled: 1, Observed: 1} },
			"1 of 4 running allocations (25.0%, min 90.0%) have a utilisation sample (1) or progress (0) from the last 600 s"},
		{vocab.ReadinessProtection, func(in *ReadinessInput) {
			in.Queues = append(in.Queues, QueueProtection{Queue: "standard", Tier: "standard", InPolicy: true},
				QueueProtection{Queue: "adhoc", Tier: "standard"})
		}, "2 of 4 queues set protected or low_risk explicitly; not: standard (sets neither protected nor low_risk), adhoc (used by the pool's jobs, not in the policy); 1 protection windows (0 active now)"},
		{vocab.ReadinessProtection, func(in *ReadinessInput) { in.Queues = nil },
			"the policy lists no queue: protection is the stored queues' and not explicit; 1 protection windows (0 active now)"},
		{vocab.ReadinessSaveRestore, func(in *ReadinessInput) {
			in.Profiles = append(in.Profiles, ProfileRecord{ProfileStanding: ProfileStanding{Profile: "nlp/simulated"}, Jobs: 1})
		}, "1 of 2 checkpointable profiles have 1+ verified resumes and a failure rate ≤ 20.0%; profile nlp/simulated has 0 verified resumes, needs 1"},
		{vocab.ReadinessLongestWait, func(in *ReadinessInput) { in.Last.Total.LongestWaitS = fp(600) },
			"longest wait 600 s is above 550 s (the window before's 500 s + 10%)"},
		{vocab.ReadinessLongestWait, func(in *ReadinessInput) { in.Before.Total.LongestWaitS = nil },
			"longest wait 400 s exceeds the 300 s floor and the window before has no wait to compare with"},
		{vocab.ReadinessLowPriority, func(in *ReadinessInput) {
			in.Last.ByQueue[0].PoolShare, in.Last.ByQueue[0].LongestWaitS = fp(0.1), fp(900)
		}, "0 of 1 queues with a min_share served; 0 starving jobs (max 0; window before: 0); experiment below its min_share 0.25 (pool share 10.0%, longest wait 900 s)"},
		{vocab.ReadinessLowPriority, func(in *ReadinessInput) { in.Last.Total.StarvingJobs = 2 },
			"1 of 1 queues with a min_share served; 2 starving jobs (max 0; window before: 0)"},
		{vocab.ReadinessKeyJobs, func(in *ReadinessInput) { in.Last.ByTier[0].JobsOverObjective = 1 },
			"1 production and key-project jobs waited past their queue's objective (max 0; window before: 0); 3 of them started in the window"},
		{vocab.ReadinessLossBudget, func(in *ReadinessInput) { in.LossLast.GPUSeconds = 40000 },
			"2 preemptions and drills (1 drill) cost 40000 GPU-s (recompute 4000), 40000 GPU-s a day against a budget of 28800 (window before: 0 a day)"},
	} {
		t.Run(string(tc.check), func(t *testing.T) {
			in := readyInput()
			tc.change(in)
			r := EvaluateReadiness(in)
			if r.Ready || !slices.Equal(r.Failed, []vocab.ReadinessCheck{tc.check}) {
				t.Fatalf("failed %v, want only %s", r.Failed, tc.check)
			}
			if c := check(t, r, tc.check); c.Detail != tc.detail {
				t.Errorf("detail\n got %q\nwant %q", c.Detail, tc.detail)
			}
			if !strings.Contains(r.Summary(), string(tc.check)+" failed") {
				t.Errorf("summary %q", r.Summary())
			}
		})
	}
}

// TestReadinessEmptyPool: a pool with nothing waiting, running or
// checkpointable passes what it cannot fail, and fails protection without
// queues.
func TestReadinessEmptyPool(t *testing.T) {
	in := readyInput()
	in.Waits, in.Running, in.Profiles, in.Queues = WaitTime{}, RunningObservation{}, nil, nil
	in.Last.Total.LongestWaitS, in.Before.Total.LongestWaitS = nil, nil
	r := EvaluateReadiness(in)
	if !slices.Equal(r.Failed, []vocab.ReadinessCheck{vocab.ReadinessProtection}) {
		t.Fatalf("failed %v, want only protection_explicit", r.Failed)
	}
	if c := check(t, r, vocab.ReadinessWaitReasons); c.Detail != "no waiting after a first evaluation in the window (0 waiting job-seconds, all service latency): no reason owed" ||
		measure(t, c, "reason_share").Value != nil {
		t.Errorf("wait reasons %+v", c)
	}
}

// TestReadinessOnMeasuredWindows: the questions read experiment.Measure's
// numbers, the queue report's definitions, over the pool's records.
func TestReadinessOnMeasuredWindows(t *testing.T) {
	in := readyInput()
	records := queuereport.Input{
		Targets: []queuereport.QueueTarget{{Queue: "production", ServiceShare: 1, MaxWait: time.Minute}},
		Jobs: []queuereport.Job{
			{ID: "p1", Queue: "production", Tier: vocab.TierProduction, Pool: "a100", Project: "x", Request: queuereport.Request{GPUs: 1},
				SubmitTime: at(100), FirstStart: atp(200)},
			{ID: "p2", Queue: "production", Tier: vocab.TierProduction, Pool: "a100", Project: "x", Request: queuereport.Request{GPUs: 1},
				SubmitTime: at(86500), FirstStart: atp(86530)},
		},
		Runs: []queuereport.Run{{JobID: "p1", Start: at(200), GPUMilli: 1000}, {JobID: "p2", Start: at(86530), GPUMilli: 1000}},
		WaitEvents: []queuereport.WaitEvent{
			{JobID: "p1", Reason: vocab.ReasonCapacityBusy, Start: at(100), End: atp(200)},
			{JobID: "p2", Reason: vocab.ReasonNotYetEvaluated, Start: at(86500), End: atp(86510)},
			{JobID: "p2", Reason: vocab.ReasonCapacityBusy, Start: at(86510), End: atp(86530)},
		},
	}
	var err error
	if in.Last, err = experiment.Measure(records, experiment.Scope{Pools: []string{"a100"}}, in.Last.Window, in.Now, experiment.Governance{}); err != nil {
		t.Fatal(err)
	}
	if in.Before, err = experiment.Measure(records, experiment.Scope{Pools: []string{"a100"}}, in.Before.Window, in.Now, experiment.Governance{}); err != nil {
		t.Fatal(err)
	}
	r := EvaluateReadiness(in)
	lw := measure(t, check(t, r, vocab.ReadinessLongestWait), "longest_wait_s")
	if *lw.Value != 30 || lw.Previous == nil || *lw.Previous != 100 {
		t.Errorf("longest wait %+v, want 30 s against 100 s", lw)
	}
	// p1 waited 100 s past production's 60 s objective, in the window before.
	kj := measure(t, check(t, r, vocab.ReadinessKeyJobs), "key_jobs_over_objective")
	if *kj.Value != 0 || *kj.Previous != 1 {
		t.Errorf("key jobs over objective %+v, want 0 now and 1 before", kj)
	}
	if secs := in.Last.Total.WaitReasonSeconds; secs["capacity_busy"] != 20 || secs["not_yet_evaluated"] != 10 {
		t.Errorf("wait reason seconds %v", secs)
	}
	if w := PoolUnevaluatedSeconds(records, "a100", in.Last.Window, in.Now); w != 0 {
		t.Errorf("unevaluated waiting of the last window %v, want 0", w)
	}
}

// The loss budget's detail counts in English: one record that is a drill
// read "1 preemptions and drills (1 drills)".
func TestLossBudgetDetailPlural(t *testing.T) {
	in := readyInput()
	in.LossLast = Loss{Records: 1, Drills: 1, GPUSeconds: 100, RecomputeGPUSeconds: 40}
	c := check(t, EvaluateReadiness(in), vocab.ReadinessLossBudget)
	if !strings.HasPrefix(c.Detail, "1 preemption or drill (1 drill) cost 100 GPU-s (recompute 40)") {
		t.Errorf("one drill: %q", c.Detail)
	}
	in.LossLast = Loss{Records: 2, Drills: 0}
	if c := check(t, EvaluateReadiness(in), vocab.ReadinessLossBudget); !strings.HasPrefix(c.Detail, "2 preemptions and drills (0 drills) cost") {
		t.Errorf("two preemptions: %q", c.Detail)
	}
}
