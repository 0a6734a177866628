package queuereport

import (
	"cmp"
	"slices"
)

// Radix sorts for the long lists of nanosecond times the report orders (run
// starts, releases): least-significant-digit first, 11-bit digits of the
// offset from the smallest value, skipping the digits every value shares.
// For a month of nanoseconds that is five linear passes instead of the
// n·log n comparisons of a comparison sort.

const (
	radixBits    = 11
	radixBuckets = 1 << radixBits
	radixMin     = 256 // below this a comparison sort is as quick
)

// sortInt64s sorts a ascending; tmp must have len(a) and may be overwritten.
// It returns the sorted slice, which is a or tmp.
func sortInt64s(a, tmp []int64) []int64 {
	if len(a) < radixMin {
		slices.Sort(a)
		return a
	}
	lo, hi := slices.Min(a), slices.Max(a)
	span := uint64(hi - lo)
	var count [radixBuckets + 1]int
	for shift := 0; shift < 64 && span>>shift != 0; shift += radixBits {
		clear(count[:])
		for _, v := range a {
			count[(uint64(v-lo)>>shift)&(radixBuckets-1)+1]++
		}
		for d := 1; d <= radixBuckets; d++ {
			count[d] += count[d-1]
		}
		for _, v := range a {
			d := (uint64(v-lo) >> shift) & (radixBuckets - 1)
			tmp[count[d]] = v
			count[d]++
		}
		a, tmp = tmp, a
	}
	return a
}

// sortStartRefs sorts a by start, keeping the order of equal starts; tmp must
// have len(a). It returns the sorted slice, which is a or tmp.
func sortStartRefs(a, tmp []startRef) []startRef {
	if len(a) < radixMin {
		slices.SortStableFunc(a, func(x, y startRef) int { return cmp.Compare(x.start, y.start) })
		return a
	}
	lo, hi := a[0].start, a[0].start
	for _, r := range a {
		lo, hi = min(lo, r.start), max(hi, r.start)
	}
	span := uint64(hi - lo)
	var count [radixBuckets + 1]int
	for shift := 0; shift < 64 && span>>shift != 0; shift += radixBits {
		clear(count[:])
		for _, r := range a {
			count[(uint64(r.start-lo)>>shift)&(radixBuckets-1)+1]++
		}
		for d := 1; d <= radixBuckets; d++ {
			count[d] += count[d-1]
		}
		for _, r := range a {
			d := (uint64(r.start-lo) >> shift) & (radixBuckets - 1)
			tmp[count[d]] = r
			count[d]++
		}
		a, tmp = tmp, a
	}
	return a
}
