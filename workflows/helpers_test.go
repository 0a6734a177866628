package workflows_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
	"github.com/gpugov/gpugov/workflows"
)

const (
	testPool  = "p1"
	testQueue = "train" // storetest.TrainQueue
)

// testNode is the one node of pool p1.
var testNode = storetest.NodeName(testPool, 0)

// gpuUUID is the UUID of GPU i of testNode.
func gpuUUID(i int) string { return storetest.GPUName(testPool, 0, i) }

// newStore opens a store on a fresh database holding pool p1 (one node of
// gpus whole GPUs, stage observe) and queue "train" (standard tier).
func newStore(t testing.TB, gpus int) *store.Store {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools:  []scheduling.Pool{storetest.Pool(testPool, vocab.StageObserve, 1, gpus)},
		Queues: []scheduling.Queue{storetest.TrainQueue},
	})
	return st
}

// jobSpec is what submitJob stores.
type jobSpec struct {
	gpus               int
	runSeconds         float64
	checkpointInterval int64 // 0: not checkpointable
}

// submitJob stores a job in p1.
func submitJob(t testing.TB, st *store.Store, spec jobSpec) *store.Job {
	t.Helper()
	return storetest.Submit(t, st, &store.NewJob{
		Project: "vision", Queue: testQueue, Tier: vocab.TierStandard, RunSeconds: spec.runSeconds,
		Request:  scheduling.ResourceRequest{GPUs: spec.gpus, Pool: testPool},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: spec.checkpointInterval > 0, CheckpointIntervalSeconds: spec.checkpointInterval},
	})
}

// placeJob grants job GPU 0 through a hand-written cycle, as the scheduler
// would, and returns the `placed` signal the scheduler would send.
func placeJob(t testing.TB, st *store.Store, jobID string) temporalx.PlacedSignal {
	t.Helper()
	out := storetest.Place(t, st, "test-cycle-"+jobID, time.Now(),
		storetest.Placement(jobID, testPool, testNode, scheduling.MilliPerGPU, gpuUUID(0)))
	p := out.Placed[0]
	return temporalx.PlacedSignal{AllocationID: p.AllocationID, CycleID: out.CycleID, Pool: p.Pool, Node: p.Node, GPUs: p.GPUs}
}

// quietLogger logs warnings and errors only, so test output stays readable.
func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// allocationReleased reports whether the allocation's GPUs were given back.
func allocationReleased(t testing.TB, st *store.Store, allocationID string) bool {
	t.Helper()
	var released bool
	err := st.Pool().QueryRow(context.Background(),
		`SELECT released_at IS NOT NULL FROM allocations WHERE id = $1`, allocationID).Scan(&released)
	if err != nil {
		t.Fatal(err)
	}
	return released
}

// countRows runs a one-value count query.
func countRows(t testing.TB, st *store.Store, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// jobState reads the job's stored state.
func jobState(t testing.TB, st *store.Store, jobID string) vocab.JobState {
	t.Helper()
	j, err := st.GetJob(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	return j.State
}

// fastExecutor is the simulated executor at 1000 steps per second, recording
// checkpoints in st.
func fastExecutor(rec executor.CheckpointRecorder) *executor.SimulatedExecutor {
	return &executor.SimulatedExecutor{Checkpoints: rec, SpeedFactor: 1000, HeartbeatInterval: 5 * time.Millisecond}
}

// testEnv is a testsuite environment with gpugov's workflows and real
// activities on st, and what the workflow under test did at the Temporal
// boundary: search-attribute upserts and signals to other workflows.
type testEnv struct {
	*testsuite.TestWorkflowEnvironment
	mu       sync.Mutex
	states   []string // GpugovJobState values upserted, in order
	reasons  []string // GpugovWaitReason values upserted ("" = unset), in order
	expAttrs []string // GpugovExperimentState values upserted, with GpugovPool when set ("running@p1"), in order
	signals  []sentSignal
	failSend map[string]error // by target workflow ID
}

type sentSignal struct {
	WorkflowID, Name string
	Arg              any
}

// newTestEnv registers workflows, activities (store st, no Temporal client),
// and run, the executor's run activity (the simulated executor when nil).
func newTestEnv(t *testing.T, st *store.Store, run any) *testEnv {
	return newTestEnvWith(t, activities.Deps{Store: st}, run)
}

// newTestEnvWith is newTestEnv with the activities' dependencies given.
func newTestEnvWith(t *testing.T, deps activities.Deps, run any) *testEnv {
	st := deps.Store.(*store.Store)
	return newWorkflowEnv(func(env *testEnv) {
		if deps.Waker == nil {
			deps.Waker = env
		}
		if deps.Temporal == nil {
			deps.Temporal = envSignaler{env}
		}
		workflows.RegisterServiceWorker(env, deps)
		if run == nil {
			workflows.RegisterSimExecutorWorker(env, fastExecutor(st))
		} else {
			env.RegisterActivityWithOptions(run, activity.RegisterOptions{Name: executor.RunActivityName})
		}
	})
}

// newWorkflowEnv is a testsuite environment with what register registers
// (the test environment takes registrations only before any mock) that
// records search-attribute upserts and signals to other workflows.
func newWorkflowEnv(register func(*testEnv)) *testEnv {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(quietLogger())
	env := &testEnv{TestWorkflowEnvironment: suite.NewTestWorkflowEnvironment(), failSend: map[string]error{}}
	env.SetTestTimeout(2 * time.Minute)
	register(env)
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		env.mu.Lock()
		defer env.mu.Unlock()
		if v, ok := sa.GetKeyword(temporalx.JobStateKey); ok {
			env.states = append(env.states, v)
		}
		if v, ok := sa.GetKeyword(temporalx.WaitReasonKey); ok {
			env.reasons = append(env.reasons, v)
		}
		if v, ok := sa.GetKeyword(temporalx.ExperimentStateKey); ok {
			if pool, ok := sa.GetKeyword(temporalx.PoolKey); ok {
				v += "@" + pool
			}
			env.expAttrs = append(env.expAttrs, v)
		}
		if sa.Size() == 0 {
			// SearchAttributes hides unset keys; the wait reason is the only
			// attribute JobWorkflow ever unsets.
			env.reasons = append(env.reasons, "")
		}
	}).Maybe()
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", mock.Anything, mock.Anything).Return(
		func(_, workflowID, _, name string, arg any) error {
			env.mu.Lock()
			defer env.mu.Unlock()
			if err := env.failSend[workflowID]; err != nil {
				return err
			}
			env.signals = append(env.signals, sentSignal{workflowID, name, arg})
			return nil
		}).Maybe()
	return env
}

// envSignaler is the test environment as activities.Signaler: it records a
// client signal sent by an activity (the scheduler's placed and wait-reason
// signals) like a SignalExternalWorkflow command, failing as failSend says.
type envSignaler struct{ *testEnv }

func (e envSignaler) SignalWorkflow(_ context.Context, workflowID, _, name string, arg any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.failSend[workflowID]; err != nil {
		return err
	}
	e.signals = append(e.signals, sentSignal{workflowID, name, arg})
	return nil
}

// Wake records a scheduler wake-up asked for by an activity as a signal
// sent (without payload): activities.Waker.
func (e *testEnv) Wake(workflowID, signal string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.signals = append(e.signals, sentSignal{WorkflowID: workflowID, Name: signal})
}

func (e *testEnv) sent() []sentSignal {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sentSignal(nil), e.signals...)
}

func (e *testEnv) upserted() (states, reasons []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.states...), append([]string(nil), e.reasons...)
}

// jobResult returns the finished JobWorkflow's result, failing the test on a
// workflow error.
func (e *testEnv) jobResult(t *testing.T) *workflows.JobResult {
	t.Helper()
	if !e.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := e.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	var res workflows.JobResult
	if err := e.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// signalAt sends a signal after d of workflow time.
func (e *testEnv) signalAt(d time.Duration, name string, arg any) {
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(name, arg) }, d)
}

// decodeDetails reads an error's details into v.
func decodeDetails(t *testing.T, d interface{ Details(...any) error }, v any) {
	t.Helper()
	if err := d.Details(v); err != nil {
		t.Fatalf("error details: %v", err)
	}
}
