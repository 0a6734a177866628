package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// Defaults used where an Executor or Spec field is zero.
const (
	// DefaultGracePeriod is the time between SIGTERM and SIGKILL: 30 s, the
	// default of both Kubernetes' terminationGracePeriodSeconds and Slurm's
	// KillWait.
	DefaultGracePeriod = 30 * time.Second
	// DefaultPollInterval is how often the status file is read.
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultHeartbeatInterval is the longest time Run goes without calling its
	// progress callback.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultOutputTailBytes is how much of the job's output the Outcome keeps
	// (64 KiB).
	DefaultOutputTailBytes = 64 << 10
)

// Environment variables the executor sets for the job (see the package doc).
const (
	EnvVisibleDevices = "CUDA_VISIBLE_DEVICES"
	EnvJobID          = "GPUGOV_JOB_ID"
	EnvRunID          = "GPUGOV_RUN_ID"
	EnvCheckpointDir  = "GPUGOV_CHECKPOINT_DIR"
	EnvResumeFrom     = "GPUGOV_RESUME_FROM"
	EnvResumeStep     = "GPUGOV_RESUME_STEP"
	EnvStatusFile     = "GPUGOV_STATUS_FILE"
)

// reservedEnv are the variables a Spec may not set: the executor owns them.
var reservedEnv = []string{EnvVisibleDevices, EnvJobID, EnvRunID, EnvCheckpointDir, EnvResumeFrom, EnvResumeStep, EnvStatusFile}

// DefaultInheritEnv names the node agent's environment variables a job
// inherits when Executor.InheritEnv is nil: the search paths (LD_LIBRARY_PATH
// finds the node's CUDA libraries), user and locale. The list is short on
// purpose: the agent's own settings (database URL, Temporal credentials) must
// not leak into jobs.
var DefaultInheritEnv = []string{"PATH", "LD_LIBRARY_PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// ErrInvalidSpec is wrapped by the error Start and Run return for a Spec that
// no executor could run; retrying it cannot help.
var ErrInvalidSpec = errors.New("invalid process spec")

// idPattern is what a job or run ID must look like: it names directories
// under the checkpoint root, so no separators, no "." or "..".
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Executor starts jobs' runs as local processes. Its zero value is not
// usable: CheckpointRoot is required. One Executor may run many processes at
// once.
type Executor struct {
	// CheckpointRoot is the directory holding one directory per job
	// (checkpoints, status files, default working directories). Required.
	CheckpointRoot string
	// GracePeriod is the time between SIGTERM and SIGKILL for specs that do not
	// set one; 0 means DefaultGracePeriod.
	GracePeriod time.Duration
	// PollInterval is how often the status file is read; 0 means
	// DefaultPollInterval.
	PollInterval time.Duration
	// HeartbeatInterval is the longest time Run goes without calling its
	// progress callback; 0 means DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// InheritEnv names the agent's environment variables passed on to jobs;
	// nil means DefaultInheritEnv.
	InheritEnv []string
	// Now is the clock for the times in Progress and Outcome; nil means
	// time.Now. Grace periods and polling use real time.
	Now func() time.Time
	// Logger receives stop, kill and bad-status-line events; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Spec is one run of a job to start as a process.
type Spec struct {
	JobID   string            // the job's ID; letters, digits, '.', '_', '-'
	RunID   string            // this run's ID; same alphabet as JobID
	Command []string          // program and arguments; the program is looked up in the agent's PATH
	Env     map[string]string // extra environment; may not set the executor's variables
	// WorkDir is the job's working directory; "" means <root>/<job>/runs/<run>.
	WorkDir string
	// GPUUUIDs are the NVML UUIDs of the GPUs allocated to the run, exported as
	// CUDA_VISIBLE_DEVICES; empty means the job sees no GPU.
	GPUUUIDs []string
	// ResumeFrom is the checkpoint to resume from; nil for a fresh start.
	ResumeFrom *scheduling.Checkpoint
	// GracePeriod is the time between SIGTERM and SIGKILL; 0 means the
	// Executor's.
	GracePeriod time.Duration
	// OutputTailBytes is how many bytes of the end of the job's combined
	// stdout and stderr the Outcome keeps; 0 means DefaultOutputTailBytes.
	OutputTailBytes int
}

// runPaths are the files and directories of one run.
type runPaths struct {
	jobDir        string // <root>/<job>
	checkpointDir string // <root>/<job>/checkpoints
	runDir        string // <root>/<job>/runs/<run>
	statusFile    string // <runDir>/status.jsonl
	attemptFile   string // <runDir>/attempt.json: the live attempt's process group
}

// Start starts spec's process and returns at once; the Process reports
// progress on Updates and its Outcome from Wait. When ctx ends, the process
// is stopped gracefully (see the package doc for the reason recorded). An
// earlier attempt of the same run still alive is killed first.
//
// Start returns an error only when the process could not be started: an
// invalid spec (wrapping ErrInvalidSpec), a directory that cannot be made, a
// program not found (wrapping exec.ErrNotFound or fs.ErrNotExist), or ctx
// already ended. How a started process ends is in its Outcome, never an
// error.
func (e *Executor) Start(ctx context.Context, spec *Spec) (*Process, error) {
	if err := e.validate(spec); err != nil {
		return nil, err
	}
	p, err := e.start(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("start job %s run %s: %w", spec.JobID, spec.RunID, err)
	}
	return p, nil
}

// start prepares the run's directories, kills a lost earlier attempt, starts
// the process and its supervisor.
func (e *Executor) start(ctx context.Context, spec *Spec) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	paths, err := e.paths(spec)
	if err != nil {
		return nil, err
	}
	if err := makeRunDirs(paths); err != nil {
		return nil, err
	}
	if err := stopLostAttempt(paths.attemptFile, e.logger()); err != nil {
		return nil, err
	}
	p, err := e.launch(spec, paths)
	if err != nil {
		return nil, err
	}
	if err := writeAttemptFile(paths.attemptFile, p.PID()); err != nil {
		// The run goes on; only a crash-retry's clean-up of it is lost.
		p.log.Warn("cannot record the run's process group", "error", err)
	}
	go p.supervise(ctx)
	return p, nil
}

// Run starts spec's process, calls progress with every change it reports
// (and with the last Progress at least every HeartbeatInterval), and returns
// its Outcome when it has ended. progress runs on Run's goroutine and may be
// nil. Errors are those of Start.
func (e *Executor) Run(ctx context.Context, spec *Spec, progress func(Progress)) (*Outcome, error) {
	p, err := e.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	report := func(Progress) {}
	if progress != nil {
		report = progress
	}
	interval := orDefault(e.HeartbeatInterval, DefaultHeartbeatInterval)
	beat := time.NewTicker(interval)
	defer beat.Stop()
	last := p.initial
	for {
		select {
		case last = <-p.Updates():
			report(last)
			beat.Reset(interval)
		case <-beat.C:
			report(last)
		case <-p.Done():
			return p.Wait(), nil
		}
	}
}

// validate rejects specs no executor could run, wrapping ErrInvalidSpec.
func (e *Executor) validate(spec *Spec) error {
	if err := e.checkSpec(spec); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, err)
	}
	return nil
}

// checkSpec says what is wrong with spec (or the executor), if anything.
func (e *Executor) checkSpec(spec *Spec) error {
	switch {
	case e.CheckpointRoot == "":
		return errors.New("executor has no checkpoint root")
	case spec == nil:
		return errors.New("spec is nil")
	case !idPattern.MatchString(spec.JobID):
		return fmt.Errorf("job ID %q is not a safe name (letters, digits, '.', '_', '-')", spec.JobID)
	case !idPattern.MatchString(spec.RunID):
		return fmt.Errorf("run ID %q is not a safe name (letters, digits, '.', '_', '-')", spec.RunID)
	case len(spec.Command) == 0 || spec.Command[0] == "":
		return errors.New("command is empty")
	case spec.GracePeriod < 0:
		return fmt.Errorf("grace period %s is negative", spec.GracePeriod)
	case spec.OutputTailBytes < 0:
		return fmt.Errorf("output tail of %d bytes is negative", spec.OutputTailBytes)
	}
	if err := checkResume(spec.ResumeFrom); err != nil {
		return err
	}
	if err := checkGPUs(spec.GPUUUIDs); err != nil {
		return err
	}
	return checkEnv(spec.Env)
}

// checkResume rejects a checkpoint that cannot be resumed from.
func checkResume(cp *scheduling.Checkpoint) error {
	if cp == nil {
		return nil
	}
	if cp.Step < 0 || cp.Location == "" {
		return fmt.Errorf("resume checkpoint needs a step ≥ 0 and a location (got step %d, location %q)", cp.Step, cp.Location)
	}
	return nil
}

// checkGPUs rejects UUIDs that would corrupt CUDA_VISIBLE_DEVICES.
func checkGPUs(uuids []string) error {
	for _, u := range uuids {
		if u == "" || strings.ContainsAny(u, ", \t\n") {
			return fmt.Errorf("GPU UUID %q is empty or contains a comma or space", u)
		}
	}
	return nil
}

// checkEnv rejects malformed names and the executor's own variables.
func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("environment variable %q is malformed", k)
		}
		if slices.Contains(reservedEnv, k) {
			return fmt.Errorf("environment variable %s is set by the executor", k)
		}
	}
	return nil
}

// paths lays out spec's run under the checkpoint root, made absolute because
// the job runs in another directory.
func (e *Executor) paths(spec *Spec) (runPaths, error) {
	root, err := filepath.Abs(e.CheckpointRoot)
	if err != nil {
		return runPaths{}, err
	}
	jobDir := filepath.Join(root, spec.JobID)
	runDir := filepath.Join(jobDir, "runs", spec.RunID)
	return runPaths{
		jobDir:        jobDir,
		checkpointDir: filepath.Join(jobDir, "checkpoints"),
		runDir:        runDir,
		statusFile:    filepath.Join(runDir, "status.jsonl"),
		attemptFile:   filepath.Join(runDir, "attempt.json"),
	}, nil
}

// makeRunDirs creates the run's directories, each mode 0700 even when it
// already existed looser: checkpoints may hold a team's model weights.
func makeRunDirs(p runPaths) error {
	for _, dir := range []string{p.jobDir, p.checkpointDir, filepath.Dir(p.runDir), p.runDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// launch creates the status file and output pipe and starts the process in
// its own process group.
func (e *Executor) launch(spec *Spec, paths runPaths) (*Process, error) {
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	cmd.Dir = spec.WorkDir
	if cmd.Dir == "" {
		cmd.Dir = paths.runDir
	}
	cmd.Env = e.environ(spec, paths)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	status, err := newStatusFile(paths.statusFile)
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		status.Close()
		return nil, err
	}
	// An *os.File as Stdout/Stderr is handed to the child as is, so Wait
	// returns when the leader exits even if a grandchild still holds the pipe.
	cmd.Stdout, cmd.Stderr = outW, outW
	startedAt := e.now()
	err = cmd.Start()
	outW.Close()
	if err != nil {
		outR.Close()
		status.Close()
		return nil, err
	}
	return newProcess(e, spec, paths, cmd, status, outR, startedAt), nil
}

// newStatusFile creates an empty status file for the run and opens it for
// reading. An earlier attempt's file is unlinked rather than truncated, so
// that attempt's reader never reads this one's lines at its old offset.
func newStatusFile(path string) (*os.File, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

// environ builds the job's environment: inherited variables, then the spec's,
// then the executor's own.
func (e *Executor) environ(spec *Spec, paths runPaths) []string {
	inherit := e.InheritEnv
	if inherit == nil {
		inherit = DefaultInheritEnv
	}
	var env []string
	for _, name := range inherit {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	resumeFrom, resumeStep := "", int64(0)
	if spec.ResumeFrom != nil {
		resumeFrom, resumeStep = spec.ResumeFrom.Location, spec.ResumeFrom.Step
	}
	return append(env,
		EnvVisibleDevices+"="+strings.Join(spec.GPUUUIDs, ","),
		EnvJobID+"="+spec.JobID,
		EnvRunID+"="+spec.RunID,
		EnvCheckpointDir+"="+paths.checkpointDir,
		EnvResumeFrom+"="+resumeFrom,
		EnvResumeStep+"="+strconv.FormatInt(resumeStep, 10),
		EnvStatusFile+"="+paths.statusFile,
	)
}

// now reads the executor's clock.
func (e *Executor) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// logger is the executor's logger or the default one.
func (e *Executor) logger() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.Default()
}

// orDefault returns d when v is not positive.
func orDefault(v, d time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return d
}
