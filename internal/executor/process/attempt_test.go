package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

func TestProcStatReadsThisProcess(t *testing.T) {
	state, ticks, err := procStat(os.Getpid())
	if err != nil || state == 'Z' || ticks == 0 {
		t.Fatalf("procStat(self) = %c, %d, %v", state, ticks, err)
	}
	if _, _, err := procStat(-1); err == nil {
		t.Error("procStat(-1) did not fail")
	}
}

func TestStopLostAttempt(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"garbage": "not json", "init": `{"pid":1,"start_ticks":1}`} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := stopLostAttempt(path, discardLog); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := stopLostAttempt(filepath.Join(dir, "missing"), discardLog); err != nil {
		t.Errorf("missing record: %v", err)
	}

	lost := exec.Command(trainerBin, "-sleep-forever")
	lost.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := lost.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lost.Process.Kill(); _ = lost.Wait() }()
	pid := lost.Process.Pid
	record := filepath.Join(dir, "attempt.json")
	if err := writeAttemptFile(record, pid); err != nil {
		t.Fatal(err)
	}
	_, ticks, err := procStat(pid)
	if err != nil {
		t.Fatal(err)
	}

	reused := `{"pid":` + strconv.Itoa(pid) + `,"start_ticks":` + strconv.FormatUint(ticks+1, 10) + `}`
	if err := os.WriteFile(record+".reused", []byte(reused), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := stopLostAttempt(record+".reused", discardLog); err != nil {
		t.Fatal(err)
	}
	if !leaderAlive(attemptRecord{PID: pid, StartTicks: ticks}) {
		t.Fatal("a record with another start time (a reused PID) killed the process")
	}

	if err := stopLostAttempt(record, discardLog); err != nil {
		t.Fatal(err)
	}
	if leaderAlive(attemptRecord{PID: pid, StartTicks: ticks}) {
		t.Fatal("the lost attempt is still alive")
	}
	if err := lost.Wait(); err == nil {
		t.Error("the lost attempt exited cleanly, want killed")
	}
}
