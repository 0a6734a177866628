// Package trace is the neutral model of a GPU cluster trace that the
// simulator (internal/simulation) and the replay (package replay) read: a
// pool of nodes and a list of jobs in gpugov's scheduling vocabulary, with
// the times the trace recorded. Each trace format has a reader that
// implements Source: internal/trace/alibaba (the Alibaba v2023 "openb" pod
// lists) and internal/trace/philly (Microsoft Philly, 2017).
//
// Times are whole seconds from the trace's Epoch ("trace seconds").
package trace

import (
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Options are the settings of the run that reads a trace which the trace
// itself does not carry.
type Options struct {
	Pool     string                // name of the pool the trace's nodes form; every job asks for it
	Stage    vocab.AutomationStage // the pool's automation stage
	Projects int                   // synthetic projects, for formats without a tenant column (≥ 1)
	// BackgroundStepS, when > 0, asks a format that can derive it (Philly)
	// for Trace.Background in steps of this many seconds; 0 derives none.
	BackgroundStepS int64
}

// Source is a trace read from its files, converted under the run's options.
// Trace returns the converted trace or an error naming what cannot be
// converted (the readers validate the files before, so the shipped
// implementations only fail on invalid Options).
type Source interface {
	Trace(opts Options) (*Trace, error)
}

// Trace is a trace in gpugov's terms.
type Trace struct {
	// Format names the trace format: "alibaba" or "philly".
	Format string
	// Epoch is the instant of trace second 0.
	Epoch time.Time
	// Pool is the one pool the trace's GPU nodes form (named Options.Pool).
	Pool scheduling.Pool
	// Jobs are the trace's GPU jobs, in file order.
	Jobs []Job
	// Rows counts the job rows read (GPU and CPU-only); NonGPU those left
	// out because they ask for no GPU.
	Rows, NonGPU int
	// Skipped are the rows the reader dropped (--skip-invalid).
	Skipped Skipped
	// Quotas are the per-project quotas the trace's format defines (Philly's
	// virtual-cluster sizes); a policy may use them (policy
	// simulation.trace_quotas) or not.
	Quotas []scheduling.Quota
	// Assumptions are the rules the reader added to the trace, stated in the
	// simulation report.
	Assumptions []string
	// RecordedElsewhere are recorded waits of jobs the reader could not
	// match to a row of Jobs (they still count in the recorded side of the
	// fidelity report, under their project, "" when unknown).
	RecordedElsewhere []RecordedWait
	// OwnProjects says the jobs' projects are the trace's own tenants
	// (Philly's virtual clusters), not synthetic ones: the simulation then
	// reports its fidelity to the recorded waits per project.
	OwnProjects bool
	// Published are figures other work published for the traced cluster,
	// set beside the simulation's waits in the fidelity report.
	Published []Published
	// Background is the pool's occupancy that the trace's jobs do not
	// explain (Options.BackgroundStepS; Philly derives it from its node
	// sequence): a step function, each entry holding from its At to the
	// next entry's, none before the first (the last entry ends it, with 0
	// GPUs). Empty when not asked for.
	Background []Occupancy
}

// Occupancy is one step of Trace.Background: from trace second At on, GPUs
// whole GPUs of the pool are held by work outside the trace's jobs.
type Occupancy struct {
	At   int64
	GPUs int
}

// Job is one GPU job of a trace. Spec is the job as gpugov's scheduler sees
// it: ID, project, queue (named after the tier), tier, request (naming
// Options.Pool) and submit time (Epoch + Submit); recovery evidence and
// protection are left for the run to set.
type Job struct {
	Spec scheduling.PendingJob
	// GPUs is the job's GPUs as the trace records them (Spec.Request.GPUs
	// may be rounded up, to whole nodes).
	GPUs int
	// Submit is the trace second the job was submitted (created).
	Submit int64
	// Scheduled is whether the trace ran the job. A job it never ran is
	// deleted at End by its owner, waiting or not; a job it ran runs for
	// RunSeconds.
	Scheduled  bool
	RunSeconds int64 // ≥ 0, the trace's run time of a scheduled job
	End        int64 // trace second the job left the trace (deletion, or start + run)
	// RecordedWait is the trace's queueing delay (first start − submit) in
	// seconds, when HasRecordedWait (not every trace records starts).
	RecordedWait    int64
	HasRecordedWait bool
	// CutOff marks a job still running when the trace window ended.
	CutOff bool
	// Line is the job's row in its file, for messages.
	Line int
}

// RecordedWait is one recorded queueing delay: the job's project (""
// when the trace does not say), its GPUs and its wait in seconds.
type RecordedWait struct {
	Project string
	GPUs    int
	WaitS   int64
}

// Published is one published statistic of queueing delay for a trace's
// cluster: what it covers, its mean and median in seconds, and its source.
type Published struct {
	Label   string  `json:"label"`    // the jobs it covers
	Jobs    int     `json:"jobs"`     // how many jobs it covers
	MeanS   float64 `json:"mean_s"`   // mean queueing delay, seconds
	MedianS float64 `json:"median_s"` // median queueing delay, seconds
	Source  string  `json:"source"`   // where it was published
}

// MaxSkippedMessages is how many skipped-row messages Skipped keeps.
const MaxSkippedMessages = 5

// Skipped counts the rows a reader dropped when asked to skip bad rows.
type Skipped struct {
	Count    int      // rows skipped
	Messages []string // the first MaxSkippedMessages "file:line: what is wrong" messages
}

// Add counts one skipped row and keeps its message among the first ones.
func (s *Skipped) Add(err error) {
	s.Count++
	if len(s.Messages) < MaxSkippedMessages {
		s.Messages = append(s.Messages, err.Error())
	}
}
