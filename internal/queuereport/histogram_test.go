package queuereport

import (
	"testing"
	"time"
)

// TestWaitHistogramBins: a wait exactly on an edge counts in the bin that
// starts there, every bin is listed, the last is open, and the bins of
// several sorted lists add up as one list would.
func TestWaitHistogramBins(t *testing.T) {
	s := func(d time.Duration) int64 { return int64(d) }
	lists := [][]int64{
		{0, s(999 * time.Millisecond), s(time.Second), s(90 * time.Second)},
		{s(time.Second), s(48 * time.Hour)},
	}
	got := waitHistogram(lists)
	if len(got) != len(WaitHistogramEdges) {
		t.Fatalf("%d bins, want %d", len(got), len(WaitHistogramEdges))
	}
	want := map[float64]int{0: 2, 1: 2, 60: 1, 86400: 1} // low edge (s) → count
	total := 0
	for i, b := range got {
		total += b.Count
		if b.Count != want[b.LowS] {
			t.Errorf("bin %d [%g, %v): %d, want %d", i, b.LowS, b.HighS, b.Count, want[b.LowS])
		}
		if (b.HighS == nil) != (i == len(got)-1) {
			t.Errorf("bin %d: high %v; only the last bin is open", i, b.HighS)
		}
	}
	if total != 6 {
		t.Errorf("bins count %d waits, want 6", total)
	}
	if empty := waitHistogram(nil); len(empty) != len(WaitHistogramEdges) || empty[0].Count != 0 {
		t.Errorf("no waits: %+v", empty)
	}
}
