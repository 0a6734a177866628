package queuereport

import (
	"slices"
	"time"
)

// WaitHistogramEdges are the lower edges of the wait histogram's bins
// (Options.WaitHistogram): bin i counts the initial waits w with
// edge[i] ≤ w < edge[i+1], the last bin every wait from its edge up. The
// edges are roughly logarithmic (1-2-5 steps, then the minutes and hours
// operators set objectives in), so that the seconds-long waits of a
// compressed replay and the hours-long waits of a busy pool both spread
// over several bins.
var WaitHistogramEdges = []time.Duration{
	0, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 24 * time.Hour,
}

// HistogramBin is one bin of a wait histogram: Count initial waits (the
// samples of wait_p50_s … wait_max_s) of at least LowS seconds and below
// HighS (absent for the last, open bin).
type HistogramBin struct {
	LowS  float64  `json:"low_s"`
	HighS *float64 `json:"high_s,omitempty"`
	Count int      `json:"count"`
}

// waitHistogram counts the values (ns) of the sorted lists into the bins of
// WaitHistogramEdges; every bin is listed, empty ones with count 0, so the
// bins of two reports line up.
func waitHistogram(lists [][]int64) []HistogramBin {
	out := make([]HistogramBin, len(WaitHistogramEdges))
	below := func(ns int64) int { // values < ns over every list
		n := 0
		for _, l := range lists {
			i, _ := slices.BinarySearch(l, ns)
			n += i
		}
		return n
	}
	prev := 0
	for i, e := range WaitHistogramEdges {
		out[i].LowS = e.Seconds()
		if i+1 < len(WaitHistogramEdges) {
			hi := WaitHistogramEdges[i+1]
			out[i].HighS = floatPtr(hi.Seconds())
			n := below(int64(hi))
			out[i].Count, prev = n-prev, n
			continue
		}
		total := 0
		for _, l := range lists {
			total += len(l)
		}
		out[i].Count = total - prev
	}
	return out
}
