package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lostAttemptTimeout bounds the wait for an earlier attempt's process group
// to die after SIGKILL.
const lostAttemptTimeout = 10 * time.Second

// attemptRecord names the process group of a run's latest attempt, so that a
// retried attempt (after the node agent crashed) can kill it before starting
// another copy of the run on the same GPUs.
type attemptRecord struct {
	PID int `json:"pid"` // the leader's PID, also the group's ID
	// StartTicks is the leader's start time from /proc/<pid>/stat (clock
	// ticks since boot); it tells the leader from a later process that reused
	// its PID.
	StartTicks uint64 `json:"start_ticks"`
}

// writeAttemptFile records pid's process group in path, atomically.
func writeAttemptFile(path string, pid int) error {
	_, ticks, err := procStat(pid)
	if err != nil {
		return err
	}
	data, err := json.Marshal(attemptRecord{PID: pid, StartTicks: ticks})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// stopLostAttempt kills the process group recorded in path when its leader
// is still the process recorded there, and waits for the leader to die. A
// missing or unreadable record, or a leader already gone, leaves nothing to
// do. The error says the group could not be killed.
func stopLostAttempt(path string, log *slog.Logger) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec attemptRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.PID <= 1 {
		log.Warn("ignoring an unreadable attempt record", "path", path)
		return nil
	}
	if !leaderAlive(rec) {
		if syscall.Kill(-rec.PID, 0) == nil {
			// The ID may have been reused since: killing the group is not safe.
			log.Warn("a process group with an earlier attempt's ID exists but its leader is gone; left alone", "pgid", rec.PID)
		}
		return nil
	}
	log.Warn("killing the process group of an earlier attempt of this run", "pgid", rec.PID)
	if err := syscall.Kill(-rec.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill earlier attempt's process group %d: %w", rec.PID, err)
	}
	for deadline := time.Now().Add(lostAttemptTimeout); leaderAlive(rec); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("earlier attempt's process group %d is still alive %s after SIGKILL", rec.PID, lostAttemptTimeout)
		}
	}
	return nil
}

// leaderAlive reports whether rec's leader still runs: its PID exists, is not
// a zombie, and started when recorded.
func leaderAlive(rec attemptRecord) bool {
	state, ticks, err := procStat(rec.PID)
	return err == nil && state != 'Z' && ticks == rec.StartTicks
}

// procStat reads a process's state and start time (clock ticks since boot)
// from /proc/<pid>/stat (proc(5): fields 3 and 22).
func procStat(pid int) (state byte, startTicks uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses, so fields are counted after its last ')'.
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[end+1:]))
	const stateField, startField = 0, 19 // fields 3 and 22, counted from field 3
	if len(fields) <= startField || len(fields[stateField]) != 1 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	startTicks, err = strconv.ParseUint(fields[startField], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return fields[stateField][0], startTicks, nil
}
