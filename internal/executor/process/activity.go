package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// StopShutdown is the StopReason of a process stopped because its node agent
// is shutting down (SIGTERM to the agent, a worker stop): the run is not
// cancelled, so the activity fails retryably and the next attempt, on the
// restarted agent, resumes from the checkpoint the job saved on the way out.
const StopShutdown StopReason = "agent-shutdown"

// Defaults of ProcessActivity.
const (
	// DefaultCheckpointRecordTimeout bounds one call to the checkpoint
	// recorder, well under JobWorkflow's 30 s heartbeat timeout because
	// recording happens between heartbeats.
	DefaultCheckpointRecordTimeout = 10 * time.Second
	// finalRecordAttempts is how often the run's last checkpoint is offered to
	// the recorder after the process ended, one second apart: the process is
	// gone, so failing the attempt (and rerunning the job) is no remedy.
	finalRecordAttempts = 3
	// detailTailBytes is how much of the job's output a failed run's Detail
	// quotes.
	detailTailBytes = 2 << 10
)

// ErrRunNotFound is wrapped by a RunSpecSource's error when the run does not
// exist or is not placed on the asking node; retrying cannot help.
var ErrRunNotFound = errors.New("run not found")

// RunSpec is what the process activity needs beyond executor.RunInput to
// start a run: the job's command and environment, and the checkpoint to
// resume from.
type RunSpec struct {
	JobID   string
	Command []string          // program and arguments; empty for a simulated job, which no node agent can run
	Env     map[string]string // the job's extra environment
	// ResumeFrom is the job's last valid checkpoint; nil when it has none.
	ResumeFrom *scheduling.Checkpoint
	// Ended is true when the run has already finished: a late attempt must
	// not start it again.
	Ended bool
}

// RunSpecSource looks up a run's spec for the node agent of node. The agent's
// implementation asks the gpugov API (GET /v1/nodes/{node}/runs/{run}), since
// agents have no database access. An error wrapping ErrRunNotFound is final;
// any other error is taken as transient and the activity attempt is retried.
type RunSpecSource interface {
	RunSpec(ctx context.Context, node, runID string) (*RunSpec, error)
}

// ProcessActivity runs a job's run as a local process on a node agent: it is
// the node agent's implementation of the run activity (executor.RunActivityName,
// same input, result and heartbeat details as executor.SimulatedExecutor), so
// JobWorkflow is the same whether a pool's runs are simulated or real.
//
// A run activity cancellation is the workflow's preemption or cancel notice:
// the process gets SIGTERM, the grace period, then SIGKILL, and the result
// (vocab.RunCancelled) carries the checkpoint it saved. A worker shutdown is
// not a cancellation: the process is stopped the same way, but the attempt
// fails retryably so that the run resumes on the restarted agent. Every new
// checkpoint the job reports is heartbeated (a retried attempt resumes from
// it) and given to Checkpoints (the job's recovery evidence in the store,
// which preemption and the next run read).
type ProcessActivity struct {
	Executor    *Executor                   // runs the process; required
	Node        string                      // the node this agent runs; runs placed elsewhere are refused
	Specs       RunSpecSource               // the runs' commands; required
	Checkpoints executor.CheckpointRecorder // records the runs' checkpoints; required
	// CheckpointRecordTimeout bounds one Checkpoints call; 0 means
	// DefaultCheckpointRecordTimeout.
	CheckpointRecordTimeout time.Duration
	Logger                  *slog.Logger // nil means slog.Default()
}

// Run executes one run attempt. It returns a result for every way the job's
// process ends (succeeded, failed, cancelled). It returns a non-retryable
// error when the run cannot be run at all (input for another node, an unknown
// or finished run, no command, a program not found, an invalid spec), and a
// retryable one when the spec cannot be fetched now, the process cannot be
// started for a transient reason, or the agent is shutting down.
func (a *ProcessActivity) Run(ctx context.Context, in *executor.RunInput) (*executor.RunResult, error) {
	if err := a.checkInput(in); err != nil {
		return nil, nonRetryable("InvalidRunInput", err)
	}
	spec, err := a.fetchSpec(ctx, in)
	if err != nil {
		return nil, interrupted(ctx, in, err)
	}
	res, resume, err := resumePoint(ctx, in, spec)
	if err != nil {
		return nil, err
	}
	r := &attemptRun{a: a, ctx: ctx, in: in, log: a.logger().With("job", in.JobID, "run", in.RunID),
		startStep: res.StartStep}
	if spec.ResumeFrom != nil {
		r.recorded = spec.ResumeFrom.Step
	}
	runCtx, stop := stopContext(ctx)
	defer stop()
	out, err := a.Executor.Run(runCtx, &Spec{
		JobID: in.JobID, RunID: in.RunID, Command: spec.Command, Env: spec.Env,
		GPUUUIDs: gpuUUIDs(in.GPUs), ResumeFrom: resume,
	}, r.progress)
	if err != nil {
		return cancelledBeforeStart(runCtx, in, res, err)
	}
	return r.result(res, out)
}

// interrupted returns err, unless the activity's context ended while the
// spec was fetched: then the attempt stopped for that reason instead — a
// retryable stop when the worker is stopping, the context's error (which
// Temporal reports as a cancellation or timeout) otherwise.
func interrupted(ctx context.Context, in *executor.RunInput, err error) error {
	switch {
	case isClosed(activity.GetWorkerStopChannel(ctx)):
		return fmt.Errorf("agent stopping before job %s run %s started: %w", in.JobID, in.RunID, err)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

// cancelledBeforeStart answers an Executor.Run error: a cancelled result
// when the run was cancelled before its process started, else the start
// error classified by startError.
func cancelledBeforeStart(runCtx context.Context, in *executor.RunInput, res *executor.RunResult, err error) (*executor.RunResult, error) {
	var reason StopReason
	if errors.As(context.Cause(runCtx), &reason) && (reason == StopPreemption || reason == StopCancel) {
		res.Step, res.Outcome = res.StartStep, vocab.RunCancelled
		res.Detail = fmt.Sprintf("stopped by %s before the process started (at step %d)", reason, res.StartStep)
		return res, nil
	}
	return nil, startError(runCtx, in, err)
}

// isClosed reports whether ch is closed, without blocking.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// checkInput rejects input that no attempt could run on this agent.
func (a *ProcessActivity) checkInput(in *executor.RunInput) error {
	switch {
	case in == nil:
		return errors.New("run input is nil")
	case in.JobID == "" || in.RunID == "":
		return errors.New("run input needs a job ID and a run ID")
	case in.StartStep < 0:
		return fmt.Errorf("negative start step %d", in.StartStep)
	case in.Node != "" && in.Node != a.Node:
		return fmt.Errorf("run %s is placed on node %s, but this is the agent of node %s", in.RunID, in.Node, a.Node)
	}
	return nil
}

// fetchSpec gets the run's spec and checks it may be run.
func (a *ProcessActivity) fetchSpec(ctx context.Context, in *executor.RunInput) (*RunSpec, error) {
	spec, err := a.Specs.RunSpec(ctx, a.Node, in.RunID)
	switch {
	case errors.Is(err, ErrRunNotFound):
		return nil, nonRetryable("RunNotFound", fmt.Errorf("run %s of job %s on node %s: %w", in.RunID, in.JobID, a.Node, err))
	case err != nil:
		return nil, fmt.Errorf("fetch the spec of run %s: %w", in.RunID, err)
	case spec.JobID != in.JobID:
		return nil, nonRetryable("InvalidRunInput", fmt.Errorf("run %s belongs to job %s, not %s", in.RunID, spec.JobID, in.JobID))
	case spec.Ended:
		return nil, nonRetryable("RunEnded", fmt.Errorf("run %s of job %s has already ended", in.RunID, in.JobID))
	case len(spec.Command) == 0:
		return nil, nonRetryable("NoCommand", fmt.Errorf("job %s has no command: a simulated job cannot run on a node agent", in.JobID))
	}
	return spec, nil
}

// resumePoint decides where this attempt starts. The base is the job's last
// valid checkpoint (spec.ResumeFrom), which must cover in.StartStep: the
// workflow started the run there. When an earlier attempt of this run
// heartbeated (its agent crashed or stopped), its last checkpoint is used if
// newer, and the work past it is counted as recompute.
func resumePoint(ctx context.Context, in *executor.RunInput, spec *RunSpec) (*executor.RunResult, *scheduling.Checkpoint, error) {
	resume := spec.ResumeFrom
	if in.StartStep > 0 && (resume == nil || resume.Step < in.StartStep) {
		return nil, nil, nonRetryable("NoResumeCheckpoint", fmt.Errorf(
			"run %s resumes job %s at step %d, but no checkpoint of that step is recorded", in.RunID, in.JobID, in.StartStep))
	}
	lost := lostAttempt(ctx)
	if lost != nil && lost.LastCheckpoint != nil && (resume == nil || lost.LastCheckpoint.Step > resume.Step) {
		resume = lost.LastCheckpoint
	}
	res := &executor.RunResult{StartStep: in.StartStep}
	if resume != nil {
		res.StartStep, res.LastCheckpoint = resume.Step, resume
	}
	if lost != nil {
		res.ResumedAfterCrash = true
		res.RecomputeSteps = max(lost.Step-res.StartStep, 0)
	}
	return res, resume, nil
}

// lostAttempt returns the last progress an earlier attempt of this run
// heartbeated, or nil when this is the first attempt (or its details cannot
// be read).
func lostAttempt(ctx context.Context) *executor.Progress {
	if !activity.HasHeartbeatDetails(ctx) {
		return nil
	}
	var p executor.Progress
	if err := activity.GetHeartbeatDetails(ctx, &p); err != nil {
		activity.GetLogger(ctx).Warn("unreadable heartbeat details; resuming from the recorded checkpoint", "error", err)
		return nil
	}
	return &p
}

// gpuUUIDs lists the allocation's GPUs for CUDA_VISIBLE_DEVICES. A GPU share
// (milli < 1000) shows the whole device: isolating shares (MPS, MIG,
// time-slicing) is the node's configuration, not the executor's.
func gpuUUIDs(gpus []scheduling.GPUShare) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.UUID
	}
	return out
}

// stopContext returns the context the process runs under: it survives the
// activity context's end so that a stopped job's final checkpoint is still
// collected, and it ends — with the StopReason as cause — when the activity
// is cancelled (StopPreemption: a preemption or cancel notice), times out
// (StopDeadline) or its worker begins to stop (StopShutdown, at once, so the
// job's grace period fits in the worker's stop timeout).
func stopContext(ctx context.Context) (context.Context, func()) {
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stopping := activity.GetWorkerStopChannel(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case <-stopping:
			cancel(StopShutdown)
		case <-ctx.Done():
			cancel(activityStopReason(ctx, stopping))
		case <-done:
		}
	}()
	return runCtx, func() { close(done); cancel(nil) }
}

// activityStopReason says why the activity context ended. The SDK cancels a
// stopping worker's activities too, so a closed stop channel wins.
func activityStopReason(ctx context.Context, stopping <-chan struct{}) StopReason {
	if isClosed(stopping) {
		return StopShutdown
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return StopDeadline
	}
	return StopPreemption
}

// startError classifies an error of Executor.Run, which fails only when the
// process could not be started.
func startError(runCtx context.Context, in *executor.RunInput, err error) error {
	var reason StopReason
	if errors.As(context.Cause(runCtx), &reason) && reason == StopShutdown {
		return fmt.Errorf("agent stopping before job %s run %s started: %w", in.JobID, in.RunID, err)
	}
	if errors.Is(err, ErrInvalidSpec) || errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) ||
		errors.Is(err, fs.ErrPermission) {
		return nonRetryable("CannotStart", err)
	}
	return err
}

// attemptRun is the state of one attempt while its process runs.
type attemptRun struct {
	a         *ProcessActivity
	ctx       context.Context // the activity's context
	in        *executor.RunInput
	log       *slog.Logger
	startStep int64
	recorded  int64 // step of the newest checkpoint the recorder has accepted (or the store had)
	refused   int64 // step of the newest checkpoint the recorder refused as evidence (not offered again)
}

// progress heartbeats the process's progress and records a new checkpoint.
// Heartbeats go on after a cancellation, while the job saves within its
// grace period, so the run is not mistaken for a crashed one.
func (r *attemptRun) progress(p Progress) {
	hb := executor.Progress{Step: max(p.Step, r.startStep), LastCheckpoint: p.LastCheckpoint}
	activity.RecordHeartbeat(context.WithoutCancel(r.ctx), hb)
	if cp := p.LastCheckpoint; cp != nil && cp.Step > r.recorded && cp.Step > r.refused {
		if err := r.record(*cp); errors.Is(err, executor.ErrCheckpointRefused) {
			r.log.Warn("checkpoint refused as evidence; not offered again", "step", cp.Step, "error", err)
		} else if err != nil {
			// The next progress call (at least every heartbeat interval) tries again.
			r.log.Warn("cannot record checkpoint yet", "step", cp.Step, "error", err)
		}
	}
}

// record gives cp to the recorder, bounded in time, and remembers it: as
// recorded, or as refused (executor.ErrCheckpointRefused) so that it is not
// offered again.
func (r *attemptRun) record(cp scheduling.Checkpoint) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), orDefault(r.a.CheckpointRecordTimeout, DefaultCheckpointRecordTimeout))
	defer cancel()
	if err := r.a.Checkpoints.RecordCheckpoint(ctx, r.in.JobID, r.in.RunID, cp); err != nil {
		if errors.Is(err, executor.ErrCheckpointRefused) {
			r.refused = max(r.refused, cp.Step)
		}
		return err
	}
	r.recorded = cp.Step
	return nil
}

// flush records the run's last checkpoint if the recorder has not accepted
// it yet, trying a few times; it returns the last error.
func (r *attemptRun) flush(cp *scheduling.Checkpoint) error {
	if cp == nil || cp.Step <= r.recorded {
		return nil
	}
	var err error
	for i := range finalRecordAttempts {
		if i > 0 {
			time.Sleep(time.Second)
		}
		if err = r.record(*cp); err == nil || errors.Is(err, executor.ErrCheckpointRefused) {
			return err
		}
	}
	return err
}

// result turns the process's Outcome into the activity's answer.
func (r *attemptRun) result(res *executor.RunResult, out *Outcome) (*executor.RunResult, error) {
	res.Step = max(out.LastStep, res.StartStep)
	if out.LastCheckpoint != nil {
		res.LastCheckpoint = out.LastCheckpoint
	}
	var notes []string
	if err := r.flush(res.LastCheckpoint); err != nil {
		r.log.Error("the run's last checkpoint could not be recorded; the next run resumes from an older one",
			"step", res.LastCheckpoint.Step, "error", err)
		notes = append(notes, fmt.Sprintf("checkpoint of step %d not recorded: %v", res.LastCheckpoint.Step, err))
	}
	if out.Started {
		from := out.StartedFromStep
		res.ReportedStartStep = &from
	}
	if out.Started && out.StartedFromStep != res.StartStep {
		notes = append(notes, fmt.Sprintf("the job reported starting at step %d, not at the checkpoint's step %d", out.StartedFromStep, res.StartStep))
	}
	if out.BadStatusLines > 0 {
		notes = append(notes, fmt.Sprintf("%d bad status lines", out.BadStatusLines))
	}
	switch out.StoppedBy {
	case StopShutdown:
		return nil, fmt.Errorf("agent stopping: job %s run %s stopped at step %d (checkpoint %s); the next attempt resumes",
			r.in.JobID, r.in.RunID, res.Step, checkpointText(res.LastCheckpoint))
	case StopDeadline:
		return nil, fmt.Errorf("job %s run %s passed its start-to-close timeout at step %d", r.in.JobID, r.in.RunID, res.Step)
	case "":
	default:
		res.Outcome = vocab.RunCancelled
		res.Detail = withNotes(fmt.Sprintf("stopped by %s at step %d, %s; last checkpoint %s",
			out.StoppedBy, res.Step, graceText(out), checkpointText(res.LastCheckpoint)), notes)
		return res, nil
	}
	if out.Succeeded {
		res.Outcome = vocab.RunSucceeded
		res.Detail = withNotes(fmt.Sprintf("process exited 0 at step %d (started at step %d)", res.Step, res.StartStep), notes)
		return res, nil
	}
	res.Outcome = vocab.RunFailed
	res.Detail = withNotes(fmt.Sprintf("process %s at step %d (started at step %d)", exitText(out), res.Step, res.StartStep), notes) +
		"\noutput tail:\n" + tailOf(out.OutputTail, detailTailBytes)
	return res, nil
}

func exitText(out *Outcome) string {
	if out.Signal != "" {
		return "killed by " + out.Signal
	}
	return fmt.Sprintf("exited with code %d", out.ExitCode)
}

func graceText(out *Outcome) string {
	if out.ExitedWithinGrace {
		return fmt.Sprintf("exited with code %d within its grace period after %s",
			out.ExitCode, out.EndedAt.Sub(out.StopRequestedAt).Round(time.Millisecond))
	}
	return "killed after its grace period"
}

func checkpointText(cp *scheduling.Checkpoint) string {
	if cp == nil {
		return "none"
	}
	return fmt.Sprintf("step %d at %s", cp.Step, cp.Location)
}

func withNotes(detail string, notes []string) string {
	if len(notes) == 0 {
		return detail
	}
	return detail + " (" + strings.Join(notes, "; ") + ")"
}

// tailOf is the last n bytes of s, starting at a character boundary.
func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[len(s)-n:], "")
}

// nonRetryable wraps err as a non-retryable application error of type typ.
func nonRetryable(typ string, err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), typ, err)
}

func (a *ProcessActivity) logger() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}
