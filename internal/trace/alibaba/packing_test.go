package alibaba

import (
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/scheduling"
)

func TestReadPackingPods(t *testing.T) {
	pods, _, err := ReadPackingPods("testdata/packing_good.csv", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 3 || pods[1].NumGPU != 2 || pods[1].GPUMilli != 1000 || pods[0].GPUMilli != 500 || pods[2].CPUMilli != 8000 {
		t.Fatalf("pods %+v", pods)
	}
	if r := Request(pods[1], ""); r.GPUs != 2 || r.Topology != scheduling.TopologySameNode || r.CPUMilli != 4000 || r.Pool != DefaultPoolName {
		t.Fatalf("request %+v", r)
	}
	if r := Request(pods[2], "p"); r.GPUs != 0 || r.CPUMilli != 8000 || r.Pool != "p" {
		t.Fatalf("CPU-only request %+v", r)
	}
	full, _, err := ReadPackingPods("testdata/pods_good.csv", ReadOptions{})
	if err != nil || len(full) == 0 {
		t.Fatalf("an 11-column list: %d pods, %v", len(full), err)
	}
	_, _, err = ReadPackingPods("testdata/packing_bad.csv", ReadOptions{})
	if err == nil || !strings.Contains(err.Error(), "testdata/packing_bad.csv:3: gpu_milli 500 with num_gpu 2") {
		t.Fatalf("error %v", err)
	}
}
