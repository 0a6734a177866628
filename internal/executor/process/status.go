package process

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Status line types (see the package doc).
const (
	StatusStarted    = "started"
	StatusProgress   = "progress"
	StatusCheckpoint = "checkpoint"
)

const (
	// maxStatusLineBytes bounds one status line (64 KiB); a longer one is bad.
	maxStatusLineBytes = 64 << 10
	// badLineTextBytes is how much of a bad line the Outcome keeps.
	badLineTextBytes = 256
	// maxBadSamples is how many bad lines the Outcome keeps and the log shows.
	maxBadSamples = 10
	// readChunkBytes is the status file read size.
	readChunkBytes = 32 << 10
)

// statusRecord is one status line as written by the job.
type statusRecord struct {
	Type     string `json:"type"`
	Step     *int64 `json:"step"`
	FromStep *int64 `json:"from_step"`
	Location string `json:"location"`
}

// statusState is what the valid status lines of a run add up to.
type statusState struct {
	progress       Progress
	checkpointDir  string // base of relative checkpoint locations
	reported       bool   // a progress or checkpoint line was accepted
	progressStep   int64  // last accepted progress step
	checkpointStep int64  // last accepted checkpoint step of this run
	badCount       int
	badSamples     []BadStatusLine
}

// newStatusState starts a run's state from the checkpoint it resumes from.
func newStatusState(checkpointDir string, resumeFrom *scheduling.Checkpoint, startedAt time.Time) statusState {
	st := statusState{checkpointDir: checkpointDir, progress: Progress{At: startedAt}}
	if resumeFrom != nil {
		cp := *resumeFrom
		st.progress.LastCheckpoint = &cp
	}
	return st
}

// apply validates one non-blank status line and adds it to the state; the
// error says why a bad line was rejected, and leaves the state unchanged.
func (s *statusState) apply(line []byte, at time.Time) error {
	var rec statusRecord
	if err := json.Unmarshal(line, &rec); err != nil {
		return fmt.Errorf("not a JSON status object: %v", err)
	}
	var err error
	switch rec.Type {
	case StatusStarted:
		err = s.applyStarted(rec)
	case StatusProgress:
		err = s.applyProgress(rec)
	case StatusCheckpoint:
		err = s.applyCheckpoint(rec, at)
	case "":
		err = errors.New(`no "type"`)
	default:
		err = fmt.Errorf("unknown type %q", rec.Type)
	}
	if err == nil {
		s.progress.At = at
	}
	return err
}

// applyStarted accepts the single started line, which comes first.
func (s *statusState) applyStarted(rec statusRecord) error {
	switch {
	case rec.FromStep == nil || *rec.FromStep < 0 || *rec.FromStep > vocab.MaxTotalSteps:
		return fmt.Errorf(`started needs "from_step" in 0..%d`, int64(vocab.MaxTotalSteps))
	case s.progress.Started:
		return errors.New("second started line")
	case s.reported:
		return errors.New("started after progress or checkpoint lines")
	}
	s.progress.Started, s.progress.StartedFromStep = true, *rec.FromStep
	s.raiseStep(*rec.FromStep)
	return nil
}

// applyProgress accepts a progress step that does not go back.
func (s *statusState) applyProgress(rec statusRecord) error {
	if rec.Step == nil || *rec.Step < 0 || *rec.Step > vocab.MaxTotalSteps {
		return fmt.Errorf(`progress needs "step" in 0..%d`, int64(vocab.MaxTotalSteps))
	}
	if floor := max(s.progressStep, s.progress.StartedFromStep); *rec.Step < floor {
		return fmt.Errorf("progress step %d is below step %d reported before", *rec.Step, floor)
	}
	s.progressStep, s.reported = *rec.Step, true
	s.raiseStep(*rec.Step)
	return nil
}

// applyCheckpoint accepts a checkpoint whose step does not go back and whose
// location exists.
func (s *statusState) applyCheckpoint(rec statusRecord, at time.Time) error {
	if rec.Step == nil || *rec.Step < 0 || *rec.Step > vocab.MaxTotalSteps {
		return fmt.Errorf(`checkpoint needs "step" in 0..%d`, int64(vocab.MaxTotalSteps))
	}
	if floor := max(s.checkpointStep, s.progress.StartedFromStep); *rec.Step < floor {
		return fmt.Errorf("checkpoint step %d is below step %d reported before", *rec.Step, floor)
	}
	location, err := resolveLocation(rec.Location, s.checkpointDir)
	if err != nil {
		return err
	}
	s.checkpointStep, s.reported = *rec.Step, true
	s.progress.LastCheckpoint = &scheduling.Checkpoint{At: at, Step: *rec.Step, Location: location}
	s.raiseStep(*rec.Step)
	return nil
}

// raiseStep keeps Progress.Step the highest step reported.
func (s *statusState) raiseStep(step int64) {
	s.progress.Step = max(s.progress.Step, step)
}

// resolveLocation checks a checkpoint location: a URI ("scheme://…") is
// taken as is; a path, made absolute against dir, must exist.
func resolveLocation(location, dir string) (string, error) {
	if location == "" {
		return "", errors.New(`checkpoint needs a "location"`)
	}
	if strings.Contains(location, "://") {
		return location, nil
	}
	path := location
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("checkpoint location is not readable: %v", err)
	}
	return path, nil
}

// reject records a bad line: counted always, kept and logged for the first
// maxBadSamples.
func (s *statusState) reject(lineNo int, text []byte, reason error, log *slog.Logger) {
	s.badCount++
	if len(s.badSamples) >= maxBadSamples {
		return
	}
	bad := BadStatusLine{Line: lineNo, Text: string(text[:min(len(text), badLineTextBytes)]), Reason: reason.Error()}
	s.badSamples = append(s.badSamples, bad)
	log.Warn("bad status line", "line", bad.Line, "text", bad.Text, "reason", bad.Reason)
}

// statusReader tails a status file: it reads what was appended since the last
// read, splits it into lines and applies complete ones to its state. Only the
// supervisor goroutine uses it.
type statusReader struct {
	f        *os.File
	buf      []byte
	pending  []byte // the current line so far, without its newline
	overlong bool   // the current line passed maxStatusLineBytes
	lineNo   int
	state    statusState
}

// newStatusReader tails f (opened at its start).
func newStatusReader(f *os.File, checkpointDir string, resumeFrom *scheduling.Checkpoint, startedAt time.Time) *statusReader {
	return &statusReader{f: f, buf: make([]byte, readChunkBytes), state: newStatusState(checkpointDir, resumeFrom, startedAt)}
}

// read consumes the file up to its current end; when final (the job has
// exited) an unterminated last line counts as a line. It reports whether a
// valid line changed the state; the error is a read failure.
func (r *statusReader) read(final bool, now func() time.Time, log *slog.Logger) (bool, error) {
	changed := false
	for {
		n, err := r.f.Read(r.buf)
		if n > 0 {
			changed = r.feed(r.buf[:n], now, log) || changed
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return changed, err
		}
	}
	if final && (len(r.pending) > 0 || r.overlong) {
		changed = r.endLine(now, log) || changed
	}
	return changed, nil
}

// feed splits data into lines, carrying an unterminated end to the next call.
func (r *statusReader) feed(data []byte, now func() time.Time, log *slog.Logger) bool {
	changed := false
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			r.extend(data)
			break
		}
		r.extend(data[:i])
		data = data[i+1:]
		changed = r.endLine(now, log) || changed
	}
	return changed
}

// extend appends to the current line, keeping only a sample of an overlong
// one.
func (r *statusReader) extend(b []byte) {
	if r.overlong {
		return
	}
	if len(r.pending)+len(b) > maxStatusLineBytes {
		r.overlong = true
		r.pending = append(r.pending, b[:min(len(b), badLineTextBytes)]...)
		return
	}
	r.pending = append(r.pending, b...)
}

// endLine applies the current line and starts the next; blank lines are
// skipped.
func (r *statusReader) endLine(now func() time.Time, log *slog.Logger) bool {
	r.lineNo++
	line, overlong := bytes.TrimSpace(r.pending), r.overlong
	defer func() { r.pending, r.overlong = r.pending[:0], false }()
	if overlong {
		r.state.reject(r.lineNo, line, fmt.Errorf("line longer than %d bytes", maxStatusLineBytes), log)
		return false
	}
	if len(line) == 0 {
		return false
	}
	if err := r.state.apply(line, now()); err != nil {
		r.state.reject(r.lineNo, line, err, log)
		return false
	}
	return true
}

// close closes the status file.
func (r *statusReader) close() { _ = r.f.Close() }
