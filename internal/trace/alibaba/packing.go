package alibaba

import (
	"os"
	"strings"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// packingHeader is the header of the trace's packing workloads (the
// multigpuNN lists): no times, QoS, phase or GPU type.
var packingHeader = []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}

// ReadPackingPods reads a pod list for a packing study: a full pod list
// (ReadPods' 11 columns) or a packing workload of the 5 columns
// name,cpu_milli,memory_mib,num_gpu,gpu_milli (the multigpuNN lists). A
// 5-column row is checked as ReadPods checks those columns and read as a
// Running pod of QoS BE with no GPU type constraint and zero times (the
// study reads only the request). Errors as ReadPods ("file:line: what is
// wrong", *ParseError).
func ReadPackingPods(path string, opts ReadOptions) ([]PodRow, Skipped, error) {
	first, err := firstLine(path)
	if err != nil {
		return nil, Skipped{}, err
	}
	if first != strings.Join(packingHeader, ",") {
		return ReadPods(path, opts)
	}
	return readPodList(path, packingHeader, opts, func(c *csvFile, rec []string) (PodRow, error) {
		p := PodRow{QoS: QoSBE, Phase: PhaseRunning, Scheduled: true}
		return p, parseRequest(c, &p, rec, "", opts)
	})
}

// firstLine returns the file's first line without its line end ("" for an
// empty file).
func firstLine(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 512)
	n, _ := f.Read(buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	return strings.TrimSuffix(line, "\r"), nil
}

// Request is the resource request of pod p in pool (PendingJob's request;
// for a CPU-only pod, no GPUs with its CPU and memory), for a packing study
// that places CPU-only pods too.
func Request(p PodRow, pool string) scheduling.ResourceRequest {
	if pool == "" {
		pool = DefaultPoolName
	}
	if j, ok := PendingJob(p, JobOptions{Pool: pool}); ok {
		return j.Request
	}
	return scheduling.ResourceRequest{Pool: pool, Topology: scheduling.TopologyAny, CPUMilli: p.CPUMilli, MemoryMiB: p.MemoryMiB}
}
