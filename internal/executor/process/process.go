package process

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

const (
	// outputDrainTimeout bounds the wait for the output pipe to close after
	// the process group is gone; only a descendant that left the group can
	// still hold it.
	outputDrainTimeout = 2 * time.Second
	// unkillableTimeout is when a process group still alive after SIGKILL
	// (stuck in the kernel, e.g. in a GPU driver call) is logged as an error:
	// 60 s, Slurm's default UnkillableStepTimeout.
	unkillableTimeout = 60 * time.Second
)

// StopReason says why the executor stopped a process. It is also an error,
// so that a caller can name the reason as a context's cause:
// cancel(process.StopCancel) on a context from context.WithCancelCause.
type StopReason string

// Stop reasons recorded in Outcome.StoppedBy.
const (
	StopPreemption StopReason = "preemption" // its GPUs are taken for another job; the default for a cancelled context
	StopCancel     StopReason = "cancel"     // the job or run was cancelled by its owner or an operator
	StopDeadline   StopReason = "deadline"   // the context's deadline passed (an activity's start-to-close timeout)
)

// Error describes the stop, so a StopReason can be a context cause.
func (r StopReason) Error() string { return "process stopped by " + string(r) }

// stopReasonOf is the reason recorded when ctx ends: its cause when that is a
// StopReason, else StopDeadline for a deadline and StopPreemption otherwise
// (a cancelled run activity is a preemption notice).
func stopReasonOf(ctx context.Context) StopReason {
	var r StopReason
	if errors.As(context.Cause(ctx), &r) && r != "" {
		return r
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return StopDeadline
	}
	return StopPreemption
}

// Progress is what a running process has reported so far; Run heartbeats it.
type Progress struct {
	// Step is the highest step this run reported (in a started, progress or
	// checkpoint line); 0 before any.
	Step int64
	// LastCheckpoint is the latest valid checkpoint this run reported, else
	// the one it resumed from; nil when there is none.
	LastCheckpoint *scheduling.Checkpoint
	// Started is true once the job wrote its started line.
	Started bool
	// StartedFromStep is the step the job says it started from (the started
	// line's from_step); compare it with the ResumeFrom step to verify a
	// resume.
	StartedFromStep int64
	// At is when the executor last read a valid status line; the process's
	// start time before the first one.
	At time.Time
}

// BadStatusLine is one status-file line the executor rejected.
type BadStatusLine struct {
	Line   int    // 1-based line number in the status file
	Text   string // the line, cut to 256 bytes
	Reason string // why it was rejected
}

// Outcome is how a process ended.
type Outcome struct {
	JobID string
	RunID string
	// ExitCode is the process's exit status; -1 when a signal ended it.
	ExitCode int
	// Signal names the signal that ended the process ("SIGKILL"); "" when it
	// exited.
	Signal string
	// Succeeded is true when the job finished its work: it exited 0 and was
	// not stopped.
	Succeeded bool
	// StoppedBy is why the executor stopped the process; "" when it ended on
	// its own.
	StoppedBy StopReason
	// ExitedWithinGrace is true when a stopped process exited before the grace
	// period ran out; false when it needed SIGKILL (or was not stopped).
	ExitedWithinGrace bool
	// LastCheckpoint is the latest valid checkpoint the run reported, else the
	// one it resumed from; nil when there is none.
	LastCheckpoint *scheduling.Checkpoint
	// Started and StartedFromStep are the job's started line, if it wrote one.
	Started         bool
	StartedFromStep int64
	// LastStep is the highest step the run reported.
	LastStep int64
	// OutputTail is the end of the job's combined stdout and stderr, at most
	// Spec.OutputTailBytes bytes; OutputBytes is how many it wrote in all.
	OutputTail  string
	OutputBytes int64
	// BadStatusLines counts rejected status lines; FirstBadStatusLines holds
	// the first few of them.
	BadStatusLines      int
	FirstBadStatusLines []BadStatusLine
	// StartedAt and EndedAt are when the process started and when its end was
	// seen; StopRequestedAt is when SIGTERM was sent (zero when not stopped),
	// so EndedAt − StopRequestedAt is the time the job took to save and exit.
	StartedAt       time.Time
	StopRequestedAt time.Time
	EndedAt         time.Time
}

// Process is a started job process. Its methods are safe for concurrent use.
type Process struct {
	jobID, runID string
	now          func() time.Time
	log          *slog.Logger
	cmd          *exec.Cmd
	grace        time.Duration
	poll         time.Duration
	startedAt    time.Time
	initial      Progress

	status  *statusReader // owned by the supervisor goroutine
	out     *tailBuffer
	outR    *os.File
	outDone chan struct{} // closed when the output copy ends

	updates    chan Progress // latest unread Progress; capacity 1
	stopOnce   sync.Once
	stopReq    chan struct{} // closed by Stop
	stopReason StopReason    // written before stopReq is closed
	waitErr    error         // cmd.Wait's error, written before exited is closed
	done       chan struct{} // closed when outcome is set
	outcome    *Outcome
}

// stopState is the supervisor's record of a stop.
type stopState struct {
	reason      StopReason // "" until SIGTERM is sent
	requestedAt time.Time
	killed      bool // SIGKILL was sent after the grace period
}

// newProcess wires a started command to its supervisor's state.
func newProcess(e *Executor, spec *Spec, paths runPaths, cmd *exec.Cmd, status, outR *os.File, startedAt time.Time) *Process {
	tail := spec.OutputTailBytes
	if tail == 0 {
		tail = DefaultOutputTailBytes
	}
	p := &Process{
		jobID:     spec.JobID,
		runID:     spec.RunID,
		now:       e.now,
		log:       e.logger().With("job", spec.JobID, "run", spec.RunID, "pid", cmd.Process.Pid),
		cmd:       cmd,
		grace:     orDefault(spec.GracePeriod, orDefault(e.GracePeriod, DefaultGracePeriod)),
		poll:      orDefault(e.PollInterval, DefaultPollInterval),
		startedAt: startedAt,
		out:       newTailBuffer(tail),
		outR:      outR,
		outDone:   make(chan struct{}),
		updates:   make(chan Progress, 1),
		stopReq:   make(chan struct{}),
		done:      make(chan struct{}),
	}
	p.status = newStatusReader(status, paths.checkpointDir, spec.ResumeFrom, startedAt)
	p.initial = p.status.state.progress
	return p
}

// PID is the process's ID, which is also its process group's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Updates delivers the process's Progress each time it changes. Only the
// latest unread one is kept, so a slow reader skips intermediate ones.
func (p *Process) Updates() <-chan Progress { return p.updates }

// Done is closed when the process has ended and its Outcome is ready.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the process has ended and returns its Outcome. The
// Outcome is shared by all callers and must not be modified.
func (p *Process) Wait() *Outcome {
	<-p.done
	return p.outcome
}

// Stop asks for a graceful stop: SIGTERM to the process group, SIGKILL after
// the grace period. It returns at once; Wait for the Outcome. Only the first
// call (or the end of Start's context) counts; an empty reason means
// StopCancel. Stopping a process that has already exited does nothing.
func (p *Process) Stop(reason StopReason) {
	if reason == "" {
		reason = StopCancel
	}
	p.stopOnce.Do(func() {
		p.stopReason = reason
		close(p.stopReq)
	})
}

// supervise runs the process to its end: it polls the status file, turns
// ctx's end into a stop, escalates a stop to SIGKILL after the grace period,
// and builds the Outcome once the leader has exited.
func (p *Process) supervise(ctx context.Context) {
	exited := make(chan struct{})
	go func() {
		p.waitErr = p.cmd.Wait()
		close(exited)
	}()
	go p.copyOutput()
	poll := time.NewTicker(p.poll)
	defer poll.Stop()
	var stop stopState
	ctxDone, stopReq := ctx.Done(), p.stopReq
	var graceUp, unkillable <-chan time.Time
	for {
		select {
		case <-poll.C:
			p.readStatus(false)
		case <-ctxDone:
			ctxDone = nil
			p.Stop(stopReasonOf(ctx))
		case <-stopReq:
			stopReq = nil
			stop.reason, stop.requestedAt = p.stopReason, p.now()
			p.log.Info("stopping process group", "reason", p.stopReason, "grace", p.grace)
			p.signalGroup(syscall.SIGTERM)
			graceUp = time.After(p.grace)
		case <-graceUp:
			graceUp = nil
			stop.killed = true
			p.log.Warn("process did not exit within its grace period; killing its group", "grace", p.grace)
			p.signalGroup(syscall.SIGKILL)
			unkillable = time.After(unkillableTimeout)
		case <-unkillable:
			unkillable = nil
			p.log.Error("process is still alive after SIGKILL; its GPUs may be stuck", "waited", unkillableTimeout)
		case <-exited:
			p.finish(stop)
			return
		}
	}
}

// finish runs once the leader has exited: it reads the rest of the status
// file, kills what is left of the group, collects the output and publishes
// the Outcome.
func (p *Process) finish(stop stopState) {
	p.readStatus(true)
	if err := syscall.Kill(-p.PID(), syscall.SIGKILL); err == nil {
		p.log.Info("sent SIGKILL to processes still in the group after its leader exited")
	}
	select {
	case <-p.outDone:
	case <-time.After(outputDrainTimeout):
		p.log.Warn("a process outside the group still holds the output pipe; closing it")
	}
	p.outR.Close()
	<-p.outDone
	p.status.close()
	p.outcome = p.buildOutcome(stop)
	p.log.Info("process ended", "exit_code", p.outcome.ExitCode, "signal", p.outcome.Signal,
		"stopped_by", p.outcome.StoppedBy, "last_step", p.outcome.LastStep)
	close(p.done)
}

// buildOutcome assembles the Outcome from the exit status, the stop record
// and the status file's final state.
func (p *Process) buildOutcome(stop stopState) *Outcome {
	st := p.status.state
	out := &Outcome{
		JobID:               p.jobID,
		RunID:               p.runID,
		ExitCode:            -1,
		StoppedBy:           stop.reason,
		ExitedWithinGrace:   stop.reason != "" && !stop.killed,
		LastCheckpoint:      st.progress.LastCheckpoint,
		Started:             st.progress.Started,
		StartedFromStep:     st.progress.StartedFromStep,
		LastStep:            st.progress.Step,
		OutputTail:          p.out.String(),
		OutputBytes:         p.out.Total(),
		BadStatusLines:      st.badCount,
		FirstBadStatusLines: st.badSamples,
		StartedAt:           p.startedAt,
		StopRequestedAt:     stop.requestedAt,
		EndedAt:             p.now(),
	}
	if ps := p.cmd.ProcessState; ps != nil {
		out.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			out.Signal = signalName(ws.Signal())
		}
	} else {
		p.log.Error("exit status unknown", "error", p.waitErr)
	}
	out.Succeeded = out.ExitCode == 0 && out.StoppedBy == ""
	return out
}

// readStatus reads what the job appended to its status file (and, when
// final, its unterminated last line) and publishes the Progress if it
// changed.
func (p *Process) readStatus(final bool) {
	changed, err := p.status.read(final, p.now, p.log)
	if err != nil {
		p.log.Warn("cannot read status file", "error", err)
	}
	if changed {
		p.publish(p.status.state.progress)
	}
}

// publish replaces the unread Progress, if any, with pr. Only the supervisor
// sends, so the send cannot block.
func (p *Process) publish(pr Progress) {
	select {
	case <-p.updates:
	default:
	}
	p.updates <- pr
}

// signalGroup sends sig to the process group; a group already gone is not an
// error.
func (p *Process) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-p.PID(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.log.Error("cannot signal process group", "signal", signalName(sig), "error", err)
	}
}

// copyOutput copies the job's output into the tail buffer until every writer
// has closed the pipe or finish closes it.
func (p *Process) copyOutput() {
	defer close(p.outDone)
	_, _ = io.Copy(p.out, p.outR)
}
