package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/executor/process"
	"github.com/gpugov/gpugov/internal/inventory/httpreport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// agentTestNode is the node the test agent serves.
const agentTestNode = "test-node"

// signalPreempt asks runOnNodeWorkflow to cancel its run, as JobWorkflow does
// on a preemption or cancel.
const signalPreempt = "preempt"

// runOnNodeWorkflow is a tiny stand-in for JobWorkflow: it runs the run
// activity on the node's task queue with JobWorkflow's kind of options and
// cancels it on signalPreempt, waiting for the executor's answer.
func runOnNodeWorkflow(ctx workflow.Context, in *executor.RunInput) (*executor.RunResult, error) {
	runCtx, cancel := workflow.WithCancel(ctx)
	runCtx = workflow.WithActivityOptions(runCtx, workflow.ActivityOptions{
		TaskQueue:           temporalx.NodeTaskQueue(in.Node),
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    3 * time.Second, // the SDK sends heartbeats every 2.4 s: cancellations arrive quickly
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
	})
	fut := workflow.ExecuteActivity(runCtx, executor.RunActivityName, in)
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(fut, func(workflow.Future) {})
	sel.AddReceive(workflow.GetSignalChannel(ctx, signalPreempt), func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		cancel()
	})
	sel.Select(ctx)
	var res executor.RunResult
	if err := fut.Get(ctx, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// agentTestEnv is a real dev server, the real API on a real store, and the
// node agent's API client.
type agentTestEnv struct {
	t       *testing.T
	ds      *temporaltest.DevServer
	store   *store.Store
	api     *httpreport.Client
	trainer string
	opts    *agentOptions
	log     *slog.Logger
}

func newAgentTestEnv(t *testing.T) *agentTestEnv {
	t.Helper()
	ds := temporaltest.Start(t)
	ctx := context.Background()
	st, _ := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{storetest.TrainQueue}})
	toks, err := api.NewTokens(map[string]api.Principal{"tok-agent": {Name: "agent", Project: "platform", Role: vocab.RoleAgent, Node: agentTestNode}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.StoreFrom(st), nil, toks, api.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))).Handler())
	t.Cleanup(srv.Close)
	c, err := httpreport.New(srv.URL, "tok-agent")
	if err != nil {
		t.Fatal(err)
	}
	node := scheduling.Node{Name: agentTestNode, Schedulable: true}
	for i := range 4 {
		node.GPUs = append(node.GPUs, scheduling.GPU{UUID: fmt.Sprintf("GPU-test-%d", i), Model: "A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true})
	}
	if _, err := st.UpsertNode(ctx, "p", node, "test"); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &agentTestEnv{t: t, ds: ds, store: st, api: c, trainer: buildTrainer(t), log: log,
		opts: &agentOptions{executor: agentExecutorProcess, checkpointRoot: t.TempDir(), grace: 10 * time.Second}}
}

// buildTrainer builds the process executor's test job.
func buildTrainer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "trainer")
	out, err := exec.Command("go", "build", "-o", bin, "../../internal/executor/process/testdata/trainer").CombinedOutput()
	if err != nil {
		t.Fatalf("build trainer: %v\n%s", err, out)
	}
	return bin
}

// startAgentWorkers starts the agent's run workers for agentTestNode, as
// runAgent does, on a client of their own (Stop closes it).
func (e *agentTestEnv) startAgentWorkers() *runWorkers {
	e.t.Helper()
	c, err := temporalx.Dial(context.Background(), temporalx.ClientOptions{HostPort: e.ds.HostPort, Logger: e.log})
	if err != nil {
		e.t.Fatal(err)
	}
	reg, err := e.opts.runRegistrar(e.api, e.log)
	if err != nil {
		e.t.Fatal(err)
	}
	rw := newRunWorkers(c, []string{agentTestNode}, reg, process.WorkerOptions(e.opts.grace), e.log)
	if err := rw.Start(); err != nil {
		e.t.Fatal(err)
	}
	return rw
}

// placeRun stores a job running the trainer with args on one GPU of the
// node, and returns the run's input as JobWorkflow would give it.
func (e *agentTestEnv) placeRun(gpu int, args ...string) *executor.RunInput {
	e.t.Helper()
	ctx := context.Background()
	job, _, err := e.store.CreateJob(ctx, &store.NewJob{
		Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		Request:  scheduling.ResourceRequest{GPUs: 1, Pool: "p"},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 5},
		Command:  append([]string{e.trainer}, args...),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	gpus := []scheduling.GPUShare{{UUID: fmt.Sprintf("GPU-test-%d", gpu), Milli: 1000}}
	out, err := e.store.ApplyCycle(ctx, "cycle-"+job.ID, &scheduling.Result{PolicyVersion: "v1", At: time.Now(),
		Placements: []scheduling.Placement{{JobID: job.ID, Pool: "p", Node: agentTestNode, Rank: 1, GPUs: gpus}}}, time.Now())
	if err != nil || len(out.Placed) != 1 {
		e.t.Fatalf("apply cycle: %+v %v", out, err)
	}
	runID, err := e.store.MarkRunning(ctx, job.ID, out.Placed[0].AllocationID, 0, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return &executor.RunInput{JobID: job.ID, RunID: runID, AllocationID: out.Placed[0].AllocationID,
		Node: agentTestNode, GPUs: gpus, CheckpointIntervalSeconds: 5}
}

// start starts runOnNodeWorkflow for in on a workflow worker of the test.
func (e *agentTestEnv) start(in *executor.RunInput) client.WorkflowRun {
	e.t.Helper()
	run, err := e.ds.Client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: "agent-test/" + in.RunID, TaskQueue: "agent-test", WorkflowExecutionTimeout: 3 * time.Minute,
	}, runOnNodeWorkflow, in)
	if err != nil {
		e.t.Fatal(err)
	}
	return run
}

// result waits for run's RunResult.
func (e *agentTestEnv) result(run client.WorkflowRun) *executor.RunResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res executor.RunResult
	if err := run.Get(ctx, &res); err != nil {
		e.t.Fatalf("workflow %s: %v", run.GetID(), err)
	}
	return &res
}

// lastCheckpoint is the job's stored recovery checkpoint.
func (e *agentTestEnv) lastCheckpoint(jobID string) *scheduling.Checkpoint {
	e.t.Helper()
	j, err := e.store.GetJob(context.Background(), jobID)
	if err != nil {
		e.t.Fatal(err)
	}
	return j.Recovery.LastCheckpoint
}

// waitCheckpoint waits until the job has a stored checkpoint.
func (e *agentTestEnv) waitCheckpoint(jobID string) *scheduling.Checkpoint {
	e.t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cp := e.lastCheckpoint(jobID); cp != nil {
			return cp
		}
	}
	e.t.Fatalf("job %s recorded no checkpoint within a minute", jobID)
	return nil
}

func TestAgentRunsJobsOnItsNodeQueue(t *testing.T) {
	e := newAgentTestEnv(t)
	wf := worker.New(e.ds.Client, "agent-test", worker.Options{})
	wf.RegisterWorkflow(runOnNodeWorkflow)
	if err := wf.Start(); err != nil {
		t.Fatal(err)
	}
	defer wf.Stop()
	agent := e.startAgentWorkers()
	stopped := false
	defer func() {
		if !stopped {
			agent.Stop()
		}
	}()

	t.Run("completes", func(t *testing.T) {
		in := e.placeRun(0, "-steps", "20", "-checkpoint-every", "5")
		res := e.result(e.start(in))
		if res.Outcome != vocab.RunSucceeded || res.Step != 20 || res.LastCheckpoint == nil || res.LastCheckpoint.Step != 20 {
			t.Fatalf("result = %+v, want succeeded at step 20 with its checkpoint", res)
		}
		if cp := e.lastCheckpoint(in.JobID); cp == nil || cp.Step != 20 || cp.Location != res.LastCheckpoint.Location {
			t.Fatalf("stored checkpoint = %+v, want step 20", cp)
		}
	})

	t.Run("preempted", func(t *testing.T) {
		in := e.placeRun(1, "-steps", "100000", "-step-interval", "20ms", "-checkpoint-every", "10")
		run := e.start(in)
		e.waitCheckpoint(in.JobID)
		if err := e.ds.Client.SignalWorkflow(context.Background(), run.GetID(), "", signalPreempt, nil); err != nil {
			t.Fatal(err)
		}
		res := e.result(run)
		if res.Outcome != vocab.RunCancelled || !strings.Contains(res.Detail, "within its grace period") ||
			res.LastCheckpoint == nil || res.LastCheckpoint.Step != res.Step {
			t.Fatalf("result = %+v, want cancelled with the checkpoint saved on SIGTERM", res)
		}
		if cp := e.lastCheckpoint(in.JobID); cp == nil || cp.Step != res.Step {
			t.Fatalf("stored checkpoint = %+v, want the SIGTERM one at step %d", cp, res.Step)
		}
	})

	t.Run("agent restart resumes", func(t *testing.T) {
		in := e.placeRun(2, "-steps", "150", "-step-interval", "20ms", "-checkpoint-every", "10")
		run := e.start(in)
		e.waitCheckpoint(in.JobID)
		agent.Stop() // SIGTERM to the agent: its job saves, the attempt fails retryably
		stopped = true
		saved := e.lastCheckpoint(in.JobID)
		agent = e.startAgentWorkers() // the restarted agent takes the retry
		stopped = false
		res := e.result(run)
		if res.Outcome != vocab.RunSucceeded || !res.ResumedAfterCrash || res.StartStep < saved.Step || res.Step != 150 ||
			strings.Contains(res.Detail, "reported starting") {
			t.Fatalf("result = %+v, want a success resumed at step ≥ %d", res, saved.Step)
		}
	})
}

func TestAgentExecutorFlags(t *testing.T) {
	cases := []struct {
		o    agentOptions
		want string
	}{
		{agentOptions{refresh: time.Second, executor: "docker", inventoryFile: "x"}, "--executor"},
		{agentOptions{refresh: time.Second, executor: agentExecutorProcess, inventoryFile: "x", grace: time.Second}, "--api is required"},
		{agentOptions{refresh: time.Second, executor: agentExecutorSimulated, inventoryFile: "x", apiURL: "http://a", grace: time.Second}, "--sim-speed"},
		{agentOptions{refresh: time.Second, executor: agentExecutorProcess, inventoryFile: "x", apiURL: "http://a"}, "--grace"},
	}
	for _, tc := range cases {
		err := tc.o.validate()
		if _, usage := err.(usageError); err == nil || !usage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate(%+v) = %v, want a usage error about %s", tc.o, err, tc.want)
		}
	}
	ok := agentOptions{refresh: time.Second, executor: agentExecutorNone, inventoryFile: "x"}
	if err := ok.validate(); err != nil {
		t.Errorf("--executor none without --api: %v", err)
	}
	if _, err := os.Stat("../../internal/executor/process/testdata/trainer/main.go"); err != nil {
		t.Fatalf("the trainer the agent test builds has moved: %v", err)
	}
}
