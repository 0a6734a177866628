package alibaba

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// writeTrace writes data to a file of t's temporary folder and returns its path.
func writeTrace(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkTraceError fails t unless err is a *ParseError naming the file and a
// line.
func checkTraceError(t *testing.T, err error, path string) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) || pe.File != path || pe.Line < 1 || pe.Msg == "" {
		t.Fatalf("rejection is not a file:line ParseError: %v", err)
	}
}

// FuzzAlibabaNodes fuzzes the node list reader. Properties: no panic; a
// rejection names file:line; accepted rows are inside vocab's bounds and
// round-trip through WriteNodes.
func FuzzAlibabaNodes(f *testing.F) {
	for _, s := range []string{
		"sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,G2\nopenb-node-0001,96000,786432,0,\n",
		"sn,cpu_milli,memory_mib,gpu,model\nn,9223372036854775807,9223372036854775807,9223372036854775807,T4\n",
		"sn,cpu_milli,memory_mib,gpu,model\nn,-1,0,0,\n", "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,\n",
		"sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,T4\nn,1,1,1,T4\n", "sn,cpu\n", "", "sn,cpu_milli,memory_mib,gpu,model\n\"n,1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := writeTrace(t, "nodes.csv", data)
		nodes, err := ReadNodes(path)
		if err != nil {
			checkTraceError(t, err, path)
			return
		}
		for _, n := range nodes {
			if n.CPUMilli > vocab.MaxCPUMilli || n.MemoryMiB > vocab.MaxMemoryMiB || n.GPUs > vocab.MaxGPUsPerNode {
				t.Fatalf("accepted node out of bounds: %+v", n)
			}
		}
		var buf bytes.Buffer
		if err := WriteNodes(&buf, nodes); err != nil {
			t.Fatalf("accepted nodes do not write: %v", err)
		}
		again, err := ReadNodes(writeTrace(t, "again.csv", buf.Bytes()))
		if err != nil {
			t.Fatalf("written nodes do not read back: %v\n%s", err, buf.Bytes())
		}
		if !reflect.DeepEqual(withoutNodeLines(again), withoutNodeLines(nodes)) {
			t.Fatalf("round trip changed the nodes:\n%+v\n%+v", nodes, again)
		}
	})
}

// FuzzAlibabaPods fuzzes the pod list reader, strict and skipping.
// Properties: no panic; a rejection (or a skipped row's message) names
// file:line; accepted rows are inside vocab's bounds and round-trip through
// WritePods.
func FuzzAlibabaPods(f *testing.F) {
	const h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	for _, s := range []string{
		h + "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\nopenb-pod-0001,6000,12288,1,460,V100M16|V100M32,LS,Running,427061,12902960,427061\n",
		h + "p,1,1,0,0,,BE,Pending,5,10,\n",
		h + "p,1,1,2,1000,T4,LS,Succeeded,9223372036854775806,9223372036854775807,9223372036854775807\n",
		h + "p,1,1,9223372036854775807,1000,,LS,Running,0,1,0\n",
		h + "p,1,1,1,0,,LS,Running,0,1,0\n", h + "p,1,1,1,5,X9,LS,Running,0,1,0\n",
		h + "p,1,1,1,5,,LS,Running,5,1,3\n", h + "p,1,1,1,5,,LS,Pending,0,1,0\n", h + "p,1,1\n", h,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, skip bool) {
		path := writeTrace(t, "pods.csv", data)
		pods, skipped, err := ReadPods(path, ReadOptions{SkipInvalid: skip})
		if err != nil {
			checkTraceError(t, err, path)
			return
		}
		if len(skipped.Messages) > min(skipped.Count, MaxSkippedMessages) {
			t.Fatalf("%d skipped messages for %d skipped rows", len(skipped.Messages), skipped.Count)
		}
		for _, p := range pods {
			if p.CPUMilli > vocab.MaxCPUMilli || p.MemoryMiB > vocab.MaxMemoryMiB || p.NumGPU > vocab.MaxGPUs ||
				p.CreationTime > vocab.MaxTraceSeconds || p.DeletionTime > vocab.MaxTraceSeconds {
				t.Fatalf("accepted pod out of bounds: %+v", p)
			}
		}
		var buf bytes.Buffer
		if err := WritePods(&buf, pods); err != nil {
			t.Fatalf("accepted pods do not write: %v", err)
		}
		again, _, err := ReadPods(writeTrace(t, "again.csv", buf.Bytes()), ReadOptions{})
		if err != nil {
			t.Fatalf("written pods do not read back: %v\n%s", err, buf.Bytes())
		}
		if !reflect.DeepEqual(withoutPodLines(again), withoutPodLines(pods)) {
			t.Fatalf("round trip changed the pods:\n%+v\n%+v", pods, again)
		}
	})
}

func withoutNodeLines(ns []NodeRow) []NodeRow {
	out := make([]NodeRow, len(ns))
	for i, n := range ns {
		n.Line = 0
		out[i] = n
	}
	return out
}

func withoutPodLines(ps []PodRow) []PodRow {
	out := make([]PodRow, len(ps))
	for i, p := range ps {
		p.Line = 0
		out[i] = p
	}
	return out
}
