package alibaba

import (
	"os"
	"strings"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
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
	var pods []PodRow
	seen := map[string]int{}
	skipped, err := readRows(path, packingHeader, opts.SkipInvalid, func(c *csvFile, rec []string) error {
		p := PodRow{Name: rec[0], QoS: QoSBE, Phase: PhaseRunning, Scheduled: true, Line: c.line}
		if p.Name == "" {
			return c.errorf("name is empty")
		}
		var err error
		if p.CPUMilli, err = c.nonNegInt("cpu_milli", rec[1], vocab.MaxCPUMilli); err != nil {
			return err
		}
		if p.MemoryMiB, err = c.nonNegInt("memory_mib", rec[2], vocab.MaxMemoryMiB); err != nil {
			return err
		}
		if err = parseGPURequest(c, &p, rec[3], rec[4], "", opts); err != nil {
			return err
		}
		if first, dup := seen[p.Name]; dup {
			return c.errorf("name %q repeats the pod of line %d", p.Name, first)
		}
		seen[p.Name] = p.Line
		pods = append(pods, p)
		return nil
	})
	if err != nil {
		return nil, skipped, err
	}
	return pods, skipped, nil
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
