package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// runBook stands in for what the agent reaches over HTTP — the store's run
// specs and checkpoints (GET /v1/nodes/{name}/runs/{run}, POST
// …/checkpoints) — with the store's rule that a job's last checkpoint only
// moves forward. The HTTP client against the real API and store is tested in
// internal/inventory/httpreport, and the whole chain in cmd/gpugov's agent test.
type runBook struct {
	mu       sync.Mutex
	specs    map[string]*RunSpec // by run ID
	recorded []int64             // steps recorded, in order
	fetchErr error               // returned by RunSpec when set
	failRec  int                 // the next failRec RecordCheckpoint calls fail
}

func (b *runBook) RunSpec(_ context.Context, node, runID string) (*RunSpec, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fetchErr != nil {
		return nil, b.fetchErr
	}
	s, ok := b.specs[runID]
	if !ok || node != "test-node" {
		return nil, fmt.Errorf("run %s on node %s: %w", runID, node, ErrRunNotFound)
	}
	cp := *s
	return &cp, nil
}

func (b *runBook) RecordCheckpoint(_ context.Context, jobID, runID string, cp scheduling.Checkpoint) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failRec > 0 {
		b.failRec--
		return errors.New("API unreachable")
	}
	s, ok := b.specs[runID]
	if !ok || s.JobID != jobID {
		return fmt.Errorf("run %s of job %s: %w", runID, jobID, ErrRunNotFound)
	}
	if s.ResumeFrom == nil || cp.Step >= s.ResumeFrom.Step {
		s.ResumeFrom = &cp
	}
	b.recorded = append(b.recorded, cp.Step)
	return nil
}

func (b *runBook) steps() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.recorded...)
}

// activityEnv is a TestActivityEnvironment with a ProcessActivity of node
// "test-node" registered and its heartbeats recorded.
type activityEnv struct {
	*testsuite.TestActivityEnvironment
	act        *ProcessActivity
	book       *runBook
	mu         sync.Mutex
	heartbeats []executor.Progress
}

func newActivityEnv(t *testing.T, book *runBook, opts worker.Options) *activityEnv {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	env := &activityEnv{TestActivityEnvironment: s.NewTestActivityEnvironment(), book: book}
	env.act = &ProcessActivity{
		Executor: &Executor{CheckpointRoot: t.TempDir(), PollInterval: 10 * time.Millisecond,
			HeartbeatInterval: 50 * time.Millisecond, GracePeriod: 10 * time.Second, Logger: log},
		Node: "test-node", Specs: book, Checkpoints: book, Logger: log,
	}
	env.SetWorkerOptions(opts)
	env.SetTestTimeout(testTimeout)
	env.RegisterActivityWithOptions(env.act.Run, activity.RegisterOptions{Name: executor.RunActivityName})
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var p executor.Progress
		if err := details.Get(&p); err != nil {
			t.Errorf("heartbeat details: %v", err)
		}
		env.mu.Lock()
		env.heartbeats = append(env.heartbeats, p)
		env.mu.Unlock()
	})
	return env
}

// run executes the activity and decodes its result.
func (env *activityEnv) run(t *testing.T, in *executor.RunInput) (*executor.RunResult, error) {
	t.Helper()
	val, err := env.ExecuteActivity(executor.RunActivityName, in)
	if err != nil {
		return nil, err
	}
	var res executor.RunResult
	if err := val.Get(&res); err != nil {
		t.Fatalf("decode result: %v", err)
	}
	return &res, nil
}

func (env *activityEnv) beats() []executor.Progress {
	env.mu.Lock()
	defer env.mu.Unlock()
	return append([]executor.Progress(nil), env.heartbeats...)
}

// bookWith returns a runBook holding run r-1 of job job with the trainer and args.
func bookWith(job string, args ...string) *runBook {
	return &runBook{specs: map[string]*RunSpec{"r-1": {JobID: job, Command: append([]string{trainerBin}, args...)}}}
}

// runInput is run r-1 of job on two GPUs of test-node.
func runInput(job string) *executor.RunInput {
	return &executor.RunInput{JobID: job, RunID: "r-1", AllocationID: "a-1", Node: "test-node",
		GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}, {UUID: "GPU-bbbb", Milli: 1000}}}
}

func TestActivityRunsProcessToCompletion(t *testing.T) {
	envFile := filepath.Join(t.TempDir(), "env.json")
	book := bookWith("job-ok", "-steps", "10", "-checkpoint-every", "5", "-env-file", envFile)
	book.specs["r-1"].Env = map[string]string{"TRAINER_EXTRA": "yes"}
	env := newActivityEnv(t, book, worker.Options{})
	res, err := env.run(t, runInput("job-ok"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunSucceeded || res.Step != 10 || res.StartStep != 0 || res.ResumedAfterCrash {
		t.Fatalf("result = %+v, want succeeded 0→10", res)
	}
	if res.LastCheckpoint == nil || res.LastCheckpoint.Step != 10 {
		t.Fatalf("last checkpoint = %+v, want step 10", res.LastCheckpoint)
	}
	if got := book.steps(); len(got) != 2 || got[0] != 5 || got[1] != 10 {
		t.Errorf("recorded checkpoints %v, want [5 10]", got)
	}
	// The SDK sends the first heartbeat at once and batches the rest (30 s
	// without a heartbeat timeout), so the first is what a test sees.
	if beats := env.beats(); len(beats) == 0 || beats[0].Step != 0 {
		t.Errorf("heartbeats %+v, want a first one at step 0", beats)
	}
	var seen map[string]string
	data, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &seen); err != nil {
		t.Fatal(err)
	}
	if seen["CUDA_VISIBLE_DEVICES"] != "GPU-aaaa,GPU-bbbb" || seen["TRAINER_EXTRA"] != "yes" || seen["GPUGOV_RESUME_FROM"] != "" {
		t.Errorf("job environment = %v", seen)
	}
}

func TestActivityCancellationStopsGracefullyWithCheckpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	book := bookWith("job-pre", "-steps", "1000000", "-step-interval", "5ms")
	env := newActivityEnv(t, book, worker.Options{BackgroundActivityContext: ctx})
	// The preemption notice comes while the job runs (200 steps per second).
	time.AfterFunc(300*time.Millisecond, cancel)
	res, err := env.run(t, runInput("job-pre"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunCancelled || !strings.Contains(res.Detail, "within its grace period") {
		t.Fatalf("result = %+v, want cancelled, exited within grace", res)
	}
	cp := res.LastCheckpoint
	if cp == nil || cp.Step < 1 || cp.Step != res.Step || !strings.HasSuffix(cp.Location, fmt.Sprintf("step-%08d.json", cp.Step)) {
		t.Fatalf("checkpoint = %+v at step %d, want the one saved on SIGTERM", cp, res.Step)
	}
	if got := book.steps(); len(got) == 0 || got[len(got)-1] != cp.Step {
		t.Fatalf("recorded %v, want the SIGTERM checkpoint %d recorded", got, cp.Step)
	}
}

func TestActivityWorkerStopIsRetryableAndNextAttemptResumes(t *testing.T) {
	book := bookWith("job-stop", "-steps", "200", "-step-interval", "10ms")
	book.failRec = 1 // the first attempt at recording the SIGTERM checkpoint fails; the flush retries
	env := newActivityEnv(t, book, worker.Options{})
	stop := make(chan struct{})
	env.SetWorkerStopChannel(stop)
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	_, err := env.run(t, runInput("job-stop"))
	var appErr *temporal.ApplicationError
	if err == nil || !strings.Contains(err.Error(), "agent stopping") || (errors.As(err, &appErr) && appErr.NonRetryable()) {
		t.Fatalf("err = %v, want a retryable agent-stopping error", err)
	}
	saved := book.specs["r-1"].ResumeFrom
	if saved == nil || saved.Step < 1 || saved.Step >= 200 {
		t.Fatalf("checkpoint recorded on the way out = %+v, want one saved on SIGTERM", saved)
	}

	// The retried attempt, on the restarted agent, gets the lost attempt's
	// last heartbeat (7 steps past the checkpoint it had not yet seen
	// recorded) and resumes from the recorded checkpoint; the job's started
	// line verifies the resume.
	next := newActivityEnv(t, book, worker.Options{})
	next.act.Executor.CheckpointRoot = env.act.Executor.CheckpointRoot
	next.SetHeartbeatDetails(executor.Progress{Step: saved.Step + 7})
	res, err := next.run(t, runInput("job-stop"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunSucceeded || !res.ResumedAfterCrash || res.StartStep != saved.Step ||
		res.Step != 200 || res.RecomputeSteps != 7 || strings.Contains(res.Detail, "reported starting") {
		t.Fatalf("retry = %+v, want resumed at %d with 7 steps recomputed", res, saved.Step)
	}
}

func TestActivityResumesFromNewerHeartbeatCheckpoint(t *testing.T) {
	// The lost attempt's last checkpoint never reached the store (the API was
	// down when its agent crashed), but it is on the node's disk and in the
	// heartbeat: the retry resumes from it rather than from the start.
	book := bookWith("job-hb", "-steps", "30")
	env := newActivityEnv(t, book, worker.Options{})
	dir := filepath.Join(env.act.Executor.CheckpointRoot, "job-hb", "checkpoints")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "step-00000012.json")
	if err := os.WriteFile(path, []byte(`{"step":12}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env.SetHeartbeatDetails(executor.Progress{Step: 15, LastCheckpoint: &scheduling.Checkpoint{At: time.Now(), Step: 12, Location: path}})
	res, err := env.run(t, runInput("job-hb"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunSucceeded || res.StartStep != 12 || res.RecomputeSteps != 3 || res.Step != 30 ||
		strings.Contains(res.Detail, "reported starting") {
		t.Fatalf("result = %+v, want resumed at 12 with 3 steps recomputed", res)
	}
	if got := book.steps(); len(got) == 0 || got[0] != 12 {
		t.Errorf("recorded %v, want the heartbeat's checkpoint 12 recorded first", got)
	}
}

func TestActivityFailedProcessReportsExitAndOutput(t *testing.T) {
	env := newActivityEnv(t, bookWith("job-fail", "-steps", "3", "-exit-code", "3"), worker.Options{})
	res, err := env.run(t, runInput("job-fail"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != vocab.RunFailed || res.Step != 3 ||
		!strings.Contains(res.Detail, "exited with code 3") || !strings.Contains(res.Detail, "done at step 3") {
		t.Fatalf("result = %+v, want failed with exit code 3 and the output tail", res)
	}
}

func TestActivityRejectsWhatCannotRun(t *testing.T) {
	cases := []struct {
		name      string
		book      *runBook
		in        func(*executor.RunInput)
		retryable bool
		want      string
	}{
		{"program not found", &runBook{specs: map[string]*RunSpec{"r-1": {JobID: "j", Command: []string{"/nonexistent/gpugov-job"}}}},
			nil, false, "no such file"},
		{"simulated job", &runBook{specs: map[string]*RunSpec{"r-1": {JobID: "j"}}}, nil, false, "no command"},
		{"another node's run", bookWith("j"), func(in *executor.RunInput) { in.Node = "other-node" }, false, "placed on node other-node"},
		{"unknown run", bookWith("j"), func(in *executor.RunInput) { in.RunID = "r-9" }, false, "run not found"},
		{"run of another job", bookWith("other-job"), nil, false, "belongs to job other-job"},
		{"ended run", &runBook{specs: map[string]*RunSpec{"r-1": {JobID: "j", Command: []string{trainerBin}, Ended: true}}},
			nil, false, "already ended"},
		{"resume step without checkpoint", bookWith("j"), func(in *executor.RunInput) { in.StartStep = 50 }, false, "no checkpoint of that step"},
		{"API down", &runBook{fetchErr: errors.New("connection refused")}, nil, true, "connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newActivityEnv(t, tc.book, worker.Options{})
			in := runInput("j")
			if tc.in != nil {
				tc.in(in)
			}
			_, err := env.run(t, in)
			var appErr *temporal.ApplicationError
			if err == nil || !errors.As(err, &appErr) || appErr.NonRetryable() == tc.retryable || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want retryable=%v mentioning %q", err, tc.retryable, tc.want)
			}
		})
	}
}
