package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// trainerBin is the test job built from testdata/trainer by TestMain.
var trainerBin string

// testTimeout bounds each run that should end on its own; generous because
// the machine may be loaded. A run cut by it ends with StoppedBy "deadline",
// which every such test rejects.
const testTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpugov-trainer-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	trainerBin = filepath.Join(dir, "trainer")
	build := exec.Command("go", "build", "-o", trainerBin, "./testdata/trainer")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test trainer: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newTestExecutor returns an executor over a fresh checkpoint root, polling
// fast and logging to the test.
func newTestExecutor(t *testing.T) *Executor {
	t.Helper()
	return &Executor{
		CheckpointRoot:    t.TempDir(),
		PollInterval:      20 * time.Millisecond,
		HeartbeatInterval: time.Second,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
}

// trainerSpec runs the trainer with args as run r-1 of job, on two GPUs.
func trainerSpec(job string, args ...string) *Spec {
	return &Spec{
		JobID:    job,
		RunID:    "r-1",
		Command:  append([]string{trainerBin}, args...),
		GPUUUIDs: []string{"GPU-aaaa", "GPU-bbbb"},
	}
}

// runToEnd runs spec under testTimeout, failing the test on a start error.
func runToEnd(t *testing.T, e *Executor, spec *Spec, progress func(Progress)) *Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	out, err := e.Run(ctx, spec, progress)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return out
}

// waitStarted waits for p's started line, failing the test after testTimeout.
func waitStarted(t *testing.T, p *Process) Progress {
	t.Helper()
	timeout := time.After(testTimeout)
	for {
		select {
		case pr := <-p.Updates():
			if pr.Started {
				return pr
			}
		case <-p.Done():
			t.Fatalf("process ended before it started: %+v", p.Wait())
		case <-timeout:
			t.Fatal("no started line")
		}
	}
}

func TestRunToCompletion(t *testing.T) {
	e := newTestExecutor(t)
	var reports []Progress
	out := runToEnd(t, e, trainerSpec("job-a", "-steps", "10", "-checkpoint-every", "5"), func(p Progress) {
		reports = append(reports, p)
	})
	if !out.Succeeded || out.ExitCode != 0 || out.Signal != "" || out.StoppedBy != "" {
		t.Fatalf("outcome = %+v, want a success", out)
	}
	if !out.Started || out.StartedFromStep != 0 || out.LastStep != 10 {
		t.Errorf("started %v from %d, last step %d; want started from 0, last step 10", out.Started, out.StartedFromStep, out.LastStep)
	}
	wantCP := filepath.Join(e.CheckpointRoot, "job-a", "checkpoints", "step-00000010.json")
	if out.LastCheckpoint == nil || out.LastCheckpoint.Step != 10 || out.LastCheckpoint.Location != wantCP {
		t.Errorf("last checkpoint = %+v, want step 10 at %s", out.LastCheckpoint, wantCP)
	}
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb\n", "stderr is captured too", "done at step 10"} {
		if !strings.Contains(out.OutputTail, want) {
			t.Errorf("output tail lacks %q:\n%s", want, out.OutputTail)
		}
	}
	if out.BadStatusLines != 0 {
		t.Errorf("bad status lines: %+v", out.FirstBadStatusLines)
	}
	if out.EndedAt.Before(out.StartedAt) || !out.StopRequestedAt.IsZero() {
		t.Errorf("times: started %v, stop requested %v, ended %v", out.StartedAt, out.StopRequestedAt, out.EndedAt)
	}
	checkReports(t, reports)
}

// checkReports checks that progress was reported and never went back.
func checkReports(t *testing.T, reports []Progress) {
	t.Helper()
	if len(reports) == 0 || reports[len(reports)-1].Step == 0 {
		t.Fatalf("no progress reported: %+v", reports)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].Step < reports[i-1].Step || reports[i].At.Before(reports[i-1].At) {
			t.Errorf("report %d went back: %+v after %+v", i, reports[i], reports[i-1])
		}
	}
}

func TestRunNonZeroExit(t *testing.T) {
	out := runToEnd(t, newTestExecutor(t), trainerSpec("job-b", "-steps", "2", "-exit-code", "3"), nil)
	if out.Succeeded || out.ExitCode != 3 || out.Signal != "" || out.StoppedBy != "" || out.ExitedWithinGrace {
		t.Fatalf("outcome = %+v, want exit code 3, not stopped", out)
	}
	if out.LastStep != 2 {
		t.Errorf("last step = %d, want 2", out.LastStep)
	}
}

func TestPreemptionCheckpointsThenResumeStartsThere(t *testing.T) {
	e := newTestExecutor(t)
	spec := trainerSpec("job-c", "-steps", "1000000", "-checkpoint-every", "5")
	spec.GracePeriod = 30 * time.Second // never reached: the trainer saves at once
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	first, err := e.Run(ctx, spec, func(p Progress) {
		if p.Step >= 8 {
			cancel() // the preemption notice
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if first.StoppedBy != StopPreemption || !first.ExitedWithinGrace || first.ExitCode != 0 || first.Succeeded {
		t.Fatalf("first run = %+v, want a preemption that exited 0 within grace", first)
	}
	cp := first.LastCheckpoint
	if cp == nil || cp.Step < 8 || cp.Step != first.LastStep {
		t.Fatalf("first run's last checkpoint = %+v, want the step it reached (%d ≥ 8)", cp, first.LastStep)
	}
	if first.StopRequestedAt.IsZero() || first.EndedAt.Before(first.StopRequestedAt) {
		t.Errorf("stop requested at %v, ended at %v", first.StopRequestedAt, first.EndedAt)
	}

	resume := trainerSpec("job-c", "-steps", strconv.FormatInt(cp.Step+5, 10), "-checkpoint-every", "5")
	resume.RunID, resume.ResumeFrom = "r-2", cp
	second := runToEnd(t, e, resume, nil)
	if !second.Succeeded || !second.Started || second.StartedFromStep != cp.Step || second.LastStep != cp.Step+5 {
		t.Fatalf("resumed run = %+v, want a success started from step %d", second, cp.Step)
	}
	if !strings.Contains(second.OutputTail, "resumed from "+cp.Location) {
		t.Errorf("resumed run's output lacks the checkpoint it loaded:\n%s", second.OutputTail)
	}
}

func TestIgnoredSIGTERMIsKilledAfterGrace(t *testing.T) {
	e := newTestExecutor(t)
	spec := trainerSpec("job-d", "-steps", "1000000", "-ignore-sigterm")
	spec.GracePeriod = 300 * time.Millisecond
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	p, err := e.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, p)
	cancel(StopCancel)
	out := p.Wait()
	if out.StoppedBy != StopCancel || out.ExitedWithinGrace || out.Signal != "SIGKILL" || out.ExitCode != -1 || out.Succeeded {
		t.Fatalf("outcome = %+v, want a cancel killed with SIGKILL after the grace period", out)
	}
	if waited := out.EndedAt.Sub(out.StopRequestedAt); waited < spec.GracePeriod {
		t.Errorf("killed %v after SIGTERM, before the %v grace period", waited, spec.GracePeriod)
	}
}

func TestBadStatusLinesAreCountedNotFatal(t *testing.T) {
	out := runToEnd(t, newTestExecutor(t), trainerSpec("job-e", "-steps", "3", "-bad-status"), nil)
	if !out.Succeeded || out.LastStep != 3 {
		t.Fatalf("outcome = %+v, want a success at step 3", out)
	}
	if out.BadStatusLines != 4 || len(out.FirstBadStatusLines) != 4 {
		t.Fatalf("bad lines = %d %+v, want the trainer's 4", out.BadStatusLines, out.FirstBadStatusLines)
	}
	for i, bad := range out.FirstBadStatusLines {
		if bad.Line != i+1 || bad.Reason == "" || bad.Text == "" {
			t.Errorf("bad line %d = %+v", i, bad)
		}
	}
	if out.LastCheckpoint != nil {
		t.Errorf("a checkpoint at a missing location was accepted: %+v", out.LastCheckpoint)
	}
}

func TestStartErrors(t *testing.T) {
	e := newTestExecutor(t)
	_, err := e.Run(context.Background(), &Spec{JobID: "j", RunID: "r", Command: []string{"gpugov-no-such-program"}}, nil)
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("program not in PATH: err = %v, want exec.ErrNotFound", err)
	}
	_, err = e.Run(context.Background(), &Spec{JobID: "j", RunID: "r", Command: []string{"/nonexistent/gpugov/trainer"}}, nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing program path: err = %v, want fs.ErrNotExist", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Start(ctx, trainerSpec("j")); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: err = %v, want context.Canceled", err)
	}
}

func TestInvalidSpecs(t *testing.T) {
	valid := func() *Spec { return trainerSpec("job-f") }
	tests := []struct {
		name   string
		root   string
		change func(*Spec)
	}{
		{"no checkpoint root", "", func(*Spec) {}},
		{"job ID escapes the root", "root", func(s *Spec) { s.JobID = "../x" }},
		{"empty run ID", "root", func(s *Spec) { s.RunID = "" }},
		{"empty command", "root", func(s *Spec) { s.Command = nil }},
		{"reserved variable", "root", func(s *Spec) { s.Env = map[string]string{EnvVisibleDevices: "0"} }},
		{"malformed variable", "root", func(s *Spec) { s.Env = map[string]string{"A=B": "c"} }},
		{"GPU UUID with a comma", "root", func(s *Spec) { s.GPUUUIDs = []string{"GPU-a,GPU-b"} }},
		{"negative grace period", "root", func(s *Spec) { s.GracePeriod = -time.Second }},
		{"negative output tail", "root", func(s *Spec) { s.OutputTailBytes = -1 }},
		{"resume without location", "root", func(s *Spec) { s.ResumeFrom = &scheduling.Checkpoint{Step: 3} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Executor{}
			if tt.root != "" {
				e.CheckpointRoot = t.TempDir()
			}
			spec := valid()
			tt.change(spec)
			if _, err := e.Start(context.Background(), spec); !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v, want ErrInvalidSpec", err)
			}
		})
	}
	if _, err := (&Executor{CheckpointRoot: t.TempDir()}).Start(context.Background(), nil); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("nil spec: err = %v, want ErrInvalidSpec", err)
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("TRAINER_SECRET", "agent-only")
	e := newTestExecutor(t)
	jobDir := filepath.Join(e.CheckpointRoot, "job-g")
	if err := os.Mkdir(jobDir, 0o755); err != nil { // left too open by someone
		t.Fatal(err)
	}
	envFile := filepath.Join(t.TempDir(), "env.json")
	spec := trainerSpec("job-g", "-steps", "1", "-env-file", envFile)
	spec.Env = map[string]string{"TRAINER_EXTRA": "from-spec"}
	if out := runToEnd(t, e, spec, nil); !out.Succeeded {
		t.Fatalf("outcome = %+v", out)
	}
	data, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(jobDir, "runs", "r-1")
	want := map[string]string{
		EnvVisibleDevices: "GPU-aaaa,GPU-bbbb",
		EnvJobID:          "job-g",
		EnvRunID:          "r-1",
		EnvCheckpointDir:  filepath.Join(jobDir, "checkpoints"),
		EnvResumeFrom:     "",
		EnvResumeStep:     "0",
		EnvStatusFile:     filepath.Join(runDir, "status.jsonl"),
		"TRAINER_EXTRA":   "from-spec",
		"PWD":             runDir,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if v, ok := got["TRAINER_SECRET"]; ok {
		t.Errorf("the agent's TRAINER_SECRET leaked into the job: %q", v)
	}
	for _, dir := range []string{jobDir, filepath.Join(jobDir, "checkpoints")} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (err %v), want 0700", dir, fi.Mode().Perm(), err)
		}
	}
}

func TestProcessGroupIsKilled(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		stop  bool
		check func(*testing.T, *Outcome)
	}{
		{"leader completes, child left behind", []string{"-steps", "2"}, false, func(t *testing.T, o *Outcome) {
			if !o.Succeeded {
				t.Errorf("outcome = %+v, want a success", o)
			}
		}},
		{"leader saves on SIGTERM, child ignores it", []string{"-steps", "1000000"}, true, func(t *testing.T, o *Outcome) {
			if !o.ExitedWithinGrace || o.ExitCode != 0 {
				t.Errorf("outcome = %+v, want the leader to exit 0 within grace", o)
			}
		}},
		{"leader and child ignore SIGTERM", []string{"-steps", "1000000", "-ignore-sigterm"}, true, func(t *testing.T, o *Outcome) {
			if o.ExitedWithinGrace || o.Signal != "SIGKILL" {
				t.Errorf("outcome = %+v, want the leader killed after grace", o)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			spec := trainerSpec("job-h", append(tt.args, "-spawn-child", pidFile)...)
			spec.GracePeriod = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			p, err := newTestExecutor(t).Start(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if tt.stop {
				waitStarted(t, p)
				p.Stop(StopCancel)
			}
			out := p.Wait()
			if want := map[bool]StopReason{true: StopCancel, false: ""}[tt.stop]; out.StoppedBy != want {
				t.Errorf("stopped by %q, want %q", out.StoppedBy, want)
			}
			tt.check(t, out)
			waitDead(t, readPID(t, pidFile))
		})
	}
}

// readPID reads the PID the trainer's child wrote.
func readPID(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitDead waits until pid is gone or a zombie (its new parent may not reap
// it), failing the test after testTimeout.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(20 * time.Millisecond) {
		state, _, err := procStat(pid)
		if err != nil || state == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // leave nothing running behind a failed test
			t.Fatalf("process %d (state %c) still alive", pid, state)
		}
	}
}

func TestRunHeartbeatsWithoutNews(t *testing.T) {
	e := newTestExecutor(t)
	e.HeartbeatInterval = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var reports []Progress
	out, err := e.Run(ctx, trainerSpec("job-i", "-steps", "1", "-step-interval", "1h"), func(p Progress) {
		reports = append(reports, p)
		if len(reports) >= 4 && p.Started {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.StoppedBy != StopPreemption || len(reports) < 4 {
		t.Fatalf("stopped by %q after %d reports, want a preemption after ≥ 4", out.StoppedBy, len(reports))
	}
	last := reports[len(reports)-1]
	if last.Step != 0 || !last.Started {
		t.Errorf("last report = %+v, want started at step 0 and no further news", last)
	}
}

func TestRetriedAttemptKillsTheLostOne(t *testing.T) {
	root := t.TempDir()
	crashed := newTestExecutor(t)
	crashed.CheckpointRoot = root
	spec := trainerSpec("job-j", "-steps", "1000000", "-ignore-sigterm")
	lost, err := crashed.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, lost)

	restarted := newTestExecutor(t) // the node agent after a crash: it knows nothing of lost
	restarted.CheckpointRoot = root
	spec.Command = []string{trainerBin, "-steps", "2"}
	retry := runToEnd(t, restarted, spec, nil)
	if !retry.Succeeded {
		t.Errorf("retried attempt = %+v, want a success", retry)
	}
	if out := lost.Wait(); out.Signal != "SIGKILL" || out.StoppedBy != "" {
		t.Errorf("lost attempt = %+v, want killed by the retry", out)
	}
}

func TestOutputTailKeepsTheEnd(t *testing.T) {
	spec := trainerSpec("job-k", "-steps", "1", "-print-lines", "5000")
	spec.OutputTailBytes = 100
	out := runToEnd(t, newTestExecutor(t), spec, nil)
	if !out.Succeeded {
		t.Fatalf("outcome = %+v", out)
	}
	if len(out.OutputTail) > 100 || !strings.HasSuffix(out.OutputTail, "done at step 1\n") {
		t.Errorf("output tail (%d bytes) = %q, want ≤ 100 bytes ending the output", len(out.OutputTail), out.OutputTail)
	}
	if out.OutputBytes < int64(5000*len("filler line 0\n")) {
		t.Errorf("output bytes = %d, want all the filler counted", out.OutputBytes)
	}
}
