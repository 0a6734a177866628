package alibaba

import (
	"math"
	"strings"

	"github.com/gpugov/gpugov/internal/vocab"
)

// QoS is a pod's Kubernetes-style service class in the trace.
type QoS string

// The trace's QoS classes.
const (
	QoSLS         QoS = "LS"         // latency-sensitive (online inference)
	QoSGuaranteed QoS = "Guaranteed" // guaranteed resources
	QoSBurstable  QoS = "Burstable"  // may burst above its request
	QoSBE         QoS = "BE"         // best effort
)

// QoSClasses lists every QoS class the reader accepts.
var QoSClasses = []QoS{QoSLS, QoSGuaranteed, QoSBurstable, QoSBE}

// Phase is a pod's phase when the trace was recorded.
type Phase string

// The trace's pod phases.
const (
	PhaseRunning   Phase = "Running"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
	PhasePending   Phase = "Pending" // never scheduled; scheduled_time is empty
)

// Phases lists every pod phase the reader accepts.
var Phases = []Phase{PhaseRunning, PhaseSucceeded, PhaseFailed, PhasePending}

// PodRow is one row of a pod list (openb_pod_list_*.csv).
type PodRow struct {
	Name      string   // pod ID, unique in the file
	CPUMilli  int64    // CPU request in milli-cores
	MemoryMiB int64    // memory request in MiB
	NumGPU    int      // GPUs requested; 0 for CPU-only pods
	GPUMilli  int      // milli-GPU per GPU: 0 when NumGPU is 0, 1..1000 when 1, 1000 when more
	GPUSpec   []string // allowed GPU models (duplicates removed, file order kept); empty means any
	QoS       QoS
	Phase     Phase
	// CreationTime, DeletionTime and ScheduledTime are seconds from the start of
	// the trace. ScheduledTime is meaningful only when Scheduled is true.
	CreationTime  int64
	DeletionTime  int64
	ScheduledTime int64
	Scheduled     bool // false exactly for Pending pods (empty scheduled_time)
	Line          int  // line of the row in its file
}

// TraceWaitSeconds returns the pod's queueing delay in the trace,
// scheduled_time − creation_time, and false for a pod never scheduled.
func (p PodRow) TraceWaitSeconds() (int64, bool) {
	if !p.Scheduled {
		return 0, false
	}
	return p.ScheduledTime - p.CreationTime, true
}

// TraceRunSeconds returns the pod's run time in the trace,
// deletion_time − scheduled_time, and false for a pod never scheduled.
func (p PodRow) TraceRunSeconds() (int64, bool) {
	if !p.Scheduled {
		return 0, false
	}
	return p.DeletionTime - p.ScheduledTime, true
}

// ReadPods reads and validates a pod list. A row must have the 11 columns of
// the trace's header; a unique non-empty name; non-negative integer
// cpu_milli, memory_mib, num_gpu, creation_time and deletion_time;
// gpu_milli 0 when num_gpu is 0, 1..1000 when num_gpu is 1 and 1000 when it is
// larger; a gpu_spec of |-separated models from KnownModels or opts.Models
// (or empty); a qos
// from QoSClasses and a pod_phase from Phases; creation ≤ deletion; and a
// scheduled_time that is empty exactly for Pending pods and otherwise lies in
// [creation_time, deletion_time].
//
// The first problem is returned as a *ParseError ("file:line: what is
// wrong") unless opts.SkipInvalid is set, in which case bad rows are dropped
// and counted in Skipped. A bad header and an unopenable file are errors in
// either case.
func ReadPods(path string, opts ReadOptions) ([]PodRow, Skipped, error) {
	return readPodList(path, podHeader, opts, func(c *csvFile, rec []string) (PodRow, error) {
		return parsePod(c, rec, opts)
	})
}

// readPodList reads the pod list at path whose header is header, parsing
// each row with parse and refusing a pod name that repeats an earlier row's
// (the error names both lines); opts.SkipInvalid skips bad rows instead.
func readPodList(path string, header []string, opts ReadOptions, parse func(*csvFile, []string) (PodRow, error)) ([]PodRow, Skipped, error) {
	var pods []PodRow
	seen := map[string]int{}
	skipped, err := readRows(path, header, opts.SkipInvalid, func(c *csvFile, rec []string) error {
		p, err := parse(c, rec)
		if err != nil {
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

func parsePod(c *csvFile, rec []string, opts ReadOptions) (PodRow, error) {
	p := PodRow{QoS: QoS(rec[6]), Phase: Phase(rec[7])}
	if err := parseRequest(c, &p, rec, rec[5], opts); err != nil {
		return p, err
	}
	if !contains(QoSClasses, p.QoS) {
		return p, c.errorf("unknown qos %q (known: %v)", p.QoS, QoSClasses)
	}
	if !contains(Phases, p.Phase) {
		return p, c.errorf("unknown pod_phase %q (known: %v)", p.Phase, Phases)
	}
	return p, parseTimes(c, &p, rec[8], rec[9], rec[10])
}

// parseRequest fills p's Name, Line, CPUMilli, MemoryMiB and GPU request
// from the columns every pod list starts with (name, cpu_milli, memory_mib,
// num_gpu, gpu_milli) and the GPU model spec ("" when the list has none).
func parseRequest(c *csvFile, p *PodRow, rec []string, spec string, opts ReadOptions) error {
	p.Name, p.Line = rec[0], c.line
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
	return parseGPURequest(c, p, rec[3], rec[4], spec, opts)
}

// parseGPURequest fills NumGPU, GPUMilli and GPUSpec.
func parseGPURequest(c *csvFile, p *PodRow, numGPU, gpuMilli, spec string, opts ReadOptions) error {
	n, err := c.nonNegInt("num_gpu", numGPU, vocab.MaxGPUs)
	if err != nil {
		return err
	}
	m, err := c.nonNegInt("gpu_milli", gpuMilli, math.MaxInt64) // 0..1000 checked below, with num_gpu
	if err != nil {
		return err
	}
	p.NumGPU, p.GPUMilli = int(n), int(m)
	switch {
	case m > 1000:
		return c.errorf("gpu_milli %d is out of range 0..1000", m)
	case n == 0 && m != 0:
		return c.errorf("gpu_milli %d with num_gpu 0, want 0", m)
	case n == 1 && m == 0:
		return c.errorf("gpu_milli 0 with num_gpu 1, want 1..1000")
	case n > 1 && m != 1000:
		return c.errorf("gpu_milli %d with num_gpu %d; GPU shares (< 1000) need num_gpu 1", m, n)
	}
	if spec == "" {
		return nil
	}
	for _, model := range strings.Split(spec, "|") {
		if !opts.knownModel(model) {
			return c.errorf("gpu_spec %q: unknown GPU model %q (known: %v)", spec, model, opts.models())
		}
		if !contains(p.GPUSpec, model) {
			p.GPUSpec = append(p.GPUSpec, model)
		}
	}
	return nil
}

// parseTimes fills the three times and checks their order and the phase.
func parseTimes(c *csvFile, p *PodRow, creation, deletion, scheduled string) error {
	var err error
	if p.CreationTime, err = c.nonNegInt("creation_time", creation, vocab.MaxTraceSeconds); err != nil {
		return err
	}
	if p.DeletionTime, err = c.nonNegInt("deletion_time", deletion, vocab.MaxTraceSeconds); err != nil {
		return err
	}
	if p.DeletionTime < p.CreationTime {
		return c.errorf("deletion_time %d is before creation_time %d", p.DeletionTime, p.CreationTime)
	}
	p.Scheduled = scheduled != ""
	switch {
	case p.Phase == PhasePending && p.Scheduled:
		return c.errorf("scheduled_time %q given for a Pending pod, want empty", scheduled)
	case p.Phase != PhasePending && !p.Scheduled:
		return c.errorf("scheduled_time is empty for a %s pod", p.Phase)
	case !p.Scheduled:
		return nil
	}
	if p.ScheduledTime, err = c.nonNegInt("scheduled_time", scheduled, vocab.MaxTraceSeconds); err != nil {
		return err
	}
	if p.ScheduledTime < p.CreationTime {
		return c.errorf("scheduled_time %d is before creation_time %d", p.ScheduledTime, p.CreationTime)
	}
	if p.ScheduledTime > p.DeletionTime {
		return c.errorf("scheduled_time %d is after deletion_time %d", p.ScheduledTime, p.DeletionTime)
	}
	return nil
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
