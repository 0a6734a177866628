package load

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// renderSamples writes a table of the samples, one at least every stride
// (and the last), with the job pipeline next to serve's memory: what a burst
// and a backlog report show of memory against the pending count.
func renderSamples(b *strings.Builder, samples []MemorySample, stride time.Duration) error {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "at\tpending\tholding\tfinished\trss MiB\theap live MiB\theap in use MiB\tgoroutines\tcycles\tload1\t")
	next := time.Duration(-1)
	for i, s := range samples {
		if s.At < next && i != len(samples)-1 {
			continue
		}
		p := s.Pipeline
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.2f\t\n", s.At.Round(time.Second), p.Pending, p.Holding, p.Finished,
			mib(float64(s.RSSBytes)), mib(float64(s.HeapLiveBytes)), mib(float64(s.HeapInuseBytes)), s.Goroutines, p.Cycles, s.Load1)
		next = s.At + stride
	}
	return tw.Flush()
}

// sampleStride is the stride of a report's sample table: about 30 rows,
// at least 10 s apart.
func sampleStride(samples []MemorySample) time.Duration {
	if n := len(samples); n > 0 {
		return max(10*time.Second, samples[n-1].At/30)
	}
	return 10 * time.Second
}

// renderVerdict writes "PASS: ok" or "FAIL:" and the failures, one a line.
func renderVerdict(b *strings.Builder, pass bool, failures []string, ok string) {
	if pass {
		fmt.Fprintf(b, "%s\n", ok)
		return
	}
	fmt.Fprintf(b, "FAIL:\n")
	for _, f := range failures {
		fmt.Fprintf(b, "  - %s\n", f)
	}
}
