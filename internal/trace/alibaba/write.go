package alibaba

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpugov/gpugov/internal/vocab"
)

// QoSOf is TierOf inverted: the QoS class a job of tier t is written with,
// so that ReadPods and TierOf give t back (production → LS, key-project →
// Guaranteed, standard → Burstable, experiment → BE).
func QoSOf(t vocab.Tier) QoS {
	switch t {
	case vocab.TierProduction:
		return QoSLS
	case vocab.TierKeyProject:
		return QoSGuaranteed
	case vocab.TierStandard:
		return QoSBurstable
	}
	return QoSBE
}

// WriteNodes writes nodes as a node list (the header sn,cpu_milli,memory_mib,
// gpu,model and one row per node, in order) that ReadNodes (or
// ReadNodesWith, for models outside KnownModels) reads back. A row ReadNodes
// would refuse (an empty or repeated sn, a negative number, a model with no
// GPUs or GPUs with no model) is an error
// naming it; nothing after it is written.
func WriteNodes(w io.Writer, nodes []NodeRow) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(nodeHeader); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, n := range nodes {
		switch {
		case n.SN == "":
			return fmt.Errorf("node %d: sn is empty", i)
		case seen[n.SN]:
			return fmt.Errorf("node %d: sn %q repeats", i, n.SN)
		case n.CPUMilli < 0 || n.MemoryMiB < 0 || n.GPUs < 0:
			return fmt.Errorf("node %s: negative cpu_milli, memory_mib or gpu", n.SN)
		case (n.GPUs == 0) != (n.Model == ""):
			return fmt.Errorf("node %s: %d GPUs with model %q: a model exactly when it has GPUs", n.SN, n.GPUs, n.Model)
		}
		seen[n.SN] = true
		if err := cw.Write([]string{n.SN, itoa(n.CPUMilli), itoa(n.MemoryMiB), strconv.Itoa(n.GPUs), n.Model}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WritePods writes pods as a pod list (the trace's 11-column header and one
// row per pod, in order; scheduled_time empty for a pod not Scheduled) that
// ReadPods reads back into the same rows (Line aside). A row ReadPods would
// refuse is an error naming the pod; nothing after it is written.
func WritePods(w io.Writer, pods []PodRow) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(podHeader); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if err := checkPod(p, seen); err != nil {
			return err
		}
		seen[p.Name] = true
		scheduled := ""
		if p.Scheduled {
			scheduled = itoa(p.ScheduledTime)
		}
		rec := []string{p.Name, itoa(p.CPUMilli), itoa(p.MemoryMiB), strconv.Itoa(p.NumGPU), strconv.Itoa(p.GPUMilli),
			strings.Join(p.GPUSpec, "|"), string(p.QoS), string(p.Phase), itoa(p.CreationTime), itoa(p.DeletionTime), scheduled}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// checkPod applies ReadPods' row rules (models aside: the reader's options
// decide which it accepts) to p.
func checkPod(p PodRow, seen map[string]bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("pod %q: %s", p.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case p.Name == "":
		return fmt.Errorf("pod: name is empty")
	case seen[p.Name]:
		return bad("name repeats")
	case p.CPUMilli < 0 || p.MemoryMiB < 0 || p.NumGPU < 0 || p.CreationTime < 0:
		return bad("negative cpu_milli, memory_mib, num_gpu or creation_time")
	case p.GPUMilli < 0 || p.GPUMilli > 1000:
		return bad("gpu_milli %d is out of range 0..1000", p.GPUMilli)
	case p.NumGPU == 0 && p.GPUMilli != 0, p.NumGPU == 1 && p.GPUMilli == 0, p.NumGPU > 1 && p.GPUMilli != 1000:
		return bad("gpu_milli %d with num_gpu %d", p.GPUMilli, p.NumGPU)
	case !contains(QoSClasses, p.QoS):
		return bad("unknown qos %q", p.QoS)
	case !contains(Phases, p.Phase):
		return bad("unknown pod_phase %q", p.Phase)
	case p.DeletionTime < p.CreationTime:
		return bad("deletion_time %d is before creation_time %d", p.DeletionTime, p.CreationTime)
	case (p.Phase == PhasePending) == p.Scheduled:
		return bad("phase %s with scheduled %v: a scheduled_time exactly when the pod is not Pending", p.Phase, p.Scheduled)
	case p.Scheduled && (p.ScheduledTime < p.CreationTime || p.ScheduledTime > p.DeletionTime):
		return bad("scheduled_time %d outside [creation_time %d, deletion_time %d]", p.ScheduledTime, p.CreationTime, p.DeletionTime)
	}
	for _, m := range p.GPUSpec {
		if m == "" || strings.Contains(m, "|") {
			return bad("gpu_spec model %q is empty or holds the separator |", m)
		}
	}
	return nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
