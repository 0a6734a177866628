package process

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// FuzzStatusFile fuzzes the node agent's reader of a job's status file (the
// protocol of docs/job-protocol.md): lines fed in two chunks split at cut,
// the last unterminated line counted as at the job's exit. Properties: no
// panic; every rejected line is kept with its line number (1-based, at most
// the lines read) and a reason; the accepted steps are inside
// vocab.MaxTotalSteps and never go back; and where the chunks are cut does
// not change the outcome.
func FuzzStatusFile(f *testing.F) {
	for _, s := range []string{
		"{\"type\":\"started\",\"from_step\":0}\n{\"type\":\"progress\",\"step\":10}\n{\"type\":\"checkpoint\",\"step\":10,\"location\":\"ck\"}\n",
		"{\"type\":\"progress\",\"step\":3}\n{\"type\":\"started\",\"from_step\":0}\n{\"type\":\"progress\",\"step\":2}\n",
		"{\"type\":\"progress\",\"step\":9223372036854775807}\n{\"type\":\"checkpoint\",\"step\":9007199254740993,\"location\":\"s3://b/c\"}\n",
		"{\"type\":\"progress\",\"step\":1.5}\n[1,2]\nnull\n\n   \n{\"type\":\"x\"}\n{\"type\":\"checkpoint\",\"step\":1}",
		"{\"type\":\"checkpoint\",\"step\":4,\"location\":\"../../etc/passwd\"}\n{\"type\":\"checkpoint\",\"step\":5,\"location\":\"missing\"}\n",
		"{\"type\":\"started\",\"from_step\":-1}\n{\"type\":\"started\",\"from_step\":1}\n{\"type\":\"started\",\"from_step\":2}\n",
	} {
		f.Add([]byte(s), uint16(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "ck"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		now := func() time.Time { return at }
		run := func(chunks ...[]byte) *statusReader {
			r := &statusReader{state: newStatusState(dir, nil, at)}
			for _, c := range chunks {
				r.feed(c, now, discardLog)
			}
			if len(r.pending) > 0 || r.overlong {
				r.endLine(now, discardLog)
			}
			return r
		}
		k := min(int(cut), len(data))
		whole, split := run(data), run(data[:k], data[k:])
		if !reflect.DeepEqual(whole.state, split.state) || whole.lineNo != split.lineNo {
			t.Fatalf("cutting the file at %d changed the outcome:\n%+v\n%+v", k, whole.state, split.state)
		}
		st := whole.state
		for _, b := range st.badSamples {
			if b.Line < 1 || b.Line > whole.lineNo || b.Reason == "" {
				t.Fatalf("bad line without its number or reason: %+v (lines read %d)", b, whole.lineNo)
			}
		}
		if st.badCount < len(st.badSamples) || len(st.badSamples) > maxBadSamples {
			t.Fatalf("%d bad lines, %d kept", st.badCount, len(st.badSamples))
		}
		p := st.progress
		if p.Step < 0 || p.Step > vocab.MaxTotalSteps || p.StartedFromStep > p.Step {
			t.Fatalf("accepted progress out of bounds: %+v", p)
		}
		if cp := p.LastCheckpoint; cp != nil && (cp.Step < 0 || cp.Step > p.Step) {
			t.Fatalf("accepted checkpoint step %d outside 0..%d", cp.Step, p.Step)
		}
	})
}
