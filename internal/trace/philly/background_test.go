package philly

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/trace"
)

// TestBackgroundDerivation derives the background of the small fixture by
// hand. Pool: 3 nodes × 8 = 24 GPUs; epoch 2017-10-01 00:00; steps of 1 h.
//
//	hour  9: samples 2/4, 3/4 → busy 0.625 × 24 = 15; jobs: the 8-GPU job from 09:59 → 60 s × 8 = 480 GPU-s
//	         → 0.13 GPUs; background round(15 − 0.13) = 15
//	hour 10: samples 1/2 (0/2 is a log gap, not used) → busy 12; jobs: 540 s × 8 + 100 s × 1 + 3600 s × 4
//	         = 18,820 GPU-s → 5.23 GPUs; background round(6.77) = 7
//	hour 11: 4/4 → 24, no job → 24
//	hour 12: only a 0-active sample → keeps 24 (no entry)
//	hour 13: 2/4 → 12 → 12; the coverage ends at 14:00 → 0
func TestBackgroundDerivation(t *testing.T) {
	f := goodFiles()
	f.NodeSequence = "testdata/nodeseq_good.csv"
	src, err := Read(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := src.Trace(trace.Options{Pool: "philly", BackgroundStepS: 3600})
	if err != nil {
		t.Fatal(err)
	}
	want := []trace.Occupancy{{At: 9 * 3600, GPUs: 15}, {At: 10 * 3600, GPUs: 7}, {At: 11 * 3600, GPUs: 24},
		{At: 13 * 3600, GPUs: 12}, {At: 14 * 3600, GPUs: 0}}
	if !slices.Equal(tr.Background, want) {
		t.Fatalf("background %v, want %v", tr.Background, want)
	}
	_, st := Background(src.NodeSeq, tr.Jobs, tr.Epoch, 3600, 24)
	if st.Steps != 5 || st.EmptySteps != 1 || st.MaxHeld != 24 || st.ClampedSteps != 0 || st.FromS != 9*3600 || st.ToS != 14*3600 {
		t.Errorf("stats %+v", st)
	}
	if !strings.Contains(tr.Assumptions[len(tr.Assumptions)-1], "background occupancy (simulation.background_step_s 3600)") {
		t.Errorf("no background assumption: %q", tr.Assumptions[len(tr.Assumptions)-1])
	}
	// Without the option there is none; asking without a node sequence is an error.
	if tr, _ := src.Trace(trace.Options{Pool: "philly"}); len(tr.Background) != 0 {
		t.Errorf("background without background_step_s: %v", tr.Background)
	}
	src.NodeSeq = nil
	if _, err := src.Trace(trace.Options{Pool: "philly", BackgroundStepS: 3600}); err == nil || !strings.Contains(err.Error(), "philly_node_sequence.csv") {
		t.Errorf("error %v, want one naming the node sequence", err)
	}
}

// TestBackgroundClamped: jobs that alone exceed the busy share give 0, never
// a negative background.
func TestBackgroundClamped(t *testing.T) {
	f := goodFiles()
	f.NodeSequence = "testdata/nodeseq_good.csv"
	src, err := Read(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := src.Trace(trace.Options{Pool: "philly"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range tr.Jobs {
		tr.Jobs[i].RunSeconds *= 100
	}
	occ, st := Background(src.NodeSeq, tr.Jobs, tr.Epoch, 3600, 24)
	if st.ClampedSteps == 0 {
		t.Fatalf("no step clamped: %v", occ)
	}
	for _, o := range occ {
		if o.GPUs < 0 || o.GPUs > 24 {
			t.Errorf("step %+v outside 0..24", o)
		}
	}
}

func TestReadNodeSequenceErrors(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"testdata/nodeseq_bad_order.csv", "testdata/nodeseq_bad_order.csv:3: time 2017-10-01 09:00:00 is not after the previous row's 2017-10-01 09:00:00"},
		{"testdata/nodeseq_bad_active.csv", "testdata/nodeseq_bad_active.csv:2: active 5 is above total 4"},
	} {
		_, err := ReadNodeSequence(c.path)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: error %v, want %q", c.path, err, c.want)
		}
	}
	rows, err := ReadNodeSequence("testdata/nodeseq_good.csv")
	if err != nil || len(rows) != 7 || rows[3].Active != 0 || rows[3].Total != 2 || rows[3].Line != 5 {
		t.Fatalf("rows %+v, err %v", rows, err)
	}
}
