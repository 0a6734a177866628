package simulation

import (
	"encoding/csv"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/trace/philly"
)

// recordedStats computes, straight from a multigpu_pass_jobs_with_vc.csv
// file and without the package's helpers, the count, mean, nearest-rank
// p50 and p90 of queue_delay_seconds for all rows, per GPU bucket and per
// vc ("?" for an empty one), keyed as the fidelity rows are.
func recordedStats(t *testing.T, path string) map[string][4]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	waits := map[string][]float64{}
	for _, r := range recs[1:] {
		gpus, err1 := strconv.Atoi(r[2])
		d, err2 := strconv.ParseFloat(r[8], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("row %v", r)
		}
		b := ">8"
		if gpus == 1 {
			b = "1"
		} else if gpus <= 4 {
			b = "2-4"
		} else if gpus <= 8 {
			b = "5-8"
		}
		vc := r[1]
		if vc == "" {
			vc = "?"
		}
		for _, g := range []string{"all", "gpus " + b, "vc " + vc} {
			waits[g] = append(waits[g], d)
		}
	}
	out := map[string][4]float64{}
	for g, w := range waits {
		slices.Sort(w)
		sum := 0.0
		for _, x := range w {
			sum += x
		}
		rank := func(p float64) float64 { return w[int(math.Ceil(p/100*float64(len(w))))-1] }
		out[g] = [4]float64{float64(len(w)), sum / float64(len(w)), rank(50), rank(90)}
	}
	return out
}

// checkRecordedColumns runs the Philly trace in dir (files) under the
// policy file and compares the fidelity report's recorded columns with
// recordedStats of the recorded file.
func checkRecordedColumns(t *testing.T, files philly.Files, policyFile string) *Report {
	t.Helper()
	src, err := philly.Read(files, philly.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(Input{Source: src}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Fidelity == nil {
		t.Fatal("no fidelity report for a Philly trace")
	}
	want := recordedStats(t, files.Recorded)
	if len(r.Fidelity.Rows) != len(want) {
		t.Errorf("%d fidelity rows, want %d groups", len(r.Fidelity.Rows), len(want))
	}
	for _, row := range r.Fidelity.Rows {
		w, ok := want[row.Group]
		if !ok {
			t.Errorf("group %q is not in the recorded file", row.Group)
			continue
		}
		got := row.Recorded
		if float64(got.N) != w[0] || math.Abs(*got.MeanS-w[1]) > 1e-6 || float64(*got.P50S) != w[2] || float64(*got.P90S) != w[3] {
			t.Errorf("group %s: recorded n %d mean %v p50 %d p90 %d, from the file n %v mean %v p50 %v p90 %v",
				row.Group, got.N, *got.MeanS, *got.P50S, *got.P90S, w[0], w[1], w[2], w[3])
		}
		if row.Simulated.N+row.NotStarted > got.N {
			t.Errorf("group %s: %d simulated + %d not started of %d recorded", row.Group, row.Simulated.N, row.NotStarted, got.N)
		}
	}
	return r
}

// TestFidelityRecordedColumns checks the fidelity report on the small
// Philly fixture: recorded columns as computed from the file, the matched
// jobs simulated, the unmatched one (no VC) recorded only, and the
// published figure carried.
func TestFidelityRecordedColumns(t *testing.T) {
	files := philly.Files{Jobs: "../trace/philly/testdata/jobs_good.csv", VCs: "../trace/philly/testdata/vcs_good.csv",
		Recorded: "../trace/philly/testdata/recorded_good.csv", NodeSequence: "../trace/philly/testdata/nodeseq_good.csv"}
	r := checkRecordedColumns(t, files, "../../deploy/gpugov/philly-fifo.yaml")
	all := r.Fidelity.Rows[0]
	if all.Group != "all" || all.Simulated.N != 2 || all.Recorded.N != 3 {
		t.Errorf("all: %+v", all)
	}
	if len(r.Fidelity.Published) != 1 || r.Fidelity.Published[0].MedianS != 189 || r.Fidelity.Published[0].Simulated.N != 5 {
		t.Errorf("published %+v", r.Fidelity.Published)
	}
	if r.Trace != philly.Format {
		t.Errorf("trace %q", r.Trace)
	}
}

// TestFidelityRecordedColumnsRealTrace is TestFidelityRecordedColumns on
// the whole shared Philly trace (skipped when it is absent or with -short).
func TestFidelityRecordedColumnsRealTrace(t *testing.T) {
	files := philly.FilesIn("../../../shared/traces/philly-2017")
	if _, err := os.Stat(files.Recorded); err != nil || testing.Short() {
		t.Skip("the shared Philly trace is absent, or -short")
	}
	r := checkRecordedColumns(t, files, "../../deploy/gpugov/philly-fifo.yaml")
	if r.Fidelity.Rows[0].Recorded.N != 3034 || r.Fidelity.Rows[0].Simulated.N+r.Fidelity.Rows[0].NotStarted != 3024 {
		t.Errorf("all: %+v", r.Fidelity.Rows[0])
	}
}
