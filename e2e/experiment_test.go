package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/replay"
	"github.com/gpugov/gpugov/store"
)

// Live experiment settings (docs/design.md §3 step 8, §4 "Experiments").
//
// The aging experiment replays a real stretch of the trace: the first four
// hours of its busiest day (replay.DefaultFrom), 117 GPU pods, 61
// experiment-tier (BE) and 56 production (LS), all on one GPU or a share
// of one, on three real 2-GPU T4 nodes of the trace, 6 GPUs. The pods'
// trace run time fills 45 % of those GPUs; with the service's own second
// or so per placement and run at 600×, the experiment tier queues for up to
// a few hours of trace time. The same pods are replayed twice, first under
// the baseline, then, after the switch, under the candidate, so both
// windows measure the same input. At 600× a trace hour takes 6 s; runs are
// capped at an hour of trace time, so a pass lasts about half a minute.
//
// The baseline ages slowly next to fair share (10 points per second of
// wait against up to 1,000 fair-share points), so among experiment jobs
// fair share decides the order; the candidate ages a hundred times faster,
// which puts the longest waiting experiment job first. The simulator
// (gpugov simulate --vs, with a second of overhead per run) expects the
// experiment tier's longest wait down by about a third on this slice; the
// live verdict also carries the machine's noise (kept and not_met both
// occur), so the test holds the experiment's mechanics, not its verdict.
const (
	agingSliceFrom = replay.DefaultFrom
	agingSliceTo   = replay.DefaultFrom + 4*3600
	agingSpeed     = 600
	agingMaxRunS   = 3600
)

// agingBaseline is the env's policy in the aging experiment: the default
// rules with a slow aging of 10 points per second of eligible wait.
const agingBaseline = `version: gpugov.policy/v1
aging: {enabled: true, step_points: 10, interval_s: 1, cap_points: 3000}
queues:
  - {name: production, tier: production, share: 4, max_wait_s: 60, protected: true}
  - {name: key-project, tier: key-project, share: 3, max_wait_s: 600}
  - {name: standard, tier: standard, share: 2, max_wait_s: 3600}
  - {name: experiment, tier: experiment, share: 1, max_wait_s: 21600, low_risk: true}
`

// agingCandidate is agingBaseline changed in the aging group only: a
// hundred times the step, and experiment jobs may age into the standard
// band up to 12,000 points.
var agingCandidate = strings.NewReplacer(
	"step_points: 10,", "step_points: 1000,",
	"low_risk: true}", "low_risk: true, aging_ceiling_tier: standard, aging_cap_points: 12000}",
).Replace(agingBaseline)

// TestAgingExperimentOnRealTrace runs a live aging experiment through the
// API on a contended slice of the real trace: the slice is replayed under
// the baseline, the experiment is created with that replay as its stated
// baseline window, the workflow switches the candidate in, and the same
// slice is replayed again under it. The verdict's comparison holds the
// experiment tier's longest wait and production's P95 wait before and
// after; the timeline has every step; the cycles during the window ran the
// candidate, and after the window the baseline is back (not kept) or the
// candidate stays in force until it is promoted (kept).
func TestAgingExperimentOnRealTrace(t *testing.T) {
	dir := traceDir(t)
	base, err := policy.Parse("baseline.yaml", []byte(agingBaseline))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Parse("candidate.yaml", []byte(agingCandidate)); err != nil {
		t.Fatal(err)
	}
	nodes := traceNodes(t, dir, []nodePick{{"T4", 2, 3}})
	e := startEnv(t, envOptions{pools: alibaba.Pools(nodes, alibaba.PoolOptions{}), simSpeed: agingSpeed, policy: base})
	cli := buildGpugov(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	subs := agingSubmissions(t, dir)

	// The baseline: the slice under the env's policy, until every job ended.
	from := time.Now().UTC()
	replayPass(ctx, t, e, subs, "a-")
	to := time.Now().UTC()
	pass := to.Sub(from)
	t.Logf("baseline pass: %d jobs in %s", len(subs), pass.Round(time.Second))

	window := (pass + 20*time.Second).Round(time.Second)
	spec := &experiment.Spec{
		Name:       "aging-ceiling-standard",
		Hypothesis: "faster aging, with experiment jobs aging into the standard band, cuts the experiment tier's longest wait without hurting production's P95 wait",
		Candidate:  experiment.Candidate{Policy: agingCandidate},
		Scope:      experiment.Scope{Pools: []string{alibaba.DefaultPoolName}},
		Baseline:   experiment.BaselineWindow{From: &from, To: &to},
		// The window gives the second pass the first one's length and 20 s more.
		WindowSeconds:        window.Seconds(),
		CheckIntervalSeconds: 5,
		Expected:             experiment.Expectation{Metric: "longest_wait_s", Target: experiment.Target{Tier: "experiment"}, Direction: experiment.Decrease, Change: 0.3},
		Rollback: []experiment.Condition{
			// Production's waits on this replay are the service's own
			// latency (about 1 s, P95 1-4 s on a loaded machine), so a
			// factor over the baseline trips on noise at the first
			// checks' few jobs (seen: 2.14 s > 1.5 × 1.13 s at check 1);
			// 10 s (100 trace-minutes at 600×) is a real regression.
			{Name: "production P95 wait", Metric: "wait_p95_s", Target: experiment.Target{Tier: "production"}, Above: f64(10)},
			{Name: "false reclaims", Metric: "false_reclaims", Above: f64(0)},
		},
		MinSample: 20,
	}
	created, err := e.client.CreateExperiment(ctx, spec)
	if err != nil {
		t.Fatalf("create experiment: %v", err)
	}
	if len(created.Groups) != 1 || created.Groups[0] != vocab.PolicyAging || created.BaselineHash != base.Hash() {
		t.Fatalf("experiment %+v: want the aging group only against the env's policy %s", created, base.Hash())
	}
	id, cand := created.ID, created.CandidateHash
	switched := waitExperiment(t, e, id, 30*time.Second, "switched", func(d *api.ExperimentDetail) bool { return d.SwitchedAt != nil })

	// The candidate: the same slice again, as new jobs.
	replayPass(ctx, t, e, subs, "b-")
	t.Logf("candidate pass done %s after the switch", time.Since(*switched.SwitchedAt).Round(time.Second))

	d := waitExperiment(t, e, id, window+90*time.Second, "verdict", func(d *api.ExperimentDetail) bool { return d.Outcome != nil })
	t.Logf("gpugov experiment show %s:\n%s", id, experimentShow(t, e, cli, id))
	out := d.Outcome
	for _, want := range []struct{ metric, tier string }{{"longest_wait_s", "experiment"}, {"wait_p95_s", "production"}} {
		r := findRow(out.Rows, want.metric, want.tier)
		if r == nil || r.Before == nil || r.After == nil {
			t.Errorf("comparison row %s of tier %s: %+v, want numbers before and after", want.metric, want.tier, r)
		}
	}
	if out.Expected.SampleBefore < spec.MinSample || out.Expected.SampleAfter < spec.MinSample {
		t.Errorf("expected result sampled %d → %d experiment jobs, want at least %d in each window",
			out.Expected.SampleBefore, out.Expected.SampleAfter, spec.MinSample)
	}
	kinds := eventKindsOf(d)
	for _, k := range []string{store.ExperimentEventCreated, store.ExperimentEventBaselineMeasured, store.ExperimentEventSwitched,
		store.ExperimentEventCheck, store.ExperimentEventVerdict} {
		if !slices.Contains(kinds, k) {
			t.Errorf("timeline %v lacks %s", kinds, k)
		}
	}

	// The cycles of the window ran the candidate (allowing one cycle for
	// the switch to reach the scheduler).
	ended := *d.EndedAt
	if n := e.queryInt(t, `SELECT count(*) FROM scheduling_cycles WHERE at > $1 AND at < $2 AND policy_version <> $3`,
		d.SwitchedAt.Add(2*time.Second), ended, cand); n != 0 {
		t.Errorf("%d cycles during the window did not record the candidate %s", n, cand)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM scheduling_cycles WHERE at > $1 AND at < $2 AND policy_version = $3`,
		d.SwitchedAt, ended, cand); n < 10 {
		t.Errorf("%d cycles recorded the candidate during the window, want many", n)
	}
	if d.Verdict != vocab.VerdictKept {
		// Every verdict but kept restores the baseline.
		if d.Verdict == vocab.VerdictInconclusive {
			t.Errorf("verdict inconclusive: %s", out.Reason)
		}
		waitActiveAndCycle(t, e, base.Hash(), ended)
		return
	}
	// Kept: the candidate stays in force until an admin decides; promote it.
	if got := activeHash(t, e); got != cand {
		t.Fatalf("kept, but the active version is %s, not the candidate %s", got, cand)
	}
	if _, err := e.client.DecideExperiment(ctx, id, api.ActionPromote, "e2e: the aging candidate met its expected result"); err != nil {
		t.Fatalf("promote: %v", err)
	}
	d = waitExperiment(t, e, id, 30*time.Second, "promoted", func(d *api.ExperimentDetail) bool { return d.PromotedAt != nil })
	if !slices.Contains(eventKindsOf(d), store.ExperimentEventPromoted) {
		t.Errorf("timeline %v lacks promoted", eventKindsOf(d))
	}
	if n := e.queryInt(t, `SELECT count(*) FROM audit_log WHERE action = $1 AND subject = $2`, store.AuditExperimentPromote, id); n != 1 {
		t.Errorf("%d experiment_promote audit entries, want 1", n)
	}
	waitActiveAndCycle(t, e, cand, *d.PromotedAt)
}

// TestExperimentRollsBackOnBreach: a live experiment whose candidate
// disables preemption. Under the baseline a production job preempts a
// running experiment job and starts within seconds; under the candidate a
// production job submitted to the full pool waits behind the experiment
// jobs, so production's longest wait passes the rollback threshold
// mid-window: the baseline is restored at once (before the window's end),
// the verdict is rolled_back, the audit and the timeline carry the numbers
// that breached, and the production job then starts by preemption under
// the restored baseline.
func TestExperimentRollsBackOnBreach(t *testing.T) {
	const baselineText = `version: gpugov.policy/v1
fair_share: {enabled: false}
preemption: {enabled: true, min_runtime_s: 0, require_verified_resume: false, grace_s: 3, save_restore_s: 1,
  max_preemptions: 3, window_s: 3600, release_without_checkpoint: true}
pools: {xp: {stage: automate}}
`
	candidateText := strings.Replace(baselineText, "preemption: {enabled: true", "preemption: {enabled: false", 1)
	base, err := policy.Parse("baseline.yaml", []byte(baselineText))
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, envOptions{pools: a100Pool("xp", "xp-1", "xp", vocab.StageAutomate, 2), simSpeed: 1, policy: base})
	cli := buildGpugov(t)
	ctx := context.Background()

	// The baseline: two experiment jobs fill the pool; a production job
	// preempts one of them.
	for range 2 {
		j := submitXP(t, e, "experiment")
		waitFor(t, 30*time.Second, "experiment job placed", func() (bool, string) {
			return e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1 AND released_at IS NULL`, j.ID) == 1, ""
		})
	}
	p1 := submitXP(t, e, "production")
	waitFor(t, 60*time.Second, "production job placed by preemption", func() (bool, string) {
		return e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1 AND released_at IS NULL`, p1.ID) == 1, ""
	})
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions WHERE for_job_id = $1 AND state <> 'observed'`, p1.ID); n != 1 {
		t.Fatalf("%d preemptions for the first production job, want 1", n)
	}

	const threshold = 12
	window := 90 * time.Second
	spec := &experiment.Spec{
		Name:       "no-preemption",
		Hypothesis: "without preemption no experiment work is lost, and production still starts in time",
		Candidate:  experiment.Candidate{Policy: candidateText},
		Scope:      experiment.Scope{Pools: []string{"xp"}},
		// The baseline is the default window: as long as the window, ending at the start.
		WindowSeconds:        window.Seconds(),
		CheckIntervalSeconds: 2,
		Expected:             experiment.Expectation{Metric: "preemptions", Direction: experiment.Decrease, Change: 0.5},
		Rollback: []experiment.Condition{
			{Name: "production waits behind experiment work", Metric: "longest_wait_s", Target: experiment.Target{Tier: "production"}, Above: f64(threshold)},
			{Name: "production P95 wait", Metric: "wait_p95_s", Target: experiment.Target{Tier: "production"}, AboveBaselineFactor: f64(2)},
		},
	}
	created, err := e.client.CreateExperiment(ctx, spec)
	if err != nil {
		t.Fatalf("create experiment: %v", err)
	}
	if len(created.Groups) != 1 || created.Groups[0] != vocab.PolicyPreemption {
		t.Fatalf("groups %v, want preemption only", created.Groups)
	}
	id, cand := created.ID, created.CandidateHash
	d := waitExperiment(t, e, id, 30*time.Second, "switched", func(d *api.ExperimentDetail) bool { return d.SwitchedAt != nil })
	end := d.SwitchedAt.Add(window)
	waitFor(t, 20*time.Second, "a cycle under the candidate", func() (bool, string) {
		return e.queryInt(t, `SELECT count(*) FROM scheduling_cycles WHERE policy_version = $1`, cand) > 0, ""
	})

	// Under the candidate a production job waits behind the experiment jobs.
	p2 := submitXP(t, e, "production")
	d = waitExperiment(t, e, id, window, "rollback", func(d *api.ExperimentDetail) bool { return d.EndedAt != nil })
	if got := activeHash(t, e); got != base.Hash() {
		t.Fatalf("after the rollback the active version is %s, want the baseline %s", got, base.Hash())
	}
	if now := time.Now(); !now.Before(end) || !d.EndedAt.Before(end) {
		t.Fatalf("rolled back at %s (checked at %s), want before the window's end %s", d.EndedAt, now, end)
	}
	if d.Verdict != vocab.VerdictRolledBack || d.Outcome == nil || len(d.Outcome.Breaches) == 0 {
		t.Fatalf("verdict %s, outcome %+v: want rolled_back with breaches", d.Verdict, d.Outcome)
	}
	t.Logf("gpugov experiment show %s:\n%s", id, experimentShow(t, e, cli, id))

	// The timeline's rollback event carries the breached values.
	var rolled *api.ExperimentEvent
	for i := range d.Events {
		if d.Events[i].Kind == store.ExperimentEventRolledBack {
			rolled = &d.Events[i]
		}
	}
	if rolled == nil {
		t.Fatalf("timeline %v lacks rolled_back", eventKindsOf(d))
	}
	t.Logf("rollback event: %s", rolled.Detail)
	var carried []experiment.ConditionResult
	if err := json.Unmarshal(rolled.Data, &carried); err != nil || len(carried) == 0 {
		t.Fatalf("rolled_back event data %s (%v), want the breached conditions", rolled.Data, err)
	}
	b := carried[0]
	if !b.Breached || b.Condition.Metric != "longest_wait_s" || b.Value == nil || b.Threshold == nil ||
		*b.Threshold != threshold || *b.Value <= threshold || !strings.Contains(rolled.Detail, b.Text) {
		t.Errorf("rolled_back event carries %+v, detail %q: want production's longest wait above %d s", b, rolled.Detail, threshold)
	}

	// The audit has the rollback with the numbers.
	var reason string
	var evidence []byte
	if err := e.db.QueryRow(ctx, `SELECT reason, evidence FROM audit_log WHERE action = $1 AND subject = $2`,
		store.AuditExperimentRollback, id).Scan(&reason, &evidence); err != nil {
		t.Fatalf("no experiment_rollback audit entry: %v", err)
	}
	var ev struct {
		Baseline string `json:"baseline"`
		Breaches []struct {
			Metric    string   `json:"metric"`
			Value     *float64 `json:"value"`
			Threshold *float64 `json:"threshold"`
		} `json:"breaches"`
	}
	if err := json.Unmarshal(evidence, &ev); err != nil || ev.Baseline != base.Hash() || len(ev.Breaches) == 0 ||
		ev.Breaches[0].Value == nil || *ev.Breaches[0].Value <= threshold || !strings.Contains(reason, b.Text) {
		t.Errorf("experiment_rollback audit: reason %q, evidence %s (%v)", reason, evidence, err)
	}
	t.Logf("experiment_rollback audit: %s", reason)

	// Under the restored baseline the waiting production job preempts an
	// experiment job and starts.
	waitFor(t, 60*time.Second, "the production job placed under the baseline", func() (bool, string) {
		return e.queryInt(t, `SELECT count(*) FROM allocations a JOIN scheduling_cycles c ON c.id = a.cycle_id
			WHERE a.job_id = $1 AND c.policy_version = $2`, p2.ID, base.Hash()) == 1, ""
	})
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions WHERE for_job_id = $1 AND state <> 'observed'`, p2.ID); n == 0 {
		t.Errorf("the production job started without a preemption")
	}
}

// submitXP submits a checkpointable simulated 1-GPU job of queue to pool xp.
func submitXP(t *testing.T, e *env, queue string) *api.Job {
	t.Helper()
	spec := &api.JobSpec{Project: "drill", Queue: queue, RunSeconds: 3600,
		Recovery:  api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 1},
		Resources: api.ResourceSpec{GPUs: 1, Pool: "xp"}}
	job, status, err := e.client.Submit(context.Background(), spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit %s: status %d, %v", queue, status, err)
	}
	return job
}

// agingSubmissions builds the aging experiment's slice.
func agingSubmissions(t *testing.T, dir string) []replay.Submission {
	t.Helper()
	pods, _, err := alibaba.ReadPods(filepath.Join(dir, "openb_pod_list_default.csv"), alibaba.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selected := replay.Select(pods, agingSliceFrom, agingSliceTo, 0)
	subs, err := replay.Build(selected, replay.BuildOptions{From: agingSliceFrom, Speed: agingSpeed,
		Recovery: replay.DefaultRecovery(), MaxRunSeconds: agingMaxRunS})
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[string]int{}
	for _, s := range subs {
		tiers[s.Spec.Queue]++
	}
	if len(subs) < 100 || tiers["experiment"] < 50 || tiers["production"] < 50 {
		t.Fatalf("the slice has %d submissions (%v), want ≥ 150 with production and experiment jobs", len(subs), tiers)
	}
	return subs
}

// replayPass replays subs with their keys prefixed (a second pass makes new
// jobs) and waits until every job of the env has ended.
func replayPass(ctx context.Context, t *testing.T, e *env, subs []replay.Submission, prefix string) {
	t.Helper()
	pass := slices.Clone(subs)
	for i := range pass {
		pass[i].Key = prefix + pass[i].Key
	}
	res, err := replay.Run(ctx, replay.Config{Client: e.client, Submissions: pass, Speed: agingSpeed,
		Pool: alibaba.DefaultPoolName, Wait: 2 * time.Minute, SettleTime: 3 * time.Second, ProgressInterval: 10 * time.Second,
		Progress: testLog{t}})
	if err != nil {
		t.Fatalf("replay %s: %v", prefix, err)
	}
	if len(res.Rejected) > 0 || res.Accepted != len(pass) {
		t.Fatalf("replay %s: %d rejected (%v), %d of %d accepted", prefix, len(res.Rejected), res.Rejected, res.Accepted, len(pass))
	}
	waitFor(t, 2*time.Minute, "every job of pass "+prefix+" ended", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM jobs WHERE state IN ('submitted', 'waiting', 'placed', 'running')`)
		return n == 0, fmt.Sprintf("%d jobs live", n)
	})
}

// waitExperiment polls GET /v1/experiments/{id} until cond holds.
func waitExperiment(t *testing.T, e *env, id string, timeout time.Duration, what string, cond func(*api.ExperimentDetail) bool) *api.ExperimentDetail {
	t.Helper()
	var d *api.ExperimentDetail
	waitFor(t, timeout, "experiment "+id+" "+what, func() (bool, string) {
		var err error
		if d, err = e.client.Experiment(context.Background(), id); err != nil {
			return false, err.Error()
		}
		return cond(d), fmt.Sprintf("state %s, timeline %v", d.State, eventKindsOf(d))
	})
	return d
}

// eventKindsOf lists the kinds of an experiment's timeline.
func eventKindsOf(d *api.ExperimentDetail) []string {
	out := make([]string, len(d.Events))
	for i, ev := range d.Events {
		out[i] = ev.Kind
	}
	return out
}

// findRow returns the comparison row of metric on tier, or nil.
func findRow(rows []experiment.Row, metric, tier string) *experiment.Row {
	for i := range rows {
		if rows[i].Metric == metric && rows[i].Tier == tier && rows[i].Queue == "" {
			return &rows[i]
		}
	}
	return nil
}

// activeHash is the active policy version's hash.
func activeHash(t *testing.T, e *env) string {
	t.Helper()
	var h string
	if err := e.db.QueryRow(context.Background(), `SELECT hash FROM policy_versions WHERE active`).Scan(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// waitActiveAndCycle checks that hash is the active version and waits for
// the scheduling cycles after since (allowing one for the switch) to
// record it.
func waitActiveAndCycle(t *testing.T, e *env, hash string, since time.Time) {
	t.Helper()
	if got := activeHash(t, e); got != hash {
		t.Fatalf("the active version is %s, want %s", got, hash)
	}
	waitFor(t, 20*time.Second, "cycles recording "+hash, func() (bool, string) {
		after := since.Add(2 * time.Second)
		other := e.queryInt(t, `SELECT count(*) FROM scheduling_cycles WHERE at > $1 AND policy_version <> $2`, after, hash)
		same := e.queryInt(t, `SELECT count(*) FROM scheduling_cycles WHERE at > $1 AND policy_version = $2`, after, hash)
		if other > 0 {
			t.Fatalf("%d cycles after %s recorded another version than %s", other, after, hash)
		}
		return same >= 2, fmt.Sprintf("%d cycles", same)
	})
}

// buildGpugov builds the gpugov CLI into the test's temporary folder.
func buildGpugov(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpugov")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(repoRoot(t), "cmd", "gpugov")).CombinedOutput(); err != nil {
		t.Fatalf("build gpugov: %v\n%s", err, out)
	}
	return bin
}

// experimentShow runs `gpugov experiment show ID` against the env's API.
func experimentShow(t *testing.T, e *env, cli, id string) string {
	t.Helper()
	out, err := exec.Command(cli, "experiment", "show", id, "--api", "http://"+e.svc.APIAddr(), "--token", adminToken).CombinedOutput()
	if err != nil {
		t.Fatalf("gpugov experiment show %s: %v\n%s", id, err, out)
	}
	return string(out)
}

// f64 returns a pointer to v.
func f64(v float64) *float64 { return &v }
