package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

const preemptWF = "preempt/victim/run"

// signalsNamed returns the signals the workflow under test sent with name.
func (e *testEnv) signalsNamed(name string) []sentSignal {
	var out []sentSignal
	for _, s := range e.sent() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// runOf returns the job's only unfinished run, or its latest.
func runOf(t *testing.T, st *store.Store, jobID string) string {
	t.Helper()
	var id string
	if err := st.Pool().QueryRow(context.Background(),
		`SELECT id FROM runs WHERE job_id = $1 ORDER BY run_number DESC LIMIT 1`, jobID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestJobWorkflowPreemptedRunsAgainFromCheckpoint: `preempt` (sent twice)
// cancels the run; the simulated executor saves the step it reached; the
// workflow answers `run-stopped` once with that step and checkpoint, waits,
// and on the next `placed` runs again from that checkpoint, reporting
// `resumed` with the start step.
func TestJobWorkflowPreemptedRunsAgainFromCheckpoint(t *testing.T) {
	st := newStore(t, 2)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 3000, checkpointInterval: 700})
	placed := placeJob(t, st, job.ID)
	env := newTestEnv(t, st, nil)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)
	pre := temporalx.PreemptSignal{PreemptionID: "p-1", WorkflowID: preemptWF, ForJobID: "other"}
	env.signalAt(1300*time.Millisecond, temporalx.SignalPreempt, pre)
	env.signalAt(1300*time.Millisecond, temporalx.SignalPreempt, pre)
	env.RegisterDelayedCallback(func() {
		// The preemption's Release, then the scheduler's next placement on GPU 1.
		ctx := context.Background()
		if err := st.FinishRun(ctx, job.ID, runOf(t, st, job.ID), vocab.RunPreempted, "test release", time.Now()); err != nil {
			t.Error(err)
		}
		now := time.Now()
		out, err := st.ApplyCycle(ctx, "cycle-again", &scheduling.Result{PolicyVersion: "t", At: now, Placements: []scheduling.Placement{{
			JobID: job.ID, Pool: testPool, Node: testNode, Rank: 1, GPUs: []scheduling.GPUShare{{UUID: gpuUUID(1), Milli: 1000}}}}}, now)
		if err != nil || len(out.Placed) != 1 {
			t.Errorf("not placed again: %+v %v", out, err)
			return
		}
		p := out.Placed[0]
		env.SignalWorkflow(temporalx.SignalPlaced, temporalx.PlacedSignal{AllocationID: p.AllocationID, Pool: p.Pool, Node: p.Node, GPUs: p.GPUs})
	}, time.Minute)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID, HeartbeatTimeoutSeconds: 2})

	res := env.jobResult(t)
	stopped := env.signalsNamed(temporalx.SignalRunStopped)
	if len(stopped) != 1 || stopped[0].WorkflowID != preemptWF {
		t.Fatalf("run-stopped signals %+v, want one to the preemption", stopped)
	}
	s := stopped[0].Arg.(temporalx.RunStoppedSignal)
	// The executor saved the step it reached on the way out (the testsuite
	// reports the cancelled activity without its result, so the signal may
	// not carry it: -1).
	var saved int64
	if err := st.Pool().QueryRow(context.Background(), `SELECT (last_checkpoint->>'step')::int8 FROM runs WHERE job_id = $1 AND run_number = 1`,
		job.ID).Scan(&saved); err != nil || saved <= 0 {
		t.Fatalf("first run's final checkpoint %d (%v), want one", saved, err)
	}
	if s.Outcome != temporalx.StoppedPreempted || (s.Step >= 0 && (s.LastCheckpoint == nil || s.LastCheckpoint.Step != saved)) {
		t.Fatalf("run-stopped %+v, want preempted at the saved step %d", s, saved)
	}
	resumed := env.signalsNamed(temporalx.SignalResumed)
	if len(resumed) != 1 || resumed[0].Arg.(temporalx.ResumedSignal).StartStep != saved {
		t.Fatalf("resumed signals %+v, want one from step %d", resumed, saved)
	}
	if res.State != vocab.JobSucceeded || res.Preemptions != 1 || res.ResumedFromStep != saved || res.Step != 3000 {
		t.Fatalf("result %+v, want success after one preemption, resumed from %d", res, saved)
	}
	if n := countRows(t, st, `SELECT count(*) FROM runs WHERE job_id = $1 AND start_step = $2 AND outcome = 'succeeded'`, job.ID, saved); n != 1 {
		t.Fatalf("%d succeeded runs started at step %d, want 1", n, saved)
	}
}

// TestJobWorkflowPreemptionAbortedRunsAgainOnSameAllocation: after
// `preempt-aborted` the job runs again on the allocation it kept, from its
// last checkpoint, and succeeds there.
func TestJobWorkflowPreemptionAbortedRunsAgainOnSameAllocation(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 3000, checkpointInterval: 700})
	placed := placeJob(t, st, job.ID)
	env := newTestEnv(t, st, nil)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)
	env.signalAt(1300*time.Millisecond, temporalx.SignalPreempt, temporalx.PreemptSignal{PreemptionID: "p-1", WorkflowID: preemptWF})
	env.signalAt(time.Minute, temporalx.SignalPreemptAborted, temporalx.PreemptAbortedSignal{PreemptionID: "p-1", Reason: "no checkpoint"})

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID, HeartbeatTimeoutSeconds: 2})

	res := env.jobResult(t)
	if res.State != vocab.JobSucceeded || res.AllocationID != placed.AllocationID || res.Step != 3000 || res.ResumedFromStep == 0 {
		t.Fatalf("result %+v, want success on %s resumed from its checkpoint", res, placed.AllocationID)
	}
	if n := countRows(t, st, `SELECT count(*) FROM runs WHERE job_id = $1`, job.ID); n != 1 {
		t.Fatalf("%d runs, want the one run continued", n)
	}
}
