package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const phillyFixtures = "../../internal/trace/philly/testdata"

// phillyDir copies the Philly fixture files into a folder under their trace
// names, with jobs as philly.csv (and the node sequence the mimic policy
// derives its background from).
func phillyDir(t *testing.T, jobs string) string {
	t.Helper()
	dir := t.TempDir()
	for dst, src := range map[string]string{"philly.csv": jobs, "philly_vc.csv": "vcs_good.csv", "multigpu_pass_jobs_with_vc.csv": "recorded_good.csv",
		"philly_node_sequence.csv": "nodeseq_good.csv"} {
		b, err := os.ReadFile(filepath.Join(phillyFixtures, src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSimulatePhilly runs `simulate --trace philly` on the fixture under the
// mimic policy: the JSON report names the trace, carries the fidelity rows
// and states the sizing assumption.
func TestSimulatePhilly(t *testing.T) {
	out, _, err := runSimulateArgs(t, "--trace", "philly", "--philly-dir", phillyDir(t, "jobs_good.csv"),
		"--policy", "../../deploy/gpugov/philly-fifo.yaml", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Trace    string `json:"trace"`
		GPUs     int    `json:"gpus"`
		Fidelity struct {
			Rows []struct {
				Group string `json:"group"`
			} `json:"rows"`
		} `json:"fidelity"`
		Assumptions []string `json:"assumptions"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if r.Trace != "philly" || r.GPUs != 24 || len(r.Fidelity.Rows) == 0 || r.Fidelity.Rows[0].Group != "all" ||
		!strings.Contains(strings.Join(r.Assumptions, "\n"), "one pool of 3 nodes × 8 GPUs") {
		t.Errorf("report %+v", r)
	}
	text, _, err := runSimulateArgs(t, "--trace", "philly", "--philly-dir", phillyDir(t, "jobs_good.csv"), "--philly-gpus-per-node", "4")
	if err != nil || !strings.Contains(text, "fidelity to the recorded waits") || !strings.Contains(text, "3 nodes × 4 GPUs") {
		t.Errorf("text report (%v):\n%s", err, text)
	}
}

// TestSimulatePhillyErrors checks the usage errors (exit 2): a malformed
// row named by file and line, Alibaba flags with --trace philly, Philly
// flags without it, and an unknown format.
func TestSimulatePhillyErrors(t *testing.T) {
	dir := phillyDir(t, "jobs_bad_gpus.csv")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--trace", "philly", "--philly-dir", dir}, filepath.Join(dir, "philly.csv") + ":2: num_gpus 0 is below 1"},
		{[]string{"--trace", "philly", "--philly-dir", dir, "--nodes", "x.csv"}, "--nodes goes with --trace alibaba"},
		{[]string{"--nodes", simNodes, "--pods", simPods, "--philly-gpus-per-node", "4"}, "--philly-gpus-per-node goes with --trace philly"},
		{[]string{"--trace", "helios"}, `--trace "helios": want alibaba or philly`},
		{[]string{"--trace", "philly", "--philly-dir", dir, "--philly-gpus-per-node", "0"}, "--philly-gpus-per-node 0"},
	}
	for _, c := range cases {
		_, _, err := runSimulateArgs(t, c.args...)
		if err == nil || !isUsageError(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want a usage error with %q", c.args, err, c.want)
		}
	}
}
