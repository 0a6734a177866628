package alibaba

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadNodesGood(t *testing.T) {
	nodes, err := ReadNodes("testdata/nodes_good.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeRow{
		{SN: "node-a", CPUMilli: 96000, MemoryMiB: 786432, GPUs: 8, Model: "V100M32", Line: 2},
		{SN: "node-b", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 2, Model: "T4", Line: 3},
		{SN: "node-c", CPUMilli: 32000, MemoryMiB: 262144, GPUs: 0, Model: "", Line: 4},
		{SN: "node-d", CPUMilli: 96000, MemoryMiB: 786432, GPUs: 8, Model: "G2", Line: 5},
	}
	if !reflect.DeepEqual(nodes, want) {
		t.Fatalf("nodes:\n got %+v\nwant %+v", nodes, want)
	}
}

func TestReadPodsGood(t *testing.T) {
	pods, skipped, err := ReadPods("testdata/pods_good.csv", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if skipped.Count != 0 {
		t.Fatalf("skipped %+v, want none", skipped)
	}
	if len(pods) != 5 {
		t.Fatalf("got %d pods, want 5", len(pods))
	}
	p1 := pods[1]
	want1 := PodRow{Name: "pod-1", CPUMilli: 6000, MemoryMiB: 12288, NumGPU: 1, GPUMilli: 460,
		GPUSpec: []string{"T4", "V100M32"}, QoS: QoSBE, Phase: PhaseFailed,
		CreationTime: 100, DeletionTime: 300, ScheduledTime: 100, Scheduled: true, Line: 3}
	if !reflect.DeepEqual(p1, want1) {
		t.Fatalf("pod-1:\n got %+v\nwant %+v", p1, want1)
	}
	if w, ok := pods[3].TraceWaitSeconds(); !ok || w != 60 {
		t.Fatalf("pod-3 trace wait = %d,%v, want 60,true", w, ok)
	}
	if r, ok := pods[3].TraceRunSeconds(); !ok || r != 4740 {
		t.Fatalf("pod-3 trace run = %d,%v, want 4740,true", r, ok)
	}
	if pods[4].Scheduled {
		t.Fatal("Pending pod-4 reads as scheduled")
	}
	if _, ok := pods[4].TraceWaitSeconds(); ok {
		t.Fatal("Pending pod-4 has a trace wait")
	}
}

// writeFile writes content to a temporary file and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const podHead = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

func TestReadPodsBadRows(t *testing.T) {
	good := "ok,1000,1024,1,1000,,LS,Running,0,10,5\n"
	cases := []struct {
		name, row, want string
	}{
		{"field count", "p,1,2,1,1000,,LS,Running,0,10\n", "10 fields, want 11"},
		{"not an integer", "p,1.5,2,1,1000,,LS,Running,0,10,5\n", `cpu_milli "1.5" is not an integer`},
		{"empty integer", "p,1,,1,1000,,LS,Running,0,10,5\n", "memory_mib is empty"},
		{"negative time", "p,1,2,1,1000,,LS,Running,-4,10,5\n", "creation_time -4 is negative"},
		{"deletion before creation", "p,1,2,1,1000,,LS,Running,20,10,15\n", "deletion_time 10 is before creation_time 20"},
		{"scheduled before creation", "p,1,2,1,1000,,LS,Running,20,30,15\n", "scheduled_time 15 is before creation_time 20"},
		{"scheduled after deletion", "p,1,2,1,1000,,LS,Running,20,30,35\n", "scheduled_time 35 is after deletion_time 30"},
		{"unknown spec model", "p,1,2,1,1000,T4|H100,LS,Running,0,10,5\n", `unknown GPU model "H100"`},
		{"unknown qos", "p,1,2,1,1000,,Gold,Running,0,10,5\n", `unknown qos "Gold"`},
		{"unknown phase", "p,1,2,1,1000,,LS,Evicted,0,10,5\n", `unknown pod_phase "Evicted"`},
		{"milli over 1000", "p,1,2,1,1200,,LS,Running,0,10,5\n", "gpu_milli 1200 is out of range 0..1000"},
		{"share with two GPUs", "p,1,2,2,500,,LS,Running,0,10,5\n", "gpu_milli 500 with num_gpu 2"},
		{"milli without GPU", "p,1,2,0,500,,LS,Running,0,10,5\n", "gpu_milli 500 with num_gpu 0"},
		{"zero milli with one GPU", "p,1,2,1,0,,LS,Running,0,10,5\n", "gpu_milli 0 with num_gpu 1"},
		{"pending with scheduled time", "p,1,2,1,1000,,LS,Pending,0,10,5\n", "given for a Pending pod"},
		{"running without scheduled time", "p,1,2,1,1000,,LS,Running,0,10,\n", "scheduled_time is empty for a Running pod"},
		{"duplicate name", "ok,1,2,1,1000,,LS,Running,0,10,5\n", `name "ok" repeats the pod of line 2`},
		{"empty name", ",1,2,1,1000,,LS,Running,0,10,5\n", "name is empty"},
		{"bare quote", "p,1,2,1,1000,a\"b,LS,Running,0,10,5\n", "CSV syntax"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "pods.csv", podHead+good+tc.row)
			_, _, err := ReadPods(path, ReadOptions{})
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ParseError", err)
			}
			if pe.File != path || pe.Line != 3 {
				t.Fatalf("error at %s:%d, want %s:3", pe.File, pe.Line, path)
			}
			if !strings.Contains(pe.Msg, tc.want) {
				t.Fatalf("message %q does not contain %q", pe.Msg, tc.want)
			}
			if !strings.HasPrefix(err.Error(), path+":3: ") {
				t.Fatalf("error %q does not start with file:line", err)
			}
		})
	}
}

func TestReadPodsBadHeader(t *testing.T) {
	path := writeFile(t, "pods.csv", "name,cpu,memory_mib\nx,1,2\n")
	for _, skip := range []bool{false, true} {
		_, _, err := ReadPods(path, ReadOptions{SkipInvalid: skip})
		if err == nil || !strings.HasPrefix(err.Error(), path+":1: header is") {
			t.Fatalf("skip=%v: error %v, want a header error at line 1", skip, err)
		}
	}
	empty := writeFile(t, "empty.csv", "")
	if _, _, err := ReadPods(empty, ReadOptions{}); err == nil || !strings.Contains(err.Error(), "empty file") {
		t.Fatalf("empty file: error %v", err)
	}
}

func TestReadPodsSkipInvalid(t *testing.T) {
	if _, _, err := ReadPods("testdata/pods_mixed.csv", ReadOptions{}); err == nil ||
		err.Error() != `testdata/pods_mixed.csv:3: unknown qos "Gold" (known: [LS Guaranteed Burstable BE])` {
		t.Fatalf("strict read: error %v, want the bad qos of line 3", err)
	}
	pods, skipped, err := ReadPods("testdata/pods_mixed.csv", ReadOptions{SkipInvalid: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "ok-0,ok-1,ok-2" {
		t.Fatalf("kept %v, want ok-0,ok-1,ok-2", names)
	}
	if skipped.Count != 6 {
		t.Fatalf("skipped %d rows, want 6", skipped.Count)
	}
	if len(skipped.Messages) != MaxSkippedMessages {
		t.Fatalf("kept %d messages, want %d", len(skipped.Messages), MaxSkippedMessages)
	}
	wantLines := []string{":3: ", ":5: ", ":6: ", ":7: ", ":8: "}
	for i, m := range skipped.Messages {
		if !strings.Contains(m, "pods_mixed.csv"+wantLines[i]) {
			t.Fatalf("message %d %q, want line %s", i, m, wantLines[i])
		}
	}
}

func TestReadNodesBadRows(t *testing.T) {
	head := "sn,cpu_milli,memory_mib,gpu,model\nn0,1,2,2,T4\n"
	cases := []struct{ name, row, want string }{
		{"unknown model", "n1,1,2,4,H100\n", `unknown GPU model "H100"`},
		{"model without gpus", "n1,1,2,0,T4\n", `model "T4" given for a node with gpu 0`},
		{"gpus without model", "n1,1,2,4,\n", "model is empty for a node with gpu 4"},
		{"negative gpus", "n1,1,2,-1,T4\n", "gpu -1 is negative"},
		{"field count", "n1,1,2,4,T4,extra\n", "6 fields, want 5"},
		{"duplicate sn", "n0,1,2,2,T4\n", `sn "n0" repeats the node of line 2`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "nodes.csv", head+tc.row)
			_, err := ReadNodes(path)
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != 3 || !strings.Contains(pe.Msg, tc.want) {
				t.Fatalf("error %v, want line 3 containing %q", err, tc.want)
			}
		})
	}
	if _, err := ReadNodes(filepath.Join(t.TempDir(), "absent.csv")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent file: error %v, want not-exist", err)
	}
}

// TestReadRefusesOutOfBoundsNumbers holds the readers to vocab's bounds:
// FuzzAlibabaNodes and FuzzAlibabaPods found int64-sized counts and times
// accepted (a node with 2^63-1 GPUs, a pod deleted at 2^63-1 s, which
// overflows a time.Duration in the simulator).
func TestReadRefusesOutOfBoundsNumbers(t *testing.T) {
	nodes := writeTrace(t, "nodes.csv", []byte("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,257,T4\n"))
	if _, err := ReadNodes(nodes); err == nil || !strings.Contains(err.Error(), "nodes.csv:2: gpu 257 is more than 256") {
		t.Errorf("ReadNodes: err = %v, want gpu 257 refused at line 2", err)
	}
	const h = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
	for _, c := range []struct{ row, want string }{
		{"p,1,1,2,1000,T4,LS,Succeeded,0,9223372036854775807,0", "deletion_time 9223372036854775807 is more than 315360000"},
		{"p,1,1,4097,1000,,LS,Running,0,1,0", "num_gpu 4097 is more than 4096"},
		{"p,1073741825,1,1,5,,LS,Running,0,1,0", "cpu_milli 1073741825 is more than 1073741824"},
	} {
		pods := writeTrace(t, "pods.csv", []byte(h+c.row+"\n"))
		if _, _, err := ReadPods(pods, ReadOptions{}); err == nil || !strings.Contains(err.Error(), "pods.csv:2: "+c.want) {
			t.Errorf("ReadPods(%s): err = %v, want %q", c.row, err, c.want)
		}
	}
}
