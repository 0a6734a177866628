package process

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// discardLog drops log records.
var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestStatusStateApply(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ck-20"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// Lines are applied in order to one state; each is accepted or rejected.
	lines := []struct {
		line    string
		wantErr string // "" when accepted
	}{
		{`{"type":"progress","step":3}`, ""},
		{`{"type":"started","from_step":0}`, "started after progress"},
		{`{"type":"progress","step":2}`, "below step 3"},
		{`{"type":"progress"}`, `needs "step"`},
		{`{"type":"progress","step":1.5}`, "not a JSON status object"},
		{`[1,2]`, "not a JSON status object"},
		{`null`, `no "type"`},
		{`{"type":"restart","step":4}`, `unknown type "restart"`},
		{`{"type":"checkpoint","step":20,"location":"ck-20","extra":"ignored"}`, ""},
		{`{"type":"checkpoint","step":19,"location":"ck-20"}`, "below step 20"},
		{`{"type":"checkpoint","step":21,"location":"missing"}`, "not readable"},
		{`{"type":"checkpoint","step":21}`, `needs a "location"`},
		{`{"type":"progress","step":25}`, ""},
		{`{"type":"checkpoint","step":22,"location":"s3://bucket/ck-22"}`, ""},
	}
	s := newStatusState(dir, &scheduling.Checkpoint{Step: 10, Location: "s3://bucket/ck-10"}, at)
	for i, l := range lines {
		err := s.apply([]byte(l.line), at.Add(time.Duration(i)*time.Second))
		switch {
		case l.wantErr == "" && err != nil:
			t.Errorf("%s: rejected: %v", l.line, err)
		case l.wantErr != "" && (err == nil || !strings.Contains(err.Error(), l.wantErr)):
			t.Errorf("%s: err = %v, want it to mention %q", l.line, err, l.wantErr)
		}
	}
	want := Progress{Step: 25, LastCheckpoint: &scheduling.Checkpoint{At: at.Add(13 * time.Second), Step: 22, Location: "s3://bucket/ck-22"}, At: at.Add(13 * time.Second)}
	if s.progress.Step != want.Step || *s.progress.LastCheckpoint != *want.LastCheckpoint || !s.progress.At.Equal(want.At) || s.progress.Started {
		t.Errorf("progress = %+v (checkpoint %+v), want %+v (checkpoint %+v)", s.progress, s.progress.LastCheckpoint, want, want.LastCheckpoint)
	}
}

func TestStatusStateStartedAndRelativeLocation(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "step-12"), 0o700); err != nil {
		t.Fatal(err)
	}
	resume := &scheduling.Checkpoint{Step: 10, Location: filepath.Join(dir, "step-10")}
	s := newStatusState(dir, resume, time.Time{})
	if s.progress.LastCheckpoint == resume || *s.progress.LastCheckpoint != *resume {
		t.Fatalf("initial checkpoint = %p %+v, want a copy of %+v", s.progress.LastCheckpoint, s.progress.LastCheckpoint, resume)
	}
	steps := []struct {
		line string
		ok   bool
	}{
		{`{"type":"started","from_step":-1}`, false},
		{`{"type":"started","from_step":10}`, true},
		{`{"type":"started","from_step":10}`, false},
		{`{"type":"progress","step":9}`, false},
		{`{"type":"checkpoint","step":9,"location":"step-12"}`, false},
		{`{"type":"checkpoint","step":12,"location":"step-12"}`, true},
	}
	for _, st := range steps {
		if err := s.apply([]byte(st.line), time.Time{}); (err == nil) != st.ok {
			t.Errorf("%s: err = %v, want accepted = %v", st.line, err, st.ok)
		}
	}
	if !s.progress.Started || s.progress.StartedFromStep != 10 || s.progress.Step != 12 {
		t.Errorf("progress = %+v, want started from 10, step 12", s.progress)
	}
	if got := s.progress.LastCheckpoint.Location; got != filepath.Join(dir, "step-12") {
		t.Errorf("relative location resolved to %q", got)
	}
}

func TestStatusReaderTailsAppendedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "status.jsonl")
	f, err := newStatusFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := newStatusReader(f, t.TempDir(), nil, time.Time{})
	defer r.close()
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := func() time.Time { return time.Unix(100, 0) }
	read := func(final bool) bool {
		changed, err := r.read(final, now, discardLog)
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	write := func(s string) {
		if _, err := w.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}

	write(`{"type":"started","from_step":0}` + "\n\n" + `{"type":"progress","st`)
	if !read(false) || r.state.progress.Step != 0 || !r.state.progress.Started {
		t.Fatalf("after the first chunk: %+v", r.state.progress)
	}
	if read(false) {
		t.Error("a read with nothing new reported a change")
	}
	write(`ep":4}` + "\n" + strings.Repeat("x", maxStatusLineBytes+10) + "\n")
	if !read(false) || r.state.progress.Step != 4 {
		t.Fatalf("a line split across writes was not joined: %+v", r.state.progress)
	}
	if r.state.badCount != 1 || !strings.Contains(r.state.badSamples[0].Reason, "longer than") || r.state.badSamples[0].Line != 4 {
		t.Errorf("overlong line: %d bad, %+v", r.state.badCount, r.state.badSamples)
	}
	if len(r.state.badSamples[0].Text) != badLineTextBytes {
		t.Errorf("bad line text kept %d bytes, want %d", len(r.state.badSamples[0].Text), badLineTextBytes)
	}
	write(`{"type":"progress","step":5}`)
	if read(false) {
		t.Error("an unterminated line was applied before the job ended")
	}
	if !read(true) || r.state.progress.Step != 5 || !r.state.progress.At.Equal(now()) {
		t.Errorf("the final unterminated line was not applied: %+v", r.state.progress)
	}
}

func TestStatusStateKeepsFirstBadSamples(t *testing.T) {
	s := newStatusState(t.TempDir(), nil, time.Time{})
	for i := range maxBadSamples + 5 {
		line := []byte("bad")
		s.reject(i+1, line, s.apply(line, time.Time{}), discardLog)
	}
	if s.badCount != maxBadSamples+5 || len(s.badSamples) != maxBadSamples || s.badSamples[0].Line != 1 {
		t.Errorf("count %d, %d samples starting at line %d", s.badCount, len(s.badSamples), s.badSamples[0].Line)
	}
}

func TestStopReasonOf(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	caused, cancel3 := context.WithCancelCause(context.Background())
	cancel3(StopCancel)
	for _, tt := range []struct {
		ctx  context.Context
		want StopReason
	}{{cancelled, StopPreemption}, {expired, StopDeadline}, {caused, StopCancel}} {
		if got := stopReasonOf(tt.ctx); got != tt.want {
			t.Errorf("stopReasonOf(%v) = %q, want %q", context.Cause(tt.ctx), got, tt.want)
		}
	}
}

// BenchmarkStatusReaderFeed measures parsing and applying progress lines, the
// bulk of a status file.
func BenchmarkStatusReaderFeed(b *testing.B) {
	var chunk []byte
	for i := range 1000 {
		chunk = append(chunk, `{"type":"progress","step":`+strconv.Itoa(i)+"}\n"...)
	}
	now := func() time.Time { return time.Time{} }
	dir := b.TempDir()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		r := &statusReader{state: newStatusState(dir, nil, time.Time{})}
		r.feed(chunk, now, discardLog)
		if r.state.progress.Step != 999 || r.state.badCount != 0 {
			b.Fatalf("state = %+v", r.state)
		}
	}
}
