package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// startedWorkflows stands in for Temporal behind the API (the API reaches it
// only through api.Workflows; Temporal is tested in api/ and workflows/). It
// accepts every call.
type startedWorkflows struct{}

func (startedWorkflows) StartJob(context.Context, string, temporalx.JobAttributes) error { return nil }
func (startedWorkflows) CancelJob(context.Context, string, temporalx.JobAttributes, string, string) error {
	return nil
}
func (startedWorkflows) NotifySubmitted(context.Context, string) error { return nil }

// cliEnv is the real API on a real, fresh PostgreSQL database, served over HTTP.
type cliEnv struct {
	store *store.Store
	url   string
	token string // the token run passes; "" is cliToken
}

// resetFlags sets the flags of every command below cmd back to their
// defaults, because rootCmd is shared between runs.
func resetFlags(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				_ = sv.Replace(nil)
			} else {
				_ = f.Value.Set(f.DefValue)
			}
			f.Changed = false
		})
		resetFlags(c)
	}
}

const cliToken = "tok-cli"

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{storetest.TrainQueue}})
	return serveCLIEnv(t, st, startedWorkflows{}, map[string]api.Principal{cliToken: alice})
}

// alice is cliToken's principal in most CLI tests: a submitter of vision.
var alice = api.Principal{Name: "alice", Project: "vision", Role: vocab.RoleSubmitter}

// serveCLIEnv serves the real API on st with workflows wf and the given
// tokens, closed when the test ends.
func serveCLIEnv(t *testing.T, st *store.Store, wf api.Workflows, tokens map[string]api.Principal) *cliEnv {
	t.Helper()
	toks, err := api.NewTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.StoreFrom(st), wf, toks, api.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &cliEnv{store: st, url: hs.URL}
}

// addA100Pool stores the inventory of pool a100-east (available, at stage
// stage; "" the default): one schedulable node "node-1" (64 cores, 500 GiB)
// holding one healthy A100-SXM4-80GB (80 GiB, NVLink domain nv0) per UUID.
func (e *cliEnv) addA100Pool(t *testing.T, stage vocab.AutomationStage, uuids ...string) {
	t.Helper()
	node := scheduling.Node{Name: "node-1", CPUMilli: 64000, MemoryMiB: 512000, Schedulable: true}
	for _, u := range uuids {
		node.GPUs = append(node.GPUs, scheduling.GPU{UUID: u, Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true})
	}
	pool := scheduling.Pool{Name: "a100-east", Available: true, Stage: stage, Nodes: []scheduling.Node{node}}
	if err := e.store.UpsertInventory(context.Background(), []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
}

// planCycle runs a real scheduling cycle id at `at` (store snapshot →
// scheduling.Plan under pol → ApplyCycle) and returns its outcome; an error
// fails the test.
func (e *cliEnv) planCycle(t *testing.T, id string, pol *scheduling.Policy, at time.Time) *store.CycleOutcome {
	t.Helper()
	ctx := context.Background()
	snap, err := e.store.LoadSnapshot(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.store.ApplyCycle(ctx, id, scheduling.Plan(snap, pol, at), at)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// run executes the gpugov command line args against the env's API and
// returns stdout, stderr and the command's error. Flags of every subcommand
// are reset first, because rootCmd is shared between runs.
func (e *cliEnv) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	resetFlags(rootCmd)
	var stdout, stderr bytes.Buffer
	rootCmd.SetOut(&stdout)
	rootCmd.SetErr(&stderr)
	token := e.token
	if token == "" {
		token = cliToken
	}
	rootCmd.SetArgs(append(args, "--api", e.url, "--token", token))
	err := rootCmd.ExecuteContext(context.Background())
	rootCmd.SetArgs(nil)
	return stdout.String(), stderr.String(), err
}

const jobYAML = `
queue: train
resources:
  gpus: 2
  gpu_memory_mib: 40960
  pool: a100-east
  topology: same-node
run_seconds: 3600
recovery: {checkpointable: true, checkpoint_interval_s: 600}
`

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSubmitGetWhy runs submit, get and why against the real API: the job ID
// is printed, get shows the stored job, and why explains a real wait recorded
// by the store.
func TestSubmitGetWhy(t *testing.T) {
	env := newCLIEnv(t)
	out, stderr, err := env.run(t, "submit", "-f", writeFile(t, jobYAML), "--idempotency-key", "k1")
	if err != nil {
		t.Fatalf("submit: %v (%s)", err, stderr)
	}
	id := strings.TrimSpace(out)
	if !strings.HasPrefix(id, "j-") {
		t.Fatalf("submit printed %q", out)
	}
	// The same key again: the same job, with a note on stderr.
	out, stderr, err = env.run(t, "submit", "-f", writeFile(t, jobYAML), "--idempotency-key", "k1")
	if err != nil || strings.TrimSpace(out) != id || !strings.Contains(stderr, "already used") {
		t.Fatalf("resubmit: %q %q %v", out, stderr, err)
	}

	job, err := env.store.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	since := job.WaitingSince
	_, err = env.store.ApplyCycle(context.Background(), "c1", &scheduling.Result{At: since, Waiting: []scheduling.WaitStatus{{
		JobID: id, Reason: vocab.ReasonCapacityBusy, Rank: 3,
		Detail:     "needs 2 × ≥40960 MiB on one node; 2 match in pool, 0 free",
		ReEvaluate: "when 2 matching GPUs on one node are free",
		Priority:   scheduling.Priority{Score: 10450, TierBase: 10000, AgingCredit: 300, AgingCapped: true, FairShare: 150},
	}}}, since)
	if err != nil {
		t.Fatal(err)
	}
	// A later cycle: the same reason with new numbers (one wait event), the
	// next re-evaluation dated by aging overtaking the job ahead.
	c2 := since.Add(14 * time.Minute)
	overtakeAt := c2.Add(50 * time.Minute)
	_, err = env.store.ApplyCycle(context.Background(), "c2", &scheduling.Result{At: c2, Waiting: []scheduling.WaitStatus{{
		JobID: id, Reason: vocab.ReasonCapacityBusy, Rank: 3,
		Detail:     "needs 2 × ≥40960 MiB on one node; 2 match in pool, 1 free",
		ReEvaluate: "when 2 matching GPUs on one node are free",
		Priority:   scheduling.Priority{Score: 10450, TierBase: 10000, AgingCredit: 300, AgingCapped: true, FairShare: 150},
		Overtake: &scheduling.Overtake{AheadJobID: "j-ahead", GapPoints: 400, HeadroomPoints: 2700, BoundPoints: 3000,
			AheadHeadroomPoints: 0, At: overtakeAt},
		Next: scheduling.NextEvaluation{At: overtakeAt, Kind: vocab.NextEvalAgingOvertake},
	}}}, c2)
	if err != nil {
		t.Fatal(err)
	}
	displayLocation = time.UTC
	clientNow = func() time.Time { return since.Add(14*time.Minute + 10*time.Second) }
	t.Cleanup(func() { displayLocation, clientNow = time.Local, time.Now })

	out, _, err = env.run(t, "why", id)
	if err != nil {
		t.Fatalf("why: %v", err)
	}
	clock := formatClock // as the CLI prints times (the test runs at any hour)
	want := id + " waiting 14m (since " + clock(since) + ") — capacity_busy: needs 2 × ≥40960 MiB on one node; " +
		"2 match in pool, 1 free; rank 3 in pool a100-east; priority 10,450 = tier standard 10,000 + aging 300 (at its cap) + " +
		"fair share 150\n" +
		"submitted: " + clock(job.SubmitTime) + " (14m ago); waiting since " + clock(since) + "; capacity_busy since " + clock(since) + " (14m)\n" +
		"what would change it: when 2 matching GPUs on one node are free\n" +
		"next re-evaluation: " + clock(overtakeAt) + " (in 49m), when aging lifts its rank above job j-ahead\n" +
		"last scheduling action: " + clock(c2) + " (cycle c2): evaluated and left waiting (capacity_busy), rank 3 in its pool; the same since " + clock(since) + "\n" +
		"next action: wait for release, preemption if eligible, or capacity\n"
	if out != want {
		t.Fatalf("why:\n got %q\nwant %q", out, want)
	}
	t.Logf("gpugov why %s:\n%s", id, out)
	out, _, err = env.run(t, "events", id)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	for _, line := range []string{
		id + " waiting; submitted " + clock(job.SubmitTime) + "; waiting since " + clock(since) + " (14m); rank 3 in pool a100-east\n",
		"next re-evaluation: " + clock(overtakeAt) + " (in 49m), when aging lifts its rank above job j-ahead\n",
		"last scheduling action: " + clock(c2) + " (cycle c2): evaluated and left waiting (capacity_busy)",
		"capacity_busy  needs 2 × ≥40960 MiB on one node; 2 match in pool, 1 free",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("events lacks %q:\n%s", line, out)
		}
	}
	if n := strings.Count(out, "capacity_busy  "); n != 1 {
		t.Errorf("events: %d capacity_busy rows, want 1 (one wait for one reason):\n%s", n, out)
	}
	t.Logf("gpugov events %s:\n%s", id, out)

	out, _, err = env.run(t, "get", id)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	for _, s := range []string{"STATE        waiting", "train (tier standard)", "2 GPUs × ≥40960 MiB, pool a100-east, same-node",
		"capacity_busy for 14m", "RANK         3 in pool a100-east", "checkpointable every 10m"} {
		if !strings.Contains(out, s) {
			t.Errorf("get output lacks %q:\n%s", s, out)
		}
	}
	out, _, err = env.run(t, "get", id, "--format", "json")
	if err != nil || !strings.Contains(out, `"reason": "capacity_busy"`) {
		t.Fatalf("get json: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "get")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "capacity_busy") {
		t.Fatalf("get (list): %v\n%s", err, out)
	}
	if _, _, err = env.run(t, "get", "--queue", "bogus"); err == nil || !isUsage(err) || !strings.Contains(err.Error(), "queue") {
		t.Fatalf("get --queue bogus: %v, want a usage error (exit 2) naming queue", err)
	}
	out, _, err = env.run(t, "queues")
	if err != nil || !strings.Contains(out, "train") || !strings.Contains(out, "standard") {
		t.Fatalf("queues: %v\n%s", err, out)
	}
	// Aging can never lift it above the job ahead: why says so with the numbers.
	_, err = env.store.ApplyCycle(context.Background(), "c3", &scheduling.Result{At: c2, Waiting: []scheduling.WaitStatus{{
		JobID: id, Reason: vocab.ReasonReservedForHigherPriority, Rank: 3, BlockingJobID: "j-ahead",
		Detail:     "needs 2 × ≥40960 MiB on one node; 2 match in pool, 2 free (2 reserved for higher-ranked jobs); it fits only on GPUs reserved for job j-ahead",
		ReEvaluate: "when job j-ahead starts or no longer reserves them",
		Priority:   scheduling.Priority{Score: 13150, TierBase: 10000, AgingCredit: 3000, AgingCapped: true, FairShare: 150},
		Overtake:   &scheduling.Overtake{AheadJobID: "j-ahead", GapPoints: 6850, BoundPoints: 3000, AheadHeadroomPoints: 3000, Never: true},
		Next:       scheduling.NextEvaluation{At: c2.Add(15 * time.Second), Kind: vocab.NextEvalTimer},
	}}}, c2.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = env.run(t, "why", id)
	if err != nil {
		t.Fatalf("why: %v", err)
	}
	for _, line := range []string{
		"next re-evaluation: " + clock(c2.Add(15*time.Second)) + " (in 5s), the next timer cycle; nothing known changes the outcome before it\n",
		"aging: never lifts it above job j-ahead: 6,850 points ahead; this job's credit can still grow 0 (bound 3,000), job j-ahead's 3,000 — waiting alone will not reorder them\n",
		"last scheduling action: " + clock(c2.Add(10*time.Second)) + " (cycle c3): held back by a reservation for job j-ahead, rank 3 in its pool\n",
		"blocked by: j-ahead\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("why lacks %q:\n%s", line, out)
		}
	}
	t.Logf("gpugov why %s (never overtakes):\n%s", id, out)
}

// TestClientExitCodes checks that a rejected spec is a usage error (exit 2)
// printed as "field: message", and a server failure is not (exit 1).
func TestClientExitCodes(t *testing.T) {
	env := newCLIEnv(t)
	bad := strings.Replace(jobYAML, "gpus: 2", "gpus: 2\n  gpu_milli: 1500", 1)
	badFile := writeFile(t, bad)
	_, _, err := env.run(t, "submit", "-f", badFile)
	var ue usageError
	// The API's 422 names the JSON path; the CLI adds the YAML file:line.
	line := strings.Count(bad[:strings.Index(bad, "gpu_milli")], "\n") + 1
	if want := fmt.Sprintf("submit: %s:%d: resources.gpu_milli: ", badFile, line); !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("4xx: %T %v, want prefix %q", err, err, want)
	}
	_, _, err = env.run(t, "submit", "-f", writeFile(t, jobYAML+"colour: blue\n"))
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown YAML field: %v", err)
	}
	_, _, err = env.run(t, "get", "j-missing")
	if !errors.As(err, &ue) {
		t.Fatalf("404: %v", err)
	}

	env.store.Close() // PostgreSQL unreachable from the API: 503
	_, _, err = env.run(t, "submit", "-f", writeFile(t, jobYAML))
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("5xx: %T %v", err, err)
	}
}
