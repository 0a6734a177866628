package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/workflows"
)

// The fast JobWorkflow tier: Temporal's test environment with every activity
// mocked (the store steps and the executor's run), for the cancel and
// preempt races of workflows/job.go. No PostgreSQL, no dev server: these run
// under -short. The store-backed tests (job_test.go, job_preempt_test.go)
// check the same paths against real store effects.

const (
	mockJobID   = "j-mocked"
	mockAllocID = "alloc-1"
	mockRunID   = "run-1"
	preemptWFID = "preemption/pre-1"
)

// notice is a preemption's notice to stop the job's run mockRunID.
var notice = temporalx.PreemptSignal{PreemptionID: "pre-1", WorkflowID: preemptWFID, ForJobID: "j-prod", RunID: mockRunID}

// mockPlaced is the scheduler's `placed` signal for mockAllocID.
var mockPlaced = temporalx.PlacedSignal{AllocationID: mockAllocID, CycleID: "c1", Pool: testPool, Node: "p1-n0000",
	GPUs: []scheduling.GPUShare{{UUID: "GPU-p1-0000-0", Milli: scheduling.MilliPerGPU}}}

// activityCall is one call of a mocked activity: its name and input.
type activityCall struct {
	Name  string
	Input any
}

// mockedJob is a JobWorkflow test environment whose activities are mocks: the
// store steps answer from loads (LoadJob's answers, in order; the last one
// repeats) and record their calls; each run activity blocks until the test
// ends it (endRun). The test environment delivers a cancelled activity's
// cancellation to the workflow at once and not to the activity, so a test
// that cancels a run also ends it, letting the environment's clock skip
// ahead again (it follows the wall clock while an activity runs).
type mockedJob struct {
	*testEnv
	t       *testing.T
	mu      sync.Mutex
	calls   []activityCall
	loads   []activities.LoadJobResult
	runEnds chan *executor.RunResult // one per run to end, in order
	done    chan struct{}            // closed at cleanup: blocked mocks return
	// markRunningGate, when set, holds MarkRunning until it is closed.
	markRunningGate chan struct{}
	// loadGate, when set, holds the LoadJob call numbered loadGateCall
	// (0-based) until it is closed.
	loadGate     chan struct{}
	loadGateCall int
	loadCalls    int
	// finishRunGate, when set, holds the first FinishRun until it is closed.
	finishRunGate chan struct{}
}

// Run results the tests end runs with.
var (
	succeededRun = &executor.RunResult{Outcome: vocab.RunSucceeded, Step: 60, Detail: "done"}
	stoppedRun   = &executor.RunResult{Outcome: vocab.RunCancelled, Step: 30, Detail: "stopped"}
)

// newMockedJob builds the environment; loads are LoadJob's answers.
func newMockedJob(t *testing.T, loads ...activities.LoadJobResult) *mockedJob {
	env := newWorkflowEnv(func(env *testEnv) {
		workflows.RegisterServiceWorkflows(env)
		// Registered only so that the workflow's activity names resolve;
		// every call is answered by the mocks below.
		env.RegisterActivity(&activities.Jobs{})
		env.RegisterActivityWithOptions(func(context.Context, *executor.RunInput) (*executor.RunResult, error) {
			return nil, errors.New("run activity not mocked")
		}, activity.RegisterOptions{Name: executor.RunActivityName})
	})
	m := &mockedJob{testEnv: env, t: t, loads: loads, runEnds: make(chan *executor.RunResult, 4), done: make(chan struct{})}
	t.Cleanup(func() { close(m.done) })

	mockActivity(m, "LoadJob", func(*activities.LoadJobInput) *activities.LoadJobResult {
		m.mu.Lock()
		n := m.loadCalls
		m.loadCalls++
		m.mu.Unlock()
		if g := m.loadGate; g != nil && n == m.loadGateCall {
			select {
			case <-g:
			case <-m.done:
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		r := m.loads[0]
		if len(m.loads) > 1 {
			m.loads = m.loads[1:]
		}
		return &r
	})
	mockActivity(m, "CancelJob", func(*activities.CancelJobInput) *activities.CancelJobResult { return &activities.CancelJobResult{} })
	mockActivity(m, "MarkRunning", func(*activities.MarkRunningInput) *activities.MarkRunningResult {
		if g := m.markRunningGate; g != nil {
			select {
			case <-g:
			case <-m.done:
			}
		}
		return &activities.MarkRunningResult{RunID: mockRunID, StartedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	})
	mockActivity(m, "FinishRun", func(*activities.FinishRunInput) *activities.FinishRunResult {
		m.mu.Lock()
		g := m.finishRunGate
		m.finishRunGate = nil // only the first call is held
		m.mu.Unlock()
		if g != nil {
			select {
			case <-g:
			case <-m.done:
			}
		}
		return &activities.FinishRunResult{}
	})
	mockActivity(m, "ReleasePlacement", func(*activities.ReleasePlacementInput) *activities.ReleasePlacementResult {
		return &activities.ReleasePlacementResult{}
	})
	m.OnActivity(executor.RunActivityName, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in *executor.RunInput) (*executor.RunResult, error) {
			m.record(executor.RunActivityName, *in)
			select {
			case r := <-m.runEnds:
				return r, nil
			case <-m.done:
				return nil, errors.New("test ended")
			}
		})
	return m
}

// mockActivity answers activity name with answer(input), recording the call.
func mockActivity[In, Out any](m *mockedJob, name string, answer func(*In) *Out) {
	m.OnActivity(name, mock.Anything, mock.Anything).Return(func(_ context.Context, in *In) (*Out, error) {
		m.record(name, *in)
		return answer(in), nil
	})
}

// endRun ends the oldest running run activity with r (a cancelled one's
// result is dropped by the environment).
func (m *mockedJob) endRun(r *executor.RunResult) { m.runEnds <- r }

// signalAndEndRun sends signal name with arg after d and ends the run it
// stops (a cancel or a preemption notice) with stoppedRun.
func (m *mockedJob) signalAndEndRun(d time.Duration, name string, arg any) {
	m.RegisterDelayedCallback(func() {
		m.SignalWorkflow(name, arg)
		m.endRun(stoppedRun)
	}, d)
}

func (m *mockedJob) record(name string, in any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, activityCall{name, in})
}

// names returns the activities called, in order.
func (m *mockedJob) names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.calls {
		out = append(out, c.Name)
	}
	return out
}

// call returns the i-th call of activity name (0-based), failing the test
// when there is none.
func (m *mockedJob) call(name string, i int) any {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.calls {
		if c.Name == name {
			if i == 0 {
				return c.Input
			}
			i--
		}
	}
	m.t.Fatalf("no call %d of %s in %v", i, name, m.calls)
	return nil
}

// execute runs the job workflow for mockJobID.
func (m *mockedJob) execute() {
	m.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: mockJobID})
}

// wantCalls fails the test unless the activities called are want, in order.
func (m *mockedJob) wantCalls(want ...string) {
	m.t.Helper()
	if got := m.names(); !slices.Equal(got, want) {
		m.t.Fatalf("activities called %v, want %v", got, want)
	}
}

// runStopped returns the run-stopped signals sent to the preemption workflow.
func (m *mockedJob) runStopped() []temporalx.RunStoppedSignal {
	var out []temporalx.RunStoppedSignal
	for _, s := range m.sent() {
		if s.WorkflowID == preemptWFID && s.Name == temporalx.SignalRunStopped {
			out = append(out, s.Arg.(temporalx.RunStoppedSignal))
		}
	}
	return out
}

// waitingJob is LoadJob's answer for a job waiting in the store.
func waitingJob() activities.LoadJobResult {
	return activities.LoadJobResult{JobID: mockJobID, Project: "vision", Queue: testQueue, Tier: "standard", Pool: testPool,
		State: vocab.JobWaiting, RunSeconds: 60, CheckpointIntervalSeconds: 20}
}

// placedJob is LoadJob's answer once a cycle placed the job.
func placedJob() activities.LoadJobResult {
	j := waitingJob()
	j.State = vocab.JobPlaced
	return j
}

// runWallTime is how long a test lets a mocked run go before signalling it:
// while an activity runs, the test environment's clock follows the wall clock.
const runWallTime = 100 * time.Millisecond

func TestJobWorkflowMockedCancelWhileWaiting(t *testing.T) {
	m := newMockedJob(t, waitingJob())
	m.signalAt(time.Minute, temporalx.SignalCancel, temporalx.CancelSignal{Actor: "alice", Reason: "wrong data"})
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobCancelled || res.AllocationID != "" || res.RunID != "" || res.Detail != "cancelled by alice: wrong data" {
		t.Fatalf("result %+v, want cancelled without allocation or run", res)
	}
	// The store is told, then read again: not placed, so nothing to release.
	m.wantCalls("LoadJob", "CancelJob", "LoadJob")
	if in := m.call("CancelJob", 0).(activities.CancelJobInput); in.Actor != "alice" || in.Reason != "wrong data" || in.JobID != mockJobID {
		t.Fatalf("CancelJob input %+v", in)
	}
	if n := len(m.sent()); n != 0 {
		t.Fatalf("%d signals sent, want none", n)
	}
}

func TestJobWorkflowMockedCancelRacingPlacementReleasesLateAllocation(t *testing.T) {
	// The cancel arrives first; the store already shows a cycle's placement,
	// whose `placed` signal comes after.
	m := newMockedJob(t, waitingJob(), placedJob())
	m.signalAt(time.Minute, temporalx.SignalCancel, temporalx.CancelSignal{Actor: "alice", Reason: "not needed"})
	m.signalAt(2*time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobCancelled || res.AllocationID != mockAllocID || res.RunID != "" {
		t.Fatalf("result %+v, want cancelled holding %s without a run", res, mockAllocID)
	}
	m.wantCalls("LoadJob", "CancelJob", "LoadJob", "ReleasePlacement")
	in := m.call("ReleasePlacement", 0).(activities.ReleasePlacementInput)
	if in.AllocationID != mockAllocID || in.Outcome != vocab.RunCancelled || in.SchedulerWorkflowID != schedulerID ||
		in.Detail != "cancelled by alice: not needed" {
		t.Fatalf("ReleasePlacement input %+v", in)
	}
}

func TestJobWorkflowMockedCancelRacingPlacementWithoutPlacedSignalFails(t *testing.T) {
	m := newMockedJob(t, waitingJob(), placedJob())
	m.signalAt(time.Minute, temporalx.SignalCancel, temporalx.CancelSignal{Actor: "alice", Reason: "not needed"})
	m.execute()

	err := m.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "no `placed` signal came within 10m0s") {
		t.Fatalf("workflow error %v, want the missing placed signal named", err)
	}
	// Nothing to release without the allocation's ID.
	m.wantCalls("LoadJob", "CancelJob", "LoadJob")
}

func TestJobWorkflowMockedCancelWhilePlacedFinishesRunCancelled(t *testing.T) {
	// The cancel arrives while the run is being started (MarkRunning): the
	// run is started and at once stopped, and ends cancelled.
	m := newMockedJob(t, waitingJob())
	m.markRunningGate = make(chan struct{})
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.RegisterDelayedCallback(func() {
		m.SignalWorkflow(temporalx.SignalCancel, temporalx.CancelSignal{Actor: "bob", Reason: "superseded"})
		close(m.markRunningGate)
	}, time.Minute+runWallTime)
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobCancelled || res.AllocationID != mockAllocID || res.RunID != mockRunID {
		t.Fatalf("result %+v, want a cancelled run on %s", res, mockAllocID)
	}
	// The run activity is scheduled and cancelled in one workflow task: its
	// mock may or may not have started. A run ends through FinishRun (not
	// ReleasePlacement), and the API cancelled the stored job (no CancelJob).
	var store []string
	for _, n := range m.names() {
		if n != executor.RunActivityName {
			store = append(store, n)
		}
	}
	if want := []string{"LoadJob", "MarkRunning", "FinishRun"}; !slices.Equal(store, want) {
		t.Fatalf("store activities called %v, want %v", store, want)
	}
	in := m.call("FinishRun", 0).(activities.FinishRunInput)
	if in.RunID != mockRunID || in.Outcome != vocab.RunCancelled || in.Detail != "cancelled by bob: superseded" {
		t.Fatalf("FinishRun input %+v", in)
	}
}

func TestJobWorkflowMockedCancelWhileRunning(t *testing.T) {
	m := newMockedJob(t, waitingJob())
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.signalAndEndRun(time.Minute+runWallTime, temporalx.SignalCancel, temporalx.CancelSignal{Actor: "bob", Reason: "superseded"})
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobCancelled || res.RunID != mockRunID || res.Step != 0 {
		t.Fatalf("result %+v, want a cancelled run without a run result", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "FinishRun")
	run := m.call(executor.RunActivityName, 0).(executor.RunInput)
	if run.RunID != mockRunID || run.AllocationID != mockAllocID || run.RunSeconds != 60 || run.CheckpointIntervalSeconds != 20 {
		t.Fatalf("run input %+v", run)
	}
	if in := m.call("FinishRun", 0).(activities.FinishRunInput); in.Outcome != vocab.RunCancelled || in.SchedulerWorkflowID != schedulerID {
		t.Fatalf("FinishRun input %+v", in)
	}
	states, _ := m.upserted()
	// `placed` is not upserted (version 2 of local-store-steps).
	if want := []string{"waiting", "running", "cancelled"}; !slices.Equal(states, want) {
		t.Fatalf("job states upserted %v, want %v", states, want)
	}
}

func TestJobWorkflowMockedPreemptedThenCancelledWhileWaiting(t *testing.T) {
	// A preemption notice stops the run; the job waits for a new placement
	// and is cancelled there: its run ends cancelled and the job is
	// cancelled in the store.
	m := newMockedJob(t, waitingJob())
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.signalAndEndRun(time.Minute+runWallTime, temporalx.SignalPreempt, notice)
	m.signalAt(time.Hour, temporalx.SignalCancel, temporalx.CancelSignal{Actor: "alice", Reason: "gave up"})
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobCancelled || res.Preemptions != 0 || res.Detail != "cancelled by alice: gave up" {
		t.Fatalf("result %+v, want cancelled, never resumed", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "FinishRun", "CancelJob")
	if in := m.call("FinishRun", 0).(activities.FinishRunInput); in.RunID != mockRunID || in.Outcome != vocab.RunCancelled {
		t.Fatalf("FinishRun input %+v", in)
	}
	stopped := m.runStopped()
	if len(stopped) != 1 || stopped[0].Outcome != temporalx.StoppedPreempted || stopped[0].RunID != mockRunID ||
		stopped[0].Step != -1 || stopped[0].PreemptionID != "pre-1" {
		t.Fatalf("run-stopped signals %+v, want one: preempted, step unknown", stopped)
	}
	states, _ := m.upserted()
	if want := []string{"waiting", "running", "waiting", "cancelled"}; !slices.Equal(states, want) {
		t.Fatalf("job states upserted %v, want %v", states, want)
	}
}

func TestJobWorkflowMockedPreemptAndCancelTogetherEndCancelled(t *testing.T) {
	// The cancel and a preemption notice reach the running job together:
	// the cancellation wins (the run ends cancelled, FinishRun releases),
	// and the preemption is told how the run ended.
	m := newMockedJob(t, waitingJob())
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.RegisterDelayedCallback(func() {
		m.SignalWorkflow(temporalx.SignalCancel, temporalx.CancelSignal{Actor: "bob", Reason: "superseded"})
		m.SignalWorkflow(temporalx.SignalPreempt, notice)
		m.endRun(stoppedRun)
	}, time.Minute+runWallTime)
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobCancelled || res.Detail != "cancelled by bob: superseded" {
		t.Fatalf("result %+v, want cancelled by bob", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "FinishRun")
	if in := m.call("FinishRun", 0).(activities.FinishRunInput); in.Outcome != vocab.RunCancelled {
		t.Fatalf("FinishRun input %+v", in)
	}
	stopped := m.runStopped()
	if len(stopped) != 1 || stopped[0].Outcome != string(vocab.RunCancelled) || stopped[0].PreemptionID != "pre-1" {
		t.Fatalf("run-stopped signals %+v, want one saying the run ended cancelled", stopped)
	}
}

func TestJobWorkflowMockedPreemptForAnotherRunIsAnsweredNotRunning(t *testing.T) {
	// A notice for a run this job no longer has (an earlier run's) is
	// answered at once and the current run goes on to succeed.
	m := newMockedJob(t, waitingJob())
	stale := temporalx.PreemptSignal{PreemptionID: "pre-old", WorkflowID: preemptWFID, ForJobID: "j-prod", RunID: "run-0"}
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.RegisterDelayedCallback(func() {
		m.SignalWorkflow(temporalx.SignalPreempt, stale)
		m.endRun(succeededRun)
	}, time.Minute+runWallTime)
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobSucceeded || res.Step != 60 || res.Preemptions != 0 {
		t.Fatalf("result %+v, want succeeded at step 60", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "FinishRun")
	if in := m.call("FinishRun", 0).(activities.FinishRunInput); in.Outcome != vocab.RunSucceeded {
		t.Fatalf("FinishRun input %+v", in)
	}
	stopped := m.runStopped()
	if len(stopped) != 1 || stopped[0].Outcome != temporalx.StoppedNotRunning || stopped[0].RunID != "run-0" ||
		stopped[0].Step != -1 || stopped[0].PreemptionID != "pre-old" {
		t.Fatalf("run-stopped signals %+v, want one: not running, for run-0", stopped)
	}
}

func TestJobWorkflowMockedPreemptedResumesOnNewAllocation(t *testing.T) {
	// A preemption stops the run; the next `placed` (a new allocation)
	// starts a run from the reloaded job's checkpoint, reported to the
	// preemption with `resumed`.
	resumed := waitingJob()
	resumed.ResumeStep = 40
	m := newMockedJob(t, waitingJob(), resumed)
	second := mockPlaced
	second.AllocationID = "alloc-2"
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.signalAndEndRun(time.Minute+runWallTime, temporalx.SignalPreempt, notice)
	m.RegisterDelayedCallback(func() {
		m.SignalWorkflow(temporalx.SignalPlaced, mockPlaced) // a repeat of the released allocation: ignored
		m.SignalWorkflow(temporalx.SignalPlaced, second)
	}, time.Hour)
	m.RegisterDelayedCallback(func() { m.endRun(succeededRun) }, time.Hour+runWallTime)
	m.execute()

	res := m.jobResult(t)
	if res.State != vocab.JobSucceeded || res.AllocationID != "alloc-2" || res.Preemptions != 1 {
		t.Fatalf("result %+v, want succeeded on alloc-2 after one preemption", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "LoadJob", "MarkRunning", executor.RunActivityName, "FinishRun")
	if in := m.call("MarkRunning", 1).(activities.MarkRunningInput); in.AllocationID != "alloc-2" || in.StartStep != 40 {
		t.Fatalf("second MarkRunning input %+v, want alloc-2 from step 40", in)
	}
	var resumedSignals []temporalx.ResumedSignal
	for _, s := range m.sent() {
		if s.WorkflowID == preemptWFID && s.Name == temporalx.SignalResumed {
			resumedSignals = append(resumedSignals, s.Arg.(temporalx.ResumedSignal))
		}
	}
	if len(resumedSignals) != 1 || resumedSignals[0].StartStep != 40 || resumedSignals[0].PreemptionID != "pre-1" {
		t.Fatalf("resumed signals %+v, want one from step 40", resumedSignals)
	}
}

func TestJobWorkflowMockedRunFailureFailsWorkflowWithResult(t *testing.T) {
	m := newMockedJob(t, waitingJob())
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.RegisterDelayedCallback(func() {
		m.endRun(&executor.RunResult{Outcome: vocab.RunFailed, Step: 12, Detail: "exit status 3"})
	}, time.Minute+runWallTime)
	m.execute()

	var appErr *temporal.ApplicationError
	if err := m.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeJobFailed {
		t.Fatalf("workflow error %v, want %s", err, workflows.ErrTypeJobFailed)
	}
	var res workflows.JobResult
	decodeDetails(t, appErr, &res)
	if res.State != vocab.JobFailed || res.Step != 12 || res.Detail != "exit status 3" {
		t.Fatalf("failed result %+v", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "FinishRun")
	if in := m.call("FinishRun", 0).(activities.FinishRunInput); in.Outcome != vocab.RunFailed {
		t.Fatalf("FinishRun input %s", fmt.Sprint(in))
	}
}

// cancelledResult returns the JobResult of a workflow that Temporal
// cancelled, failing the test unless the workflow ended with a cancellation
// carrying it.
func (m *mockedJob) cancelledResult() *workflows.JobResult {
	m.t.Helper()
	if !m.IsWorkflowCompleted() {
		m.t.Fatal("workflow did not complete")
	}
	var cerr *temporal.CanceledError
	if err := m.GetWorkflowError(); !errors.As(err, &cerr) {
		m.t.Fatalf("workflow error %v, want a cancellation", err)
	}
	// The test environment hands the details back as the workflow gave
	// them: a *JobResult.
	var res *workflows.JobResult
	decodeDetails(m.t, cerr, &res)
	if res == nil {
		m.t.Fatal("cancellation carries no JobResult")
	}
	return res
}

// wantCancelledRun fails the test unless FinishRun call i ended run mockRunID
// cancelled by the Temporal cancellation, waking the scheduler.
func (m *mockedJob) wantCancelledRun(i int) {
	m.t.Helper()
	in := m.call("FinishRun", i).(activities.FinishRunInput)
	if in.JobID != mockJobID || in.RunID != mockRunID || in.Outcome != vocab.RunCancelled ||
		in.Detail != "cancelled by temporal: job workflow cancelled" || in.SchedulerWorkflowID != schedulerID {
		m.t.Fatalf("FinishRun input %+v, want run %s cancelled by temporal", in, mockRunID)
	}
}

func TestJobWorkflowMockedTemporalCancelDuringMarkRunningReleasesAllocation(t *testing.T) {
	// Temporal cancels the workflow while MarkRunning runs: whether the
	// interrupted step created the run or not, MarkRunning runs again
	// (disconnected; idempotent per allocation) and FinishRun ends that run
	// cancelled, releasing the allocation and cancelling the job in the store.
	m := newMockedJob(t, waitingJob())
	m.markRunningGate = make(chan struct{})
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.RegisterDelayedCallback(func() {
		m.CancelWorkflow()
		close(m.markRunningGate)
	}, time.Minute+runWallTime)
	m.execute()

	res := m.cancelledResult()
	if res.State != vocab.JobCancelled || res.AllocationID != mockAllocID || res.RunID != mockRunID ||
		res.Detail != "cancelled by temporal: job workflow cancelled" {
		t.Fatalf("result %+v, want cancelled on %s", res, mockAllocID)
	}
	m.wantCalls("LoadJob", "MarkRunning", "MarkRunning", "FinishRun")
	for i := range 2 {
		if in := m.call("MarkRunning", i).(activities.MarkRunningInput); in.JobID != mockJobID || in.AllocationID != mockAllocID {
			t.Fatalf("MarkRunning call %d input %+v", i, in)
		}
	}
	m.wantCancelledRun(0)
}

func TestJobWorkflowMockedTemporalCancelDuringReloadReleasesNewAllocation(t *testing.T) {
	// A preemption stops the run and the scheduler grants a new allocation;
	// Temporal cancels the workflow while the job is reloaded for the next
	// run: the new allocation, which never got a run, is released
	// (cancelled, which cancels the job in the store).
	m := newMockedJob(t, waitingJob())
	m.loadGate, m.loadGateCall = make(chan struct{}), 1
	second := mockPlaced
	second.AllocationID = "alloc-2"
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.signalAndEndRun(time.Minute+runWallTime, temporalx.SignalPreempt, notice)
	m.signalAt(time.Hour, temporalx.SignalPlaced, second)
	m.RegisterDelayedCallback(func() {
		m.CancelWorkflow()
		close(m.loadGate)
	}, time.Hour+runWallTime)
	m.execute()

	res := m.cancelledResult()
	if res.State != vocab.JobCancelled || res.AllocationID != "alloc-2" {
		t.Fatalf("result %+v, want cancelled holding alloc-2", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "LoadJob", "ReleasePlacement")
	in := m.call("ReleasePlacement", 0).(activities.ReleasePlacementInput)
	if in.JobID != mockJobID || in.AllocationID != "alloc-2" || in.Outcome != vocab.RunCancelled ||
		in.Detail != "cancelled by temporal: job workflow cancelled" || in.SchedulerWorkflowID != schedulerID {
		t.Fatalf("ReleasePlacement input %+v, want alloc-2 released cancelled", in)
	}
}

func TestJobWorkflowMockedTemporalCancelDuringReloadAfterAbortFinishesRun(t *testing.T) {
	// A preemption stops the run and is aborted: the job keeps its
	// allocation and is reloaded to run again. Temporal cancels the workflow
	// during that reload: the stopped run, which still holds the allocation,
	// ends cancelled (FinishRun releases it).
	m := newMockedJob(t, waitingJob())
	m.loadGate, m.loadGateCall = make(chan struct{}), 1
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.signalAndEndRun(time.Minute+runWallTime, temporalx.SignalPreempt, notice)
	m.signalAt(time.Hour, temporalx.SignalPreemptAborted, temporalx.PreemptAbortedSignal{PreemptionID: "pre-1"})
	m.RegisterDelayedCallback(func() {
		m.CancelWorkflow()
		close(m.loadGate)
	}, time.Hour+runWallTime)
	m.execute()

	res := m.cancelledResult()
	if res.State != vocab.JobCancelled || res.AllocationID != mockAllocID || res.RunID != mockRunID {
		t.Fatalf("result %+v, want cancelled run on %s", res, mockAllocID)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "LoadJob", "FinishRun")
	m.wantCancelledRun(0)
}

func TestJobWorkflowMockedTemporalCancelDuringFirstLoadCancelsJob(t *testing.T) {
	// Temporal cancels the workflow while it first reads its job: the job is
	// cancelled in the store and read again; a cycle had placed it, so the
	// workflow waits for the `placed` signal and releases that allocation.
	m := newMockedJob(t, waitingJob(), placedJob())
	m.loadGate, m.loadGateCall = make(chan struct{}), 0
	m.RegisterDelayedCallback(func() {
		m.CancelWorkflow()
		close(m.loadGate)
	}, runWallTime)
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.execute()

	res := m.cancelledResult()
	if res.State != vocab.JobCancelled || res.AllocationID != mockAllocID || res.RunID != "" {
		t.Fatalf("result %+v, want cancelled holding %s without a run", res, mockAllocID)
	}
	m.wantCalls("LoadJob", "CancelJob", "LoadJob", "ReleasePlacement")
	if in := m.call("CancelJob", 0).(activities.CancelJobInput); in.JobID != mockJobID || in.Actor != "temporal" {
		t.Fatalf("CancelJob input %+v", in)
	}
	if in := m.call("ReleasePlacement", 0).(activities.ReleasePlacementInput); in.AllocationID != mockAllocID || in.Outcome != vocab.RunCancelled {
		t.Fatalf("ReleasePlacement input %+v", in)
	}
}

func TestJobWorkflowMockedTemporalCancelDuringFinishRunRetriesIt(t *testing.T) {
	// The run succeeded; Temporal cancels the workflow while FinishRun
	// records it: FinishRun runs again, disconnected (a no-op when the first
	// one committed), so the allocation is released.
	m := newMockedJob(t, waitingJob())
	gate := make(chan struct{})
	m.finishRunGate = gate
	m.signalAt(time.Minute, temporalx.SignalPlaced, mockPlaced)
	m.RegisterDelayedCallback(func() { m.endRun(succeededRun) }, time.Minute+runWallTime)
	m.RegisterDelayedCallback(func() {
		m.CancelWorkflow()
		close(gate)
	}, time.Minute+3*runWallTime)
	m.execute()

	if res := m.jobResult(t); res.State != vocab.JobSucceeded || res.Step != 60 {
		t.Fatalf("result %+v, want succeeded at step 60", res)
	}
	m.wantCalls("LoadJob", "MarkRunning", executor.RunActivityName, "FinishRun", "FinishRun")
	for i := range 2 {
		if in := m.call("FinishRun", i).(activities.FinishRunInput); in.RunID != mockRunID || in.Outcome != vocab.RunSucceeded {
			t.Fatalf("FinishRun call %d input %+v, want run %s succeeded", i, in, mockRunID)
		}
	}
}
