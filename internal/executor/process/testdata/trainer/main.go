// Command trainer is a stand-in training job for the process executor's
// tests. It follows docs/job-protocol.md: it resumes from GPUGOV_RESUME_FROM,
// reports started/progress/checkpoint lines to GPUGOV_STATUS_FILE, writes
// checkpoint files into GPUGOV_CHECKPOINT_DIR, and on SIGTERM saves a final
// checkpoint and exits 0.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// options are the trainer's flags.
type options struct {
	steps           int64
	stepInterval    time.Duration
	checkpointEvery int64
	ignoreSIGTERM   bool
	exitCode        int
	badStatus       bool
	spawnChild      string
	sleepForever    bool
	envFile         string
	printLines      int
}

func main() {
	var o options
	flag.Int64Var(&o.steps, "steps", 10, "step to stop at")
	flag.DurationVar(&o.stepInterval, "step-interval", 20*time.Millisecond, "time per step")
	flag.Int64Var(&o.checkpointEvery, "checkpoint-every", 0, "checkpoint every K steps; 0 = only on SIGTERM")
	flag.BoolVar(&o.ignoreSIGTERM, "ignore-sigterm", false, "ignore SIGTERM (to be killed after the grace period)")
	flag.IntVar(&o.exitCode, "exit-code", 0, "exit status after the last step")
	flag.BoolVar(&o.badStatus, "bad-status", false, "write invalid status lines first")
	flag.StringVar(&o.spawnChild, "spawn-child", "", "start a child that sleeps forever and write its PID to this file")
	flag.BoolVar(&o.sleepForever, "sleep-forever", false, "sleep until killed (the spawned child)")
	flag.StringVar(&o.envFile, "env-file", "", "write the executor's environment variables to this file as JSON")
	flag.IntVar(&o.printLines, "print-lines", 0, "print this many filler lines first")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "trainer:", err)
		os.Exit(4)
	}
	os.Exit(o.exitCode)
}

// run trains from the resume step to o.steps, or until SIGTERM.
func run(o options) error {
	terms := make(chan os.Signal, 1)
	if o.ignoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(terms, syscall.SIGTERM)
	}
	if o.sleepForever {
		for {
			time.Sleep(time.Hour)
		}
	}
	fmt.Printf("CUDA_VISIBLE_DEVICES=%s\n", os.Getenv("CUDA_VISIBLE_DEVICES"))
	fmt.Fprintln(os.Stderr, "trainer: stderr is captured too")
	for i := 0; i < o.printLines; i++ {
		fmt.Printf("filler line %d\n", i)
	}
	if err := prepare(o); err != nil {
		return err
	}
	status, err := os.OpenFile(os.Getenv("GPUGOV_STATUS_FILE"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer status.Close()
	if o.badStatus {
		writeBadLines(status)
	}
	step, err := resumeStep()
	if err != nil {
		return err
	}
	report(status, map[string]any{"type": "started", "from_step": step})
	return train(o, status, step, terms)
}

// prepare does the one-off side tasks the flags ask for.
func prepare(o options) error {
	if o.envFile != "" {
		if err := writeEnv(o.envFile); err != nil {
			return err
		}
	}
	if o.spawnChild != "" {
		return spawnChild(o.spawnChild)
	}
	return nil
}

// train runs steps from start+1 to o.steps, checkpointing every
// o.checkpointEvery steps, and saves and returns on SIGTERM.
func train(o options, status *os.File, start int64, terms <-chan os.Signal) error {
	tick := time.NewTicker(o.stepInterval)
	defer tick.Stop()
	for step := start; step < o.steps; {
		select {
		case <-terms:
			fmt.Printf("SIGTERM at step %d; saving\n", step)
			return checkpoint(status, step)
		case <-tick.C:
		}
		step++
		report(status, map[string]any{"type": "progress", "step": step})
		if o.checkpointEvery > 0 && step%o.checkpointEvery == 0 {
			if err := checkpoint(status, step); err != nil {
				return err
			}
		}
	}
	fmt.Printf("done at step %d\n", o.steps)
	return nil
}

// resumeStep loads the checkpoint named by GPUGOV_RESUME_FROM and checks it
// holds GPUGOV_RESUME_STEP; 0 for a fresh start.
func resumeStep() (int64, error) {
	from := os.Getenv("GPUGOV_RESUME_FROM")
	if from == "" {
		return 0, nil
	}
	data, err := os.ReadFile(from)
	if err != nil {
		return 0, err
	}
	var saved struct{ Step int64 }
	if err := json.Unmarshal(data, &saved); err != nil {
		return 0, err
	}
	want, err := strconv.ParseInt(os.Getenv("GPUGOV_RESUME_STEP"), 10, 64)
	if err != nil || want != saved.Step {
		return 0, fmt.Errorf("checkpoint %s holds step %d, GPUGOV_RESUME_STEP is %q", from, saved.Step, os.Getenv("GPUGOV_RESUME_STEP"))
	}
	fmt.Printf("resumed from %s at step %d\n", from, saved.Step)
	return saved.Step, nil
}

// checkpoint saves step into the checkpoint directory (written, then renamed
// into place) and reports it.
func checkpoint(status *os.File, step int64) error {
	path := filepath.Join(os.Getenv("GPUGOV_CHECKPOINT_DIR"), fmt.Sprintf("step-%08d.json", step))
	data, err := json.Marshal(map[string]int64{"step": step})
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return err
	}
	report(status, map[string]any{"type": "checkpoint", "step": step, "location": path})
	return nil
}

// report appends one status line with a single write.
func report(status *os.File, line map[string]any) {
	data, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	if _, err := status.Write(append(data, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "trainer: status:", err)
	}
}

// writeBadLines writes one line of each kind the executor must reject.
func writeBadLines(status *os.File) {
	for _, line := range []string{
		`not json`,
		`{"type":"bogus","step":1}`,
		`{"type":"progress","step":-1}`,
		`{"type":"checkpoint","step":1,"location":"/nonexistent/gpugov/ckpt"}`,
	} {
		if _, err := status.WriteString(line + "\n"); err != nil {
			fmt.Fprintln(os.Stderr, "trainer: status:", err)
		}
	}
}

// writeEnv writes the variables the executor sets, as a JSON object.
func writeEnv(path string) error {
	env := map[string]string{}
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "GPUGOV_JOB_ID", "GPUGOV_RUN_ID", "GPUGOV_CHECKPOINT_DIR",
		"GPUGOV_RESUME_FROM", "GPUGOV_RESUME_STEP", "GPUGOV_STATUS_FILE", "TRAINER_EXTRA", "TRAINER_SECRET"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	env["PWD"] = wd
	data, err := json.Marshal(env)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// spawnChild starts a copy of the trainer that ignores SIGTERM and sleeps
// forever in the trainer's process group, holding its output pipe, and
// writes the child's PID to pidFile.
func spawnChild(pidFile string) error {
	cmd := exec.Command(os.Args[0], "-sleep-forever", "-ignore-sigterm")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	return os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
}
