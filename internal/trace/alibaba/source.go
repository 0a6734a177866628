package alibaba

import (
	"fmt"

	"github.com/gpugov/gpugov/internal/trace"
)

// Format is the name of this trace format in trace.Trace.Format and in
// `gpugov simulate --trace`.
const Format = "alibaba"

// Source is a node list and a pod list as the readers return them; it
// implements trace.Source.
type Source struct {
	Nodes   []NodeRow
	Pods    []PodRow
	Skipped Skipped // pod rows the reader dropped (ReadOptions.SkipInvalid)
}

// Trace converts the lists: the pool is Pools of the nodes (named
// opts.Pool, in opts.Stage), the jobs are PendingJob of the GPU pods, in
// file order, with opts.Projects synthetic projects (ProjectOf) and trace
// second 0 at Epoch. A pod's recorded wait is scheduled − creation
// (TraceWaitSeconds), its run time deletion − scheduled, and a never
// scheduled (Pending) pod leaves at its deletion time; a Running pod deleted
// at the last deletion time of the list is cut off by the trace window. It
// returns an error for opts.Projects < 1.
func (s Source) Trace(opts trace.Options) (*trace.Trace, error) {
	if opts.Projects < 1 {
		return nil, fmt.Errorf("projects %d, want at least 1", opts.Projects)
	}
	t := &trace.Trace{Format: Format, Epoch: Epoch, Rows: len(s.Pods),
		Skipped: trace.Skipped{Count: s.Skipped.Count, Messages: s.Skipped.Messages}}
	t.Pool = Pools(s.Nodes, PoolOptions{Name: opts.Pool, Stage: opts.Stage})[0]
	var windowEnd int64
	for i := range s.Pods {
		windowEnd = max(windowEnd, s.Pods[i].DeletionTime)
	}
	jo := JobOptions{Pool: t.Pool.Name, Projects: opts.Projects, Epoch: Epoch}
	t.Jobs = make([]trace.Job, 0, len(s.Pods))
	for i := range s.Pods {
		p := &s.Pods[i]
		spec, ok := PendingJob(*p, jo)
		if !ok {
			t.NonGPU++
			continue
		}
		j := trace.Job{Spec: spec, GPUs: p.NumGPU, Submit: p.CreationTime, Scheduled: p.Scheduled, End: p.DeletionTime, Line: p.Line,
			CutOff: p.Phase == PhaseRunning && p.DeletionTime == windowEnd}
		j.RunSeconds, _ = p.TraceRunSeconds()
		j.RecordedWait, j.HasRecordedWait = p.TraceWaitSeconds()
		t.Jobs = append(t.Jobs, j)
	}
	return t, nil
}
