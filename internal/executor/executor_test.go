package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// checkpointLog records what the executor writes, in order.
type checkpointLog struct {
	mu    sync.Mutex
	steps []int64
	fail  error
}

func (l *checkpointLog) RecordCheckpoint(_ context.Context, jobID, runID string, cp scheduling.Checkpoint) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	if want := "sim://" + jobID + "/" + runID + "/step-"; !strings.HasPrefix(cp.Location, want) {
		return errors.New("checkpoint location " + cp.Location + " lacks " + want)
	}
	l.steps = append(l.steps, cp.Step)
	return nil
}

func (l *checkpointLog) Steps() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.steps...)
}

// fastExecutor runs 1000 steps per real second, heartbeating every 5 ms.
func fastExecutor(log *checkpointLog) *SimulatedExecutor {
	return &SimulatedExecutor{Checkpoints: log, SpeedFactor: 1000, HeartbeatInterval: 5 * time.Millisecond}
}

type runEnv struct {
	*testsuite.TestActivityEnvironment
	mu         sync.Mutex
	heartbeats []Progress
}

func newRunEnv(t *testing.T, e *SimulatedExecutor, opts worker.Options) *runEnv {
	var s testsuite.WorkflowTestSuite
	env := &runEnv{TestActivityEnvironment: s.NewTestActivityEnvironment()}
	env.SetWorkerOptions(opts)
	env.RegisterActivityWithOptions(e.Run, activity.RegisterOptions{Name: RunActivityName})
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var p Progress
		if err := details.Get(&p); err != nil {
			t.Errorf("heartbeat details: %v", err)
		}
		env.mu.Lock()
		env.heartbeats = append(env.heartbeats, p)
		env.mu.Unlock()
	})
	return env
}

func (env *runEnv) run(t *testing.T, in *RunInput) (*RunResult, error) {
	t.Helper()
	val, err := env.ExecuteActivity(RunActivityName, in)
	if err != nil {
		return nil, err
	}
	var res RunResult
	if err := val.Get(&res); err != nil {
		t.Fatalf("decode result: %v", err)
	}
	return &res, nil
}

func TestRunCompletesWritingCheckpointsAndHeartbeats(t *testing.T) {
	log := &checkpointLog{}
	env := newRunEnv(t, fastExecutor(log), worker.Options{})
	res, err := env.run(t, &RunInput{JobID: "j1", RunID: "r1", RunSeconds: 100, CheckpointIntervalSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunSucceeded || res.Step != 100 || res.StartStep != 0 || res.ResumedAfterCrash {
		t.Fatalf("result = %+v, want succeeded at step 100 from 0", res)
	}
	if got := log.Steps(); !slices.Equal(got, []int64{30, 60, 90}) {
		t.Fatalf("checkpoints at %v, want [30 60 90]", got)
	}
	if res.LastCheckpoint == nil || res.LastCheckpoint.Step != 90 {
		t.Fatalf("last checkpoint = %+v, want step 90", res.LastCheckpoint)
	}
}

func TestRunHonoursStartStep(t *testing.T) {
	log := &checkpointLog{}
	env := newRunEnv(t, fastExecutor(log), worker.Options{})
	res, err := env.run(t, &RunInput{JobID: "j1", RunID: "r2", RunSeconds: 100, StartStep: 60, CheckpointIntervalSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunSucceeded || res.StartStep != 60 || res.Step != 100 {
		t.Fatalf("result = %+v, want succeeded 60→100", res)
	}
	if got := log.Steps(); !slices.Equal(got, []int64{90}) {
		t.Fatalf("checkpoints at %v, want only [90]", got)
	}
}

func TestRunResumesFromHeartbeatCheckpointAfterCrash(t *testing.T) {
	log := &checkpointLog{}
	env := newRunEnv(t, fastExecutor(log), worker.Options{})
	lost := Progress{Step: 75, LastCheckpoint: &scheduling.Checkpoint{Step: 60, Location: "sim://j1/r1/step-60"}}
	env.SetHeartbeatDetails(lost)
	res, err := env.run(t, &RunInput{JobID: "j1", RunID: "r1", RunSeconds: 100, CheckpointIntervalSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	if !res.ResumedAfterCrash || res.StartStep != 60 || res.RecomputeSteps != 15 || res.Outcome != vocab.RunSucceeded {
		t.Fatalf("result = %+v, want resumed at 60 with 15 steps recomputed", res)
	}
	if got := log.Steps(); !slices.Equal(got, []int64{90}) {
		t.Fatalf("checkpoints at %v, want only [90]", got)
	}
}

func TestRunWithoutCheckpointRestartsAfterCrash(t *testing.T) {
	env := newRunEnv(t, fastExecutor(&checkpointLog{}), worker.Options{})
	env.SetHeartbeatDetails(Progress{Step: 40})
	res, err := env.run(t, &RunInput{JobID: "j2", RunID: "r1", RunSeconds: 50, StartStep: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !res.ResumedAfterCrash || res.StartStep != 10 || res.RecomputeSteps != 30 {
		t.Fatalf("result = %+v, want restart at the start step 10 with 30 steps recomputed", res)
	}
}

func TestRunStopsOnCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	env := newRunEnv(t, fastExecutor(&checkpointLog{}), worker.Options{BackgroundActivityContext: ctx})
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	res, err := env.run(t, &RunInput{JobID: "j3", RunID: "r1", RunSeconds: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunCancelled || res.Step <= 0 || res.Step >= 60_000 {
		t.Fatalf("result = %+v, want cancelled part-way", res)
	}
	if elapsed := time.Since(start); elapsed > 30*time.Second {
		t.Fatalf("cancelled run took %s", elapsed)
	}
}

func TestRunReportsSimulatedFailure(t *testing.T) {
	env := newRunEnv(t, fastExecutor(&checkpointLog{}), worker.Options{})
	res, err := env.run(t, &RunInput{JobID: "j4", RunID: "r1", RunSeconds: 100, FailAtStep: 42})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunFailed || res.Step != 42 {
		t.Fatalf("result = %+v, want failed at step 42", res)
	}
}

func TestRunReturnsRetryableErrorWhenWorkerStops(t *testing.T) {
	env := newRunEnv(t, fastExecutor(&checkpointLog{}), worker.Options{})
	stop := make(chan struct{})
	env.SetWorkerStopChannel(stop)
	time.AfterFunc(30*time.Millisecond, func() { close(stop) })
	_, err := env.run(t, &RunInput{JobID: "j5", RunID: "r1", RunSeconds: 60_000})
	var appErr *temporal.ApplicationError
	if err == nil || !strings.Contains(err.Error(), "worker stopping") || (errors.As(err, &appErr) && appErr.NonRetryable()) {
		t.Fatalf("err = %v, want a retryable worker-stopping error", err)
	}
	// The last heartbeat, flushed when the attempt fails, carries the step the
	// retried attempt will resume from.
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.heartbeats) == 0 {
		t.Fatal("no heartbeat recorded")
	}
	last := env.heartbeats[len(env.heartbeats)-1]
	if want := fmt.Sprintf("at step %d ", last.Step); last.Step <= 0 || !strings.Contains(err.Error(), want) {
		t.Fatalf("last heartbeat %+v does not match %q", last, err)
	}
}

func TestRunFailsAttemptWhenCheckpointCannotBeWritten(t *testing.T) {
	env := newRunEnv(t, fastExecutor(&checkpointLog{fail: errors.New("database down")}), worker.Options{})
	_, err := env.run(t, &RunInput{JobID: "j6", RunID: "r1", RunSeconds: 100, CheckpointIntervalSeconds: 10})
	if err == nil || !strings.Contains(err.Error(), "database down") {
		t.Fatalf("err = %v, want the recorder's error", err)
	}
}

func TestRunRejectsInvalidInput(t *testing.T) {
	env := newRunEnv(t, fastExecutor(&checkpointLog{}), worker.Options{})
	_, err := env.run(t, &RunInput{JobID: "j7", RunID: "r1", RunSeconds: -1})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() {
		t.Fatalf("err = %v, want a non-retryable application error", err)
	}
}

// storedCheckpointLog is a checkpointLog that also answers the run's stored
// checkpoint (RunCheckpointReader), as the store does.
type storedCheckpointLog struct {
	checkpointLog
	stored *scheduling.Checkpoint
}

func (l *storedCheckpointLog) RunCheckpoint(context.Context, string, string) (*scheduling.Checkpoint, error) {
	return l.stored, nil
}

// The lost attempt saved step 90 after its last heartbeat (step 75, checkpoint
// 60) reached Temporal: the retry resumes from the store's 90, not from 60,
// whose next checkpoint would go backwards against the stored one.
func TestRunResumesFromStoredCheckpointNewerThanHeartbeat(t *testing.T) {
	log := &storedCheckpointLog{stored: &scheduling.Checkpoint{Step: 90, Location: "sim://j1/r1/step-90"}}
	env := newRunEnv(t, &SimulatedExecutor{Checkpoints: log, SpeedFactor: 1000, HeartbeatInterval: 5 * time.Millisecond}, worker.Options{})
	env.SetHeartbeatDetails(Progress{Step: 75, LastCheckpoint: &scheduling.Checkpoint{Step: 60, Location: "sim://j1/r1/step-60"}})
	res, err := env.run(t, &RunInput{JobID: "j1", RunID: "r1", RunSeconds: 130, CheckpointIntervalSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	if !res.ResumedAfterCrash || res.StartStep != 90 || res.RecomputeSteps != 0 || res.Outcome != vocab.RunSucceeded {
		t.Fatalf("result = %+v, want resumed at the stored 90, nothing recomputed", res)
	}
	if got := log.Steps(); !slices.Equal(got, []int64{120}) {
		t.Fatalf("checkpoints at %v, want only [120]", got)
	}
}
