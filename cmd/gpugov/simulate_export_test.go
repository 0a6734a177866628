package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// exportStore records, through the store's own transitions, the jobs of
// TestSimulateFromStore in pool p (two nodes of four GPUs) and pool q (one
// node of two), around the window [base, base+1h):
//
//	s1 standard     1 GPU,  run 1–11 min, succeeded
//	s2 production   2 GPUs, run from 2 min, still running
//	s3 experiment   half a GPU, still waiting
//	s4 key-project  1 GPU, cancelled while waiting
//	s5 standard     1 GPU,  run 5–6 min, failed
//	q1 standard     1 GPU in pool q, run 10–20 min, succeeded
//	early (submitted an hour before the window) and late (two hours after)
//
// It returns the database URL, base and the jobs by name.
func exportStore(t *testing.T) (string, time.Time, map[string]*store.Job) {
	t.Helper()
	p, q := storetest.Pool("p", vocab.StageAutomate, 2, 4), storetest.Pool("q", vocab.StageAutomate, 1, 2)
	st, url := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{p, q}})
	ctx := context.Background()
	base := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	jobs := map[string]*store.Job{}
	submit := func(name, pool string, tier vocab.Tier, gpus, milli, min int) {
		jobs[name] = storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: "train-" + tier.String(), Tier: tier, SubmitTime: at(min),
			Request: scheduling.ResourceRequest{GPUs: gpus, GPUMilli: milli, Pool: pool, CPUMilli: 2000, MemoryMiB: 4096}})
	}
	submit("s1", "p", vocab.TierStandard, 1, 0, 0)
	submit("s2", "p", vocab.TierProduction, 2, 0, 1)
	submit("s3", "p", vocab.TierExperiment, 1, 500, 2)
	submit("s4", "p", vocab.TierKeyProject, 1, 0, 3)
	submit("s5", "p", vocab.TierStandard, 1, 0, 4)
	submit("q1", "q", vocab.TierStandard, 1, 0, 5)
	submit("early", "p", vocab.TierStandard, 1, 0, -60)
	submit("late", "p", vocab.TierStandard, 1, 0, 120)
	run := func(name, pool string, node scheduling.Node, start int, gpus ...int) string {
		var uuids []string
		for _, g := range gpus {
			uuids = append(uuids, node.GPUs[g].UUID)
		}
		pl := storetest.Placement(jobs[name].ID, pool, node.Name, 1000, uuids...)
		pl.Priority = scheduling.Priority{Score: 10000, TierBase: 10000, SubmitTime: base}
		out := storetest.Place(t, st, "c-"+name, at(start), pl)
		r, err := st.MarkRunning(ctx, jobs[name].ID, out.Placed[0].AllocationID, 0, at(start))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	finish := func(name, runID string, outcome vocab.RunOutcome, end int) {
		if err := st.FinishRun(ctx, jobs[name].ID, runID, outcome, "exit", at(end)); err != nil {
			t.Fatal(err)
		}
	}
	finish("s1", run("s1", "p", p.Nodes[0], 1, 2), vocab.RunSucceeded, 11)
	run("s2", "p", p.Nodes[0], 2, 0, 1)
	finish("s5", run("s5", "p", p.Nodes[1], 5, 0), vocab.RunFailed, 6)
	finish("q1", run("q1", "q", q.Nodes[0], 10, 0), vocab.RunSucceeded, 20)
	if err := st.CancelJob(ctx, jobs["s4"].ID, "alice", "not needed"); err != nil {
		t.Fatal(err)
	}
	return url, base, jobs
}

// TestSimulateFromStore exports recorded jobs and the inventory as a trace
// and simulates it: the reader parses the files back with the same counts
// (the window's jobs of pool p, its two nodes), each job mapped as the
// export documents (tier → qos as TierOf inverted, GPU share, submit →
// creation, first start → scheduled, the runs' GPU time → deletion, phase
// by state), and the simulation ran on them. Without --pool every pool's
// nodes and jobs are exported; --vs compares two policies on the export.
func TestSimulateFromStore(t *testing.T) {
	url, base, jobs := exportStore(t)
	dir := t.TempDir()
	since, until := base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339)
	out, progress, err := runSimulateArgs(t, "--from-store", "--database-url", url, "--since", since, "--until", until,
		"--pool", "p", "--out", dir)
	if err != nil {
		t.Fatalf("simulate --from-store: %v\n%s", err, progress)
	}
	for _, want := range []string{"exported 2 nodes (8 GPUs) of p and 5 jobs", "--models " + storetest.GPUModel} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q:\n%s", want, progress)
		}
	}
	if !strings.Contains(out, "5 GPU jobs simulated") {
		t.Errorf("simulation output:\n%s", out)
	}
	opts := alibaba.ReadOptions{Models: []string{storetest.GPUModel}}
	nodes, err := alibaba.ReadNodesWith(filepath.Join(dir, exportNodesFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	pods, _, err := alibaba.ReadPods(filepath.Join(dir, exportPodsFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].GPUs != 4 || nodes[0].Model != storetest.GPUModel || nodes[0].SN != storetest.NodeName("p", 0) {
		t.Fatalf("nodes %+v", nodes)
	}
	if len(pods) != 5 {
		t.Fatalf("%d pods, want the window's 5 jobs of pool p: %+v", len(pods), pods)
	}
	byName := map[string]alibaba.PodRow{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	for _, c := range []struct {
		job                          string
		qos                          alibaba.QoS
		phase                        alibaba.Phase
		gpus, milli                  int
		creation, scheduled, deleted int64
	}{
		{"s1", alibaba.QoSBurstable, alibaba.PhaseSucceeded, 1, 1000, 0, 60, 660},
		{"s3", alibaba.QoSBE, alibaba.PhasePending, 1, 500, 120, -1, -1},
		{"s4", alibaba.QoSGuaranteed, alibaba.PhasePending, 1, 1000, 180, -1, -1},
		{"s5", alibaba.QoSBurstable, alibaba.PhaseFailed, 1, 1000, 240, 300, 360},
		{"s2", alibaba.QoSLS, alibaba.PhaseRunning, 2, 1000, 60, 120, -1},
	} {
		p, ok := byName[jobs[c.job].ID]
		switch {
		case !ok:
			t.Errorf("%s not exported", c.job)
		case p.QoS != c.qos || p.Phase != c.phase || p.NumGPU != c.gpus || p.GPUMilli != c.milli || p.CreationTime != c.creation:
			t.Errorf("%s: %+v", c.job, p)
		case c.scheduled >= 0 && (!p.Scheduled || p.ScheduledTime != c.scheduled):
			t.Errorf("%s scheduled %v at %d, want %d", c.job, p.Scheduled, p.ScheduledTime, c.scheduled)
		case c.scheduled < 0 && p.Scheduled:
			t.Errorf("%s scheduled, want Pending", c.job)
		case c.deleted >= 0 && p.DeletionTime != c.deleted:
			t.Errorf("%s deleted at %d, want %d", c.job, p.DeletionTime, c.deleted)
		case c.deleted < 0 && p.DeletionTime < int64(time.Since(base).Seconds())-60:
			t.Errorf("%s still open: deleted at %d, want about now (%d)", c.job, p.DeletionTime, int64(time.Since(base).Seconds()))
		}
	}
	// Every tier comes back as it was stored.
	for _, j := range []string{"s1", "s2", "s3", "s4"} {
		if got := alibaba.TierOf(byName[jobs[j].ID].QoS); got != jobs[j].Tier {
			t.Errorf("%s: tier %s comes back as %s", j, jobs[j].Tier, got)
		}
	}

	// Every pool, as JSON: q's node and q1 too.
	out, _, err = runSimulateArgs(t, "--from-store", "--database-url", url, "--since", since, "--until", until, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Nodes   int `json:"nodes"`
		GPUJobs int `json:"gpu_jobs"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Nodes != 3 || rep.GPUJobs != 6 {
		t.Fatalf("every pool: %+v %v", rep, err)
	}

	// A what-if on the export.
	pdir := t.TempDir()
	out, _, err = runSimulateArgs(t, "--from-store", "--database-url", url, "--since", since, "--until", until, "--pool", "p",
		"--policy", writeIn(t, pdir, "base.yaml", whatIfBase), "--vs", writeIn(t, pdir, "aging.yaml", whatIfAging))
	if err != nil || !strings.Contains(out, "verdict:") || !strings.Contains(out, "variable groups the candidate changes: aging") {
		t.Fatalf("what-if on the export: %v\n%s", err, out)
	}
	// Its window is in trace time, second 0 being --since, with the dates.
	if !strings.Contains(out, "trace time t=0 s (day 0.0) to t=") || !strings.Contains(out, "(--since is t=0: "+since+" to ") {
		t.Errorf("what-if window on the export:\n%s", out)
	}
}

// TestSimulateFromStoreActivePolicy: without --policy, --from-store
// simulates the service's active policy version read from the same
// database, and says so on stderr; with no active version it simulates the
// default and says that; --policy overrides it; a what-if takes the active
// version as its baseline, as a live experiment does.
func TestSimulateFromStoreActivePolicy(t *testing.T) {
	url, base, _ := exportStore(t)
	since, until := base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339)
	export := []string{"--from-store", "--database-url", url, "--since", since, "--until", until, "--pool", "p"}
	simulated := func(args ...string) (hash, progress string) {
		t.Helper()
		out, progress, err := runSimulateArgs(t, append(append(slices.Clone(export), args...), "--format", "json")...)
		if err != nil {
			t.Fatalf("simulate %v: %v\n%s", args, err, progress)
		}
		var rep struct {
			PolicyVersion string `json:"policy_version"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.PolicyVersion, progress
	}

	hash, progress := simulated()
	if hash != policy.Default().Hash() || !strings.Contains(progress, "simulate: policy: the default; the store has no active policy version") {
		t.Fatalf("no active version: policy %s (default %s), progress:\n%s", hash, policy.Default().Hash(), progress)
	}

	dir := t.TempDir()
	activeFile, otherFile := writeIn(t, dir, "aging.yaml", whatIfAging), writeIn(t, dir, "base.yaml", whatIfBase)
	active, err := policy.Load(activeFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SavePolicyVersion(ctx, active.Hash(), active.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := st.ActivatePolicyVersion(ctx, active.Hash(), "test", "the service's policy"); err != nil {
		t.Fatal(err)
	}
	hash, progress = simulated()
	if want := "simulate: policy: the service's active version " + active.Hash()[:12] + ", read from the database"; hash != active.Hash() ||
		!strings.Contains(progress, want) {
		t.Fatalf("active version %s: simulated %s, progress lacks %q:\n%s", active.Hash(), hash, want, progress)
	}
	other, err := policy.Load(otherFile)
	if err != nil {
		t.Fatal(err)
	}
	if hash, progress = simulated("--policy", otherFile); hash != other.Hash() || strings.Contains(progress, "simulate: policy:") {
		t.Fatalf("--policy: simulated %s, want %s; progress:\n%s", hash, other.Hash(), progress)
	}

	// A what-if without --policy: the active version is the baseline.
	out, _, err := runSimulateArgs(t, append(slices.Clone(export), "--vs", otherFile)...)
	want := "what-if: baseline (the store's active policy version " + active.Hash()[:12] + ") (policy " + active.Hash()[:12] + ") vs candidate " + otherFile
	if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "variable groups the candidate changes: aging") {
		t.Fatalf("what-if on the active version: %v, want %q:\n%s", err, want, out)
	}
}

// TestSimulateFromStoreBadInput: bad flags are usage errors naming them.
func TestSimulateFromStoreBadInput(t *testing.T) {
	url, base, _ := exportStore(t)
	since, until := base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bad since", []string{"--since", "yesterday", "--until", until}, `--since "yesterday": want an RFC 3339 time`},
		{"until before since", []string{"--since", until, "--until", since}, "--until: until (" + since + ") must be after since"},
		{"since in the future", []string{"--since", "2999-01-01T00:00:00Z", "--until", "2999-01-02T00:00:00Z"}, "--since: since (2999-01-01T00:00:00Z) is after now"},
		{"unknown pool", []string{"--since", since, "--until", until, "--pool", "nope"}, `--pool "nope": no such pool in the inventory (pools: p, q)`},
		{"no until", []string{"--since", since}, "--from-store needs --until"},
		{"with a trace", []string{"--since", since, "--until", until, "--nodes", simNodes}, "leave out --nodes and --pods"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runSimulateArgs(t, append([]string{"--from-store", "--database-url", url}, tc.args...)...)
			if err == nil || !isUsageError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a usage error with %q", err, tc.want)
			}
		})
	}
	if _, _, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simPods, "--since", since); err == nil || !isUsageError(err) ||
		!strings.Contains(err.Error(), "--since goes with --from-store") {
		t.Fatalf("--since without --from-store: %v", err)
	}
}
