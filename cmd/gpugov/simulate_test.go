package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/policy"
)

// runSimulateArgs runs a fresh `simulate` command with args and returns its
// stdout, stderr and error.
func runSimulateArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newSimulateCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

const (
	simNodes    = "../../internal/simulation/testdata/nodes_two_t4.csv"
	simPods     = "../../internal/simulation/testdata/pods_small.csv"
	simBadPods  = "../../internal/trace/alibaba/testdata/pods_mixed.csv"
	simBadNodes = "../../internal/trace/alibaba/testdata/pods_good.csv" // a pod file is not a node list
)

func isUsageError(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}

func TestSimulateJSON(t *testing.T) {
	out, progress, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simPods, "--format", "json", "--seed", "42")
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Seed   uint64 `json:"seed"`
		Groups []struct {
			Tier string `json:"tier"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if report.Seed != 42 || len(report.Groups) != 4 || report.Groups[0].Tier != "production" {
		t.Fatalf("report %+v", report)
	}
	if !strings.Contains(progress, "simulate: done at") {
		t.Fatalf("stderr %q has no progress", progress)
	}
}

func TestSimulateText(t *testing.T) {
	out, _, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simPods)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"production", "experiment", "assumptions:", "seconds per wait reason:"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
}

// TestSimulatePolicyFile: --policy governs the run (the file's seed and the
// stage of its simulation pool) and the report names the hash of the policy
// it ran under, the hash serve stores for the same rules, in JSON and text.
func TestSimulatePolicyFile(t *testing.T) {
	const file = "../../internal/simulation/testdata/policy_good.yaml"
	p, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simPods, "--format", "json", "--policy", file)
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		PolicyVersion string `json:"policy_version"`
		Seed          uint64 `json:"seed"`
		Stage         string `json:"stage"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if report.PolicyVersion != p.Hash() || report.Seed != 7 || report.Stage != "observe" {
		t.Fatalf("report policy %q seed %d stage %s, want policy %s, seed 7 and stage observe from %s",
			report.PolicyVersion, report.Seed, report.Stage, p.Hash(), file)
	}
	text, _, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simPods, "--policy", file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "policy "+p.Hash()) {
		t.Errorf("text output does not name policy %s:\n%s", p.Hash(), text)
	}
	def, _, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simPods)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "policy "+policy.Default().Hash()) {
		t.Errorf("without --policy the text output does not name the default policy's hash %s", policy.Default().Hash())
	}
}

func TestSimulateBadInput(t *testing.T) {
	badPolicy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte("version: gpugov.policy/v1\npools:\n  alibaba: {stage: later}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"malformed pod row", []string{"--nodes", simNodes, "--pods", simBadPods}, simBadPods + `:3: unknown qos "Gold"`},
		{"malformed node list", []string{"--nodes", simBadNodes, "--pods", simPods}, simBadNodes + ":1: header is"},
		{"missing file", []string{"--nodes", simNodes, "--pods", "absent.csv"}, "absent.csv"},
		{"no nodes", []string{"--pods", simPods}, "--nodes is required"},
		{"no pods", []string{"--nodes", simNodes}, "--pods is required"},
		{"bad format", []string{"--nodes", simNodes, "--pods", simPods, "--format", "xml"}, `--format "xml"`},
		{"bad policy", []string{"--nodes", simNodes, "--pods", simPods, "--policy", badPolicy},
			badPolicy + `:3: pools.alibaba.stage: "later" is not observe, trial or automate`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runSimulateArgs(t, tc.args...)
			if err == nil || !isUsageError(err) {
				t.Fatalf("error %v, want a usage error (exit 2)", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

func TestSimulateSkipInvalid(t *testing.T) {
	out, _, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simBadPods, "--skip-invalid", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Skipped struct {
			Count    int      `json:"count"`
			Messages []string `json:"messages"`
		} `json:"skipped_rows"`
		GPUJobs int `json:"gpu_jobs"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatal(err)
	}
	if report.Skipped.Count != 6 || report.GPUJobs != 3 || !strings.HasPrefix(report.Skipped.Messages[0], simBadPods+":3: ") {
		t.Fatalf("skipped %+v, GPU jobs %d", report.Skipped, report.GPUJobs)
	}
}

// TestSimulateInflate: the packing study in text and JSON, and its usage
// errors (exit 2).
func TestSimulateInflate(t *testing.T) {
	const pods = "../../internal/simulation/testdata/pods_inflate.csv"
	out, progress, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", pods, "--inflate", "0.5,1,1.5")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Rule fragmentation", "Rule fgd", "Rule bestfit", "dropped, never retried", "GPU allocation ratio by rule"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(progress, "inflate: fgd: 1.50×") {
		t.Errorf("stderr %q has no progress", progress)
	}
	out, _, err = runSimulateArgs(t, "--nodes", simNodes, "--pods", pods, "--inflate", "1.3", "--rules", "fgd", "--format", "json", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Seed uint64 `json:"seed"`
		Runs []struct {
			Rule string `json:"rule"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Seed != 3 || len(rep.Runs) != 1 || rep.Runs[0].Rule != "fgd" {
		t.Fatalf("json %+v %v", rep, err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"bad ratio":         {[]string{"--nodes", simNodes, "--pods", pods, "--inflate", "1,x"}, `"x" is not a number`},
		"zero ratio":        {[]string{"--nodes", simNodes, "--pods", pods, "--inflate", "0"}, "ratio 0 is not in"},
		"bad rule":          {[]string{"--nodes", simNodes, "--pods", pods, "--inflate", "1", "--rules", "worstfit"}, `unknown placement rule "worstfit"`},
		"rule twice":        {[]string{"--nodes", simNodes, "--pods", pods, "--inflate", "1", "--rules", "fgd,fgd"}, `"fgd" is listed twice`},
		"rules alone":       {[]string{"--nodes", simNodes, "--pods", pods, "--rules", "fgd"}, "--rules goes with --inflate"},
		"malformed pod row": {[]string{"--nodes", simNodes, "--pods", simBadPods, "--inflate", "1"}, simBadPods + `:3: unknown qos "Gold"`},
		"malformed 5-col":   {[]string{"--nodes", simNodes, "--pods", "../../internal/trace/alibaba/testdata/packing_bad.csv", "--inflate", "1"}, "packing_bad.csv:3: gpu_milli 500 with num_gpu 2"},
		"no pods":           {[]string{"--nodes", simNodes, "--inflate", "1"}, "--inflate needs --nodes and --pods"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := runSimulateArgs(t, tc.args...)
			if err == nil || !isUsageError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a usage error with %q", err, tc.want)
			}
		})
	}
}
