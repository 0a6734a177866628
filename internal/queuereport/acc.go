package queuereport

import "cmp"

// secAcc sums weight × duration exactly, without overflow for any realistic
// input: whole weighted seconds and the weighted nanosecond remainder are kept
// apart, so the sum does not depend on the order of the records (the service and
// the simulator may feed them in different orders).
type secAcc struct {
	sec int64 // weighted whole seconds
	ns  int64 // weighted nanoseconds, always below 1e9
}

const nsPerSec = int64(1e9)

// add adds weight × d, d in nanoseconds (d ≥ 0, weight ≥ 0).
func (a *secAcc) add(weight, d int64) {
	a.sec += weight * (d / nsPerSec)
	f := a.ns + weight*(d%nsPerSec)
	a.sec += f / nsPerSec
	a.ns = f % nsPerSec
}

// merge adds b to a.
func (a *secAcc) merge(b secAcc) {
	a.sec += b.sec
	f := a.ns + b.ns
	a.sec += f / nsPerSec
	a.ns = f % nsPerSec
}

// seconds returns the sum in weighted seconds.
func (a secAcc) seconds() float64 {
	return float64(a.sec) + float64(a.ns)/1e9
}

func (a secAcc) isZero() bool { return a.sec == 0 && a.ns == 0 }

// compare orders two sums: -1, 0 or +1 as a is below, equal to or above b.
// Sums are exact, so equal means a tie, not "within rounding".
func (a secAcc) compare(b secAcc) int {
	return cmp.Or(cmp.Compare(a.sec, b.sec), cmp.Compare(a.ns, b.ns))
}

// reasonAcc is the time spent in one wait reason: job-seconds (each
// waiting job weighs 1) and milli-GPU-seconds (each weighs its request's
// demand in milli-GPU, Request.DemandMilli).
type reasonAcc struct {
	job, gpu secAcc
}

// merge adds b to a.
func (a *reasonAcc) merge(b reasonAcc) {
	a.job.merge(b.job)
	a.gpu.merge(b.gpu)
}
