package alibaba

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestWriteReadRoundTrip writes the test trace's rows (and a node with a
// model outside KnownModels) and reads them back: the same rows, lines
// aside; the extra model needs ReadOptions.Models, in node lists and
// gpu_spec alike.
func TestWriteReadRoundTrip(t *testing.T) {
	nodes, err := ReadNodes("testdata/nodes_good.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods, _, err := ReadPods("testdata/pods_good.csv", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const nvml = "NVIDIA A100-SXM4-80GB"
	nodes = append(nodes, NodeRow{SN: "node-x", CPUMilli: 1, MemoryMiB: 2, GPUs: 4, Model: nvml})
	pods = append(pods, PodRow{Name: "pod-x", NumGPU: 2, GPUMilli: 1000, GPUSpec: []string{nvml, "T4"}, QoS: QoSBE,
		Phase: PhasePending, CreationTime: 3, DeletionTime: 9})
	dir := t.TempDir()
	var nb, pb bytes.Buffer
	if err := WriteNodes(&nb, nodes); err != nil {
		t.Fatal(err)
	}
	if err := WritePods(&pb, pods); err != nil {
		t.Fatal(err)
	}
	np, pp := filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "pods.csv")
	if err := os.WriteFile(np, nb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pp, pb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadNodes(np); err == nil || !strings.Contains(err.Error(), `unknown GPU model "`+nvml+`"`) {
		t.Fatalf("strict read of an NVML model: %v", err)
	}
	opts := ReadOptions{Models: []string{nvml}}
	gotNodes, err := ReadNodesWith(np, opts)
	if err != nil {
		t.Fatal(err)
	}
	gotPods, _, err := ReadPods(pp, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range gotNodes {
		gotNodes[i].Line = nodes[i].Line
	}
	for i := range gotPods {
		gotPods[i].Line = pods[i].Line
	}
	if !reflect.DeepEqual(gotNodes, nodes) {
		t.Fatalf("nodes:\n got %+v\nwant %+v", gotNodes, nodes)
	}
	if !reflect.DeepEqual(gotPods, pods) {
		t.Fatalf("pods:\n got %+v\nwant %+v", gotPods, pods)
	}
}

// TestWriteRefusesUnreadableRows: a row the reader would refuse is an
// error naming it.
func TestWriteRefusesUnreadableRows(t *testing.T) {
	good := PodRow{Name: "p", NumGPU: 1, GPUMilli: 500, QoS: QoSLS, Phase: PhaseRunning, CreationTime: 1, DeletionTime: 5,
		ScheduledTime: 2, Scheduled: true}
	for _, c := range []struct {
		name string
		mod  func(*PodRow)
		want string
	}{
		{"pending with a start", func(p *PodRow) { p.Phase = PhasePending }, "scheduled_time exactly when"},
		{"start after deletion", func(p *PodRow) { p.ScheduledTime = 9 }, "outside"},
		{"share of two GPUs", func(p *PodRow) { p.NumGPU = 2 }, "gpu_milli 500 with num_gpu 2"},
		{"bad qos", func(p *PodRow) { p.QoS = "Gold" }, `unknown qos "Gold"`},
	} {
		p := good
		c.mod(&p)
		if err := WritePods(&bytes.Buffer{}, []PodRow{p}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if err := WriteNodes(&bytes.Buffer{}, []NodeRow{{SN: "n", GPUs: 2}}); err == nil || !strings.Contains(err.Error(), "node n") {
		t.Errorf("node with GPUs and no model: %v", err)
	}
}

// TestQoSOfInvertsTierOf: every tier survives QoSOf then TierOf.
func TestQoSOfInvertsTierOf(t *testing.T) {
	for _, tier := range vocab.Tiers {
		if got := TierOf(QoSOf(tier)); got != tier {
			t.Errorf("TierOf(QoSOf(%s)) = %s", tier, got)
		}
	}
}
