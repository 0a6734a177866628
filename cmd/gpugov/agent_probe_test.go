package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv/nvmltest"
)

// useNVML makes the agent read lib instead of the machine's NVML until the
// test ends.
func useNVML(t *testing.T, lib nvml.Interface) {
	t.Helper()
	prev := newNVMLCollector
	newNVMLCollector = func(node, pool string) *nvmlinv.Collector {
		c := prev(node, pool)
		c.Lib = lib
		return c
	}
	t.Cleanup(func() { newNVMLCollector = prev })
}

// probeNodes decodes the probe's output: a JSON array of node inventories.
func probeNodes(t *testing.T, out string) []inventory.NodeInventory {
	t.Helper()
	var nodes []inventory.NodeInventory
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatalf("probe output is not a JSON array of node inventories: %v\n%s", err, out)
	}
	return nodes
}

// TestAgentProbePrintsNVMLInventory: `gpugov agent --probe` on a DGX A100
// (go-nvml's mock) prints the node as NVML reports it — eight GPUs with
// their UUIDs, model, memory, one NVSwitch domain and versions — as JSON,
// without needing --pool, --api or Temporal.
func TestAgentProbePrintsNVMLInventory(t *testing.T) {
	useNVML(t, nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll))
	out, _, err := runGpugov(context.Background(), "agent", "--probe", "--node", "dgx-01")
	if err != nil {
		t.Fatalf("agent --probe: %v", err)
	}
	nodes := probeNodes(t, out)
	if len(nodes) != 1 {
		t.Fatalf("probe printed %d nodes, want 1", len(nodes))
	}
	n := nodes[0]
	if n.Node != "dgx-01" || n.Source != inventory.SourceNVML || n.DriverVersion == "" || n.CUDAVersion != "12.4" ||
		len(n.GPUs) != nvmltest.GPUCount {
		t.Fatalf("node %s from %s, driver %q, CUDA %q, %d GPUs; want dgx-01 from NVML with CUDA 12.4 and %d GPUs",
			n.Node, n.Source, n.DriverVersion, n.CUDAVersion, len(n.GPUs), nvmltest.GPUCount)
	}
	for i, g := range n.GPUs {
		if g.Index != i || g.UUID != nvmltest.UUID(i) || !strings.HasPrefix(g.Model, "A100") || g.MemoryTotalMiB != 40960 ||
			g.NVLinkDomain != "nvlink-0" || len(g.NVLinkPeers) != nvmltest.GPUCount-1 || !g.Healthy {
			t.Errorf("GPU %d = %+v, want %s, an A100 of 40960 MiB, healthy, in domain nvlink-0 with 7 peers", i, g, nvmltest.UUID(i))
		}
	}
}

// TestAgentProbeWithoutNVML: with no NVML library or no kernel driver the
// probe prints nothing and fails with an error that says so and names
// --inventory-file; it is not a usage error, so the exit status is 1.
func TestAgentProbeWithoutNVML(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		mock := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
		mock.InitFunc = func() nvml.Return { return ret }
		useNVML(t, mock)
		out, _, err := runGpugov(context.Background(), "agent", "--probe")
		var usage usageError
		if !errors.Is(err, nvmlinv.ErrUnavailable) || errors.As(err, &usage) || !strings.Contains(err.Error(), "--inventory-file FILE") {
			t.Errorf("Init %s: err = %v, want the no-NVML explanation (exit status 1)", nvmlinv.ReturnName(ret), err)
		}
		if out != "" {
			t.Errorf("Init %s: probe printed %q", nvmlinv.ReturnName(ret), out)
		}
	}
}

// TestAgentProbeStaticFile: with --inventory-file the probe prints the
// file's selected nodes instead of reading NVML.
func TestAgentProbeStaticFile(t *testing.T) {
	out, _, err := runGpugov(context.Background(), "agent", "--probe",
		"--inventory-file", "../../internal/inventory/static/testdata/inventory.yaml", "--pool", "t4-west")
	if err != nil {
		t.Fatalf("agent --probe --inventory-file: %v", err)
	}
	nodes := probeNodes(t, out)
	if len(nodes) != 1 || nodes[0].Node != "t4-west-01" || nodes[0].Source != inventory.SourceStatic || len(nodes[0].GPUs) != 2 {
		t.Fatalf("probe printed %+v, want node t4-west-01 with 2 GPUs from the file", nodes)
	}
}

// probeHelperEnv makes TestAgentProbeHelperProcess run gpugov's main.
const probeHelperEnv = "GPUGOV_TEST_AGENT_PROBE_MAIN"

// TestAgentProbeHelperProcess is not a test: run by TestAgentProbeOnThisMachine
// with probeHelperEnv set, it is `gpugov agent --probe --node probe-node`.
func TestAgentProbeHelperProcess(t *testing.T) {
	if os.Getenv(probeHelperEnv) != "1" {
		t.Skip("helper process of TestAgentProbeOnThisMachine")
	}
	os.Args = []string{"gpugov", "agent", "--probe", "--node", "probe-node"}
	main()
	os.Exit(0)
}

// TestAgentProbeOnThisMachine runs `gpugov agent --probe` as a process
// against this machine's real NVML. Without a driver (as on the machines
// that build gpugov) it must exit 1 with the no-NVML explanation on stderr
// and nothing on stdout; with one it must exit 0 and print the node's GPUs.
func TestAgentProbeOnThisMachine(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentProbeHelperProcess$")
	cmd.Env = append(os.Environ(), probeHelperEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		nodes := probeNodes(t, stdout.String())
		if len(nodes) != 1 || nodes[0].Node != "probe-node" || len(nodes[0].GPUs) == 0 {
			t.Fatalf("probe with a driver printed %+v, want node probe-node with its GPUs", nodes)
		}
		t.Logf("NVML here: %d GPU(s), driver %s: %s", len(nodes[0].GPUs), nodes[0].DriverVersion, stdout.String())
	case errors.As(err, &exit):
		msg := stderr.String()
		if exit.ExitCode() != 1 || !strings.HasPrefix(msg, "gpugov: NVML is not available on this machine") ||
			!strings.Contains(msg, "--inventory-file FILE") || stdout.Len() != 0 {
			t.Fatalf("probe without a driver: exit %d, stderr %q, stdout %q; want exit 1 and the no-NVML explanation",
				exit.ExitCode(), msg, stdout.String())
		}
		t.Logf("no NVML here: exit %d, %s", exit.ExitCode(), strings.TrimSpace(msg))
	default:
		t.Fatal(err)
	}
}
