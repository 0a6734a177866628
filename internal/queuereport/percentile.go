package queuereport

import "math"

// NearestRank returns the 1-based rank of the p-th percentile (1 ≤ p ≤ 100) in
// a sorted sample of n values by the nearest-rank method:
//
//	rank = ⌈p/100 × n⌉
//
// so the percentile is always one of the observed values and P100 is the
// maximum. This is definition 1 (the inverse of the empirical distribution
// function) of Hyndman & Fan, "Sample Quantiles in Statistical Packages", The
// American Statistician 50(4), 1996, and the "nearest-rank method" of
// Wikipedia's "Percentile" article. The rank is computed in integers,
// (p·n + 99) / 100, so that no floating-point error moves it (0.95 × 20 is not
// exactly 19 in float64). It returns 0 when n ≤ 0 or p is outside 1..100.
func NearestRank(n, p int) int {
	if n <= 0 || p < 1 || p > 100 {
		return 0
	}
	return (p*n + 99) / 100
}

// Percentile returns the p-th nearest-rank percentile of sorted (ascending),
// and false when sorted is empty or p is outside 1..100.
func Percentile(sorted []float64, p int) (float64, bool) {
	r := NearestRank(len(sorted), p)
	if r == 0 {
		return 0, false
	}
	return sorted[r-1], true
}

// waitStats returns the number of samples in the sorted lists and their P50,
// P95, P99 and maximum in seconds (nil when there are none).
func waitStats(lists [][]int64) (n int, p50, p95, p99, pmax *float64) {
	for _, l := range lists {
		n += len(l)
	}
	if n == 0 {
		return 0, nil, nil, nil, nil
	}
	at := func(p int) *float64 { return secondsPtr(kthOf(lists, NearestRank(n, p))) }
	return n, at(50), at(95), at(99), at(100)
}

// kthOf returns the k-th smallest value (1-based) of the union of sorted
// lists. With several lists it searches the value rather than merging: the
// answer is the smallest v with k values ≤ v, found by bisection over the
// value range with one binary search per list per step, O(64 · L · log n)
// for L lists instead of sorting all n values.
func kthOf(lists [][]int64, k int) int64 {
	if len(lists) == 1 {
		return lists[0][k-1]
	}
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, l := range lists {
		if len(l) > 0 {
			lo, hi = min(lo, l[0]), max(hi, l[len(l)-1])
		}
	}
	for lo < hi {
		mid := lo + int64((uint64(hi)-uint64(lo))/2)
		atMost := 0
		for _, l := range lists {
			atMost += upperBound(l, mid)
		}
		if atMost >= k {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// upperBound returns the number of elements ≤ v in sorted.
func upperBound(sorted []int64, v int64) int {
	lo, hi := 0, len(sorted)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if sorted[m] <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func secondsPtr(ns int64) *float64 {
	s := float64(ns) / 1e9
	return &s
}

func floatPtr(v float64) *float64 { return &v }
