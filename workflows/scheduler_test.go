package workflows_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// cycleLog records each RunCycle attempt: its input and the workflow time.
type cycleLog struct {
	mu     sync.Mutex
	inputs []activities.RunCycleInput
	at     []time.Duration // since t0
}

func (l *cycleLog) listen(t *testing.T, env *testEnv) {
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name != "RunCycle" {
			return
		}
		var in activities.RunCycleInput
		if err := args.Get(&in); err != nil {
			t.Error(err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.inputs = append(l.inputs, in)
		l.at = append(l.at, env.Now().Sub(t0))
	})
}

func (l *cycleLog) snapshot() ([]activities.RunCycleInput, []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]activities.RunCycleInput(nil), l.inputs...), append([]time.Duration(nil), l.at...)
}

// continuedAs returns the input the scheduler continued as new with.
func continuedAs(t *testing.T, env *testEnv) *workflows.SchedulerInput {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow ended with %v, want continue-as-new", err)
	}
	if can.WorkflowType.Name != workflows.SchedulerWorkflowName {
		t.Fatalf("continued as %s", can.WorkflowType.Name)
	}
	var next workflows.SchedulerInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	return &next
}

// placedSignals returns the `placed` signals sent, by job ID.
func placedSignals(env *testEnv) map[string]temporalx.PlacedSignal {
	out := map[string]temporalx.PlacedSignal{}
	for _, s := range env.sent() {
		if s.Name == temporalx.SignalPlaced {
			out[s.WorkflowID] = s.Arg.(temporalx.PlacedSignal)
		}
	}
	return out
}

// newSchedulerEnv is a test environment starting at t0 with the activities on
// deps (store st when deps.Store is nil) and a log of the cycles run.
func newSchedulerEnv(t *testing.T, st *store.Store, deps activities.Deps) (*testEnv, *cycleLog) {
	if deps.Store == nil {
		deps.Store = st
	}
	env := newTestEnvWith(t, deps, nil)
	env.SetStartTime(t0)
	log := &cycleLog{}
	log.listen(t, env)
	return env, log
}

func TestSchedulerCyclesOnTimerAndCoalescedSignalsThenContinuesAsNew(t *testing.T) {
	st := newStore(t, 2)
	jobA := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	var jobB *store.Job
	env, log := newSchedulerEnv(t, st, activities.Deps{})
	env.RegisterDelayedCallback(func() {
		jobB = submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
		for range 3 { // a burst: one cycle serves it
			env.SignalWorkflow(temporalx.SignalJobSubmitted, temporalx.JobSubmittedSignal{JobID: jobB.ID})
		}
	}, 70*time.Second)

	env.ExecuteWorkflow(workflows.SchedulerWorkflowName, &workflows.SchedulerInput{CycleIntervalSeconds: 60, IterationsPerRun: 3})

	next := continuedAs(t, env)
	inputs, at := log.snapshot()
	// Timer; signal burst, served after the 250 ms coalescing wait; timer.
	wantAt := []time.Duration{60 * time.Second, 70250 * time.Millisecond, 130250 * time.Millisecond}
	if len(at) != len(wantAt) {
		t.Fatalf("cycles at %v, want %v", at, wantAt)
	}
	for i := range at {
		if at[i] != wantAt[i] {
			t.Fatalf("cycles at %v, want %v", at, wantAt)
		}
	}
	if inputs[0].PreviousCycleID != "" || inputs[1].PreviousCycleID != inputs[0].CycleID || inputs[2].PreviousCycleID != inputs[1].CycleID {
		t.Fatalf("cycle chain broken: %+v", inputs)
	}
	if next.PreviousCycleID != inputs[2].CycleID || next.CyclesBefore != 3 || next.WakePending || next.RetryCycleID != "" ||
		next.CycleIntervalSeconds != 60 || next.IterationsPerRun != 3 || next.Shard != temporalx.DefaultShard {
		t.Fatalf("continued with %+v", next)
	}
	placed := placedSignals(env)
	for _, j := range []*store.Job{jobA, jobB} {
		p, ok := placed[temporalx.JobWorkflowID(j.ID)]
		if !ok || p.AllocationID == "" || p.Node != testNode || len(p.GPUs) != 1 {
			t.Fatalf("placed signal for %s = %+v (sent: %v)", j.ID, p, ok)
		}
		if got := jobState(t, st, j.ID); got != vocab.JobPlaced {
			t.Fatalf("job %s stored as %s, want placed", j.ID, got)
		}
	}
	if placed[temporalx.JobWorkflowID(jobA.ID)].CycleID != inputs[0].CycleID || placed[temporalx.JobWorkflowID(jobB.ID)].CycleID != inputs[1].CycleID {
		t.Fatal("placements signalled by the wrong cycles")
	}
}

func TestSchedulerCarriesPendingWakeAcrossContinueAsNew(t *testing.T) {
	st := newStore(t, 1)
	env, _ := newSchedulerEnv(t, st, activities.Deps{})
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		// A release arrives while the cycle runs, after the wake-ups were taken.
		env.SignalWorkflow(temporalx.SignalAllocationReleased, temporalx.AllocationReleasedSignal{JobID: "j-x"})
	})
	env.ExecuteWorkflow(workflows.SchedulerWorkflowName, &workflows.SchedulerInput{CycleIntervalSeconds: 60, IterationsPerRun: 1})

	next := continuedAs(t, env)
	if !next.WakePending || next.CyclesBefore != 1 {
		t.Fatalf("continued with %+v, want the wake-up carried", next)
	}

	// The next run serves it at once instead of waiting for its timer.
	env2, log := newSchedulerEnv(t, st, activities.Deps{})
	env2.ExecuteWorkflow(workflows.SchedulerWorkflowName, next)
	continuedAs(t, env2)
	if _, at := log.snapshot(); len(at) != 1 || at[0] != 0 {
		t.Fatalf("cycles at %v, want one at once", at)
	}
}

func TestSchedulerRequeuesPlacementOfUnreachableJobWorkflow(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	env, _ := newSchedulerEnv(t, st, activities.Deps{})
	env.failSend[temporalx.JobWorkflowID(job.ID)] = errors.New("unknown external workflow execution")

	env.ExecuteWorkflow(workflows.SchedulerWorkflowName, &workflows.SchedulerInput{WakePending: true, IterationsPerRun: 1})

	continuedAs(t, env)
	if n := countRows(t, st, `SELECT count(*) FROM allocations WHERE job_id = $1 AND released_at IS NOT NULL`, job.ID); n != 1 {
		t.Fatalf("%d released allocations, want the unclaimed one released", n)
	}
	if got := jobState(t, st, job.ID); got != vocab.JobWaiting {
		t.Fatalf("job stored as %s, want waiting again", got)
	}
}

func TestSchedulerRetriesFailedCycleUnderSameID(t *testing.T) {
	st := newStore(t, 1)
	submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	calls := 0
	// The policy store is unreachable for the first cycle's five attempts.
	policy := func(context.Context) (*scheduling.Policy, error) {
		calls++
		if calls <= 5 {
			return nil, errors.New("policy store unreachable")
		}
		p := scheduling.DefaultPolicy()
		return &p, nil
	}
	env, log := newSchedulerEnv(t, st, activities.Deps{Policy: policy})

	env.ExecuteWorkflow(workflows.SchedulerWorkflowName, &workflows.SchedulerInput{WakePending: true, CycleIntervalSeconds: 60, IterationsPerRun: 2})

	next := continuedAs(t, env)
	inputs, _ := log.snapshot()
	if len(inputs) != 6 {
		t.Fatalf("%d cycle attempts, want 5 failed + 1", len(inputs))
	}
	for _, in := range inputs[1:] {
		if in.CycleID != inputs[0].CycleID {
			t.Fatalf("cycle IDs %+v, want the failed cycle retried under its ID", inputs)
		}
	}
	if next.CyclesBefore != 1 || next.RetryCycleID != "" || next.PreviousCycleID != inputs[0].CycleID {
		t.Fatalf("continued with %+v", next)
	}
	if len(placedSignals(env)) != 1 {
		t.Fatal("retried cycle's placement not signalled")
	}
}
