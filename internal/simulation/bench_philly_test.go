package simulation

import (
	"os"
	"testing"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/trace/philly"
)

// BenchmarkSimulatePhilly simulates the whole shared Philly trace (82,247
// jobs, 352 nodes × 8 GPUs) under deploy/gpugov/philly-fifo.yaml, reading
// it once outside the timer; skipped when the trace is absent. Target: one
// run ≤ 60 s (issue 14).
func BenchmarkSimulatePhilly(b *testing.B) {
	files := philly.FilesIn("../../../shared/traces/philly-2017")
	if _, err := os.Stat(files.Jobs); err != nil {
		b.Skip("the shared Philly trace is absent")
	}
	src, err := philly.Read(files, philly.Options{})
	if err != nil {
		b.Fatal(err)
	}
	pol, err := policy.Load("../../deploy/gpugov/philly-fifo.yaml")
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := FromPolicy(pol)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := Run(Input{Source: src}, cfg, nil); err != nil {
			b.Fatal(err)
		}
	}
}
