package philly

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Format is the name of this trace format in trace.Trace.Format and in
// `gpugov simulate --trace`.
const Format = "philly"

// DefaultGPUsPerNode is the GPUs of each node when Options.GPUsPerNode is 0:
// 8, the sizing HeliosArtifact's Philly simulator uses (--num_gpus_per_node
// 8; the trace's machine list, which would say, is not public here).
const DefaultGPUsPerNode = 8

// GPUModel is the model name given to the pool's GPUs (the trace names none).
const GPUModel = "philly-gpu"

// JoinToleranceSeconds is how far a recorded job's run_seconds_sum_attempts
// may be from a philly.csv row's duration for the two to be the same job
// (with the same submit time, GPUs and VC): 2 s, the tolerance the folder's
// README used to derive the VC column.
const JoinToleranceSeconds = 2

// Files names the trace's files.
type Files struct {
	Jobs     string // philly.csv
	VCs      string // philly_vc.csv
	Recorded string // multigpu_pass_jobs_with_vc.csv; "" reads no recorded starts
	// NodeSequence is philly_node_sequence.csv, for the background
	// occupancy (Background); "" reads none.
	NodeSequence string
}

// FilesIn returns the files of the trace folder dir under their names
// there; NodeSequence only when philly_node_sequence.csv exists in dir.
func FilesIn(dir string) Files {
	f := Files{Jobs: filepath.Join(dir, "philly.csv"), VCs: filepath.Join(dir, "philly_vc.csv"),
		Recorded: filepath.Join(dir, "multigpu_pass_jobs_with_vc.csv")}
	if ns := filepath.Join(dir, "philly_node_sequence.csv"); fileExists(ns) {
		f.NodeSequence = ns
	}
	return f
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Options tunes Read.
type Options struct {
	// GPUsPerNode is every node's GPUs; DefaultGPUsPerNode when 0.
	GPUsPerNode int
	// Nodes is the pool's node count; 0 means the VCs' nodes summed (352
	// for philly_vc.csv).
	Nodes int
	// SkipInvalid skips and counts malformed rows of the job list instead
	// of stopping at the first; the VC list and the recorded starts are
	// read whole or not at all.
	SkipInvalid bool
}

// Source is the trace as read (Read); it implements trace.Source.
type Source struct {
	Files       Files
	Jobs        []JobRow
	VCs         []VCRow
	Recorded    []RecordedRow // empty when Files.Recorded is ""
	NodeSeq     []NodeSample  // empty when Files.NodeSequence is ""
	Skipped     trace.Skipped // job rows dropped under Options.SkipInvalid
	GPUsPerNode int           // resolved: ≥ 1
	Nodes       int           // resolved: ≥ 1
}

// Read reads the files of f under o. It returns the first *ParseError of a
// file ("file:line: what is wrong"), the os error of a file that cannot be
// opened, or an error naming the option when GPUsPerNode or Nodes is
// negative or the VCs' quotas add up to more GPUs than the pool has.
func Read(f Files, o Options) (*Source, error) {
	s := &Source{Files: f, GPUsPerNode: o.GPUsPerNode, Nodes: o.Nodes}
	if s.GPUsPerNode == 0 {
		s.GPUsPerNode = DefaultGPUsPerNode
	}
	switch {
	case s.GPUsPerNode < 0 || s.GPUsPerNode > 1024:
		return nil, fmt.Errorf("philly: GPUs per node %d, want 1..1024", o.GPUsPerNode)
	case s.Nodes < 0:
		return nil, fmt.Errorf("philly: nodes %d is negative", o.Nodes)
	}
	var err error
	if s.VCs, err = ReadVCs(f.VCs); err != nil {
		return nil, err
	}
	vcNodes := 0
	for _, v := range s.VCs {
		vcNodes += v.Nodes
	}
	if s.Nodes == 0 {
		s.Nodes = vcNodes
	}
	if s.Nodes < vcNodes {
		return nil, fmt.Errorf("philly: nodes %d is fewer than the %d nodes of the VCs in %s", s.Nodes, vcNodes, f.VCs)
	}
	if s.Jobs, s.Skipped, err = ReadJobs(f.Jobs, o.SkipInvalid); err != nil {
		return nil, err
	}
	if f.Recorded != "" {
		if s.Recorded, err = ReadRecorded(f.Recorded); err != nil {
			return nil, err
		}
	}
	if f.NodeSequence != "" {
		if s.NodeSeq, err = ReadNodeSequence(f.NodeSequence); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Epoch returns the instant of trace second 0: midnight of the day of the
// earliest submit (UTC, as the timestamps are read), the Unix epoch for no
// jobs.
func (s *Source) Epoch() time.Time {
	if len(s.Jobs) == 0 {
		return time.Unix(0, 0).UTC()
	}
	first := s.Jobs[0].Submit
	for _, j := range s.Jobs {
		if j.Submit.Before(first) {
			first = j.Submit
		}
	}
	return first.Truncate(24 * time.Hour)
}

// NodeName returns the name of the i-th node (0-based) of the pool.
func NodeName(i int) string { return fmt.Sprintf("philly-n%03d", i) }

// Request returns the resource request of a job of n GPUs in pool on nodes
// of gpn GPUs: n whole GPUs on one node when n ≤ gpn (Philly placed such
// jobs on one machine), otherwise ⌈n/gpn⌉ whole nodes (TopologyWholeNodes;
// the request is rounded up to whole nodes, so a 12-GPU job on 8-GPU nodes
// holds 16 GPUs). No CPU or memory: the trace records neither.
func Request(n, gpn int, pool string) scheduling.ResourceRequest {
	r := scheduling.ResourceRequest{GPUs: n, GPUMilli: scheduling.MilliPerGPU, Pool: pool, Topology: scheduling.TopologySameNode}
	if n == 1 {
		r.Topology = scheduling.TopologyAny
	}
	if n > gpn {
		r.GPUs, r.Topology = (n+gpn-1)/gpn*gpn, scheduling.TopologyWholeNodes
	}
	return r
}

// Tier is the tier of every Philly job: the trace records no priority, and
// its jobs are training runs, gpugov's standard tier.
const Tier = vocab.TierStandard

// Trace converts the source: one pool (opts.Pool, opts.Stage) of Nodes nodes
// of GPUsPerNode GPUs (model GPUModel, healthy, no NVLink domain), every job
// a standard-tier job of its VC (the project) submitted at its timestamp,
// asking for Request, running for its duration; a quota per VC of its nodes
// × GPUsPerNode GPUs, without borrowing; and the recorded waits of the jobs
// with a recorded start, joined to their philly.csv row on submit time, GPUs,
// VC and a run time within JoinToleranceSeconds (first unmatched row in file
// order). Recorded jobs no row matches are kept in RecordedElsewhere.
// opts.Projects is not used (the VCs are the projects). With
// opts.BackgroundStepS > 0 it adds the Background derived from the node
// sequence, and an error when none was read.
func (s *Source) Trace(opts trace.Options) (*trace.Trace, error) {
	if opts.Pool == "" {
		return nil, fmt.Errorf("philly: pool name is empty")
	}
	epoch := s.Epoch()
	t := &trace.Trace{Format: Format, Epoch: epoch, Rows: len(s.Jobs), Skipped: s.Skipped, OwnProjects: true,
		Pool: scheduling.Pool{Name: opts.Pool, Available: true, Stage: opts.Stage}}
	if t.Pool.Stage == "" {
		t.Pool.Stage = vocab.StageObserve
	}
	for i := range s.Nodes {
		n := scheduling.Node{Name: NodeName(i), Schedulable: true}
		for g := range s.GPUsPerNode {
			n.GPUs = append(n.GPUs, scheduling.GPU{UUID: fmt.Sprintf("GPU-%s-%d", n.Name, g), Model: GPUModel, Healthy: true})
		}
		t.Pool.Nodes = append(t.Pool.Nodes, n)
	}
	quota := map[string]bool{}
	for _, v := range s.VCs {
		quota[v.VC] = true
		t.Quotas = append(t.Quotas, scheduling.Quota{Project: v.VC, Pool: opts.Pool,
			NominalMilli: int64(v.Nodes) * int64(s.GPUsPerNode) * scheduling.MilliPerGPU})
	}
	type key struct {
		submit int64
		gpus   int
		vc     string
	}
	rows := map[key][]int{}
	t.Jobs = make([]trace.Job, len(s.Jobs))
	noQuota, rounded, tooBig := 0, 0, 0
	for i, r := range s.Jobs {
		submit := int64(r.Submit.Sub(epoch) / time.Second)
		req := Request(r.GPUs, s.GPUsPerNode, opts.Pool)
		at := epoch.Add(time.Duration(submit) * time.Second)
		t.Jobs[i] = trace.Job{
			Spec: scheduling.PendingJob{ID: fmt.Sprintf("philly-%d", r.Line), Project: r.VC, Queue: Tier.String(), Tier: Tier,
				Request: req, SubmitTime: at, WaitingSince: at},
			GPUs: r.GPUs, Submit: submit, Scheduled: true, RunSeconds: r.Duration, End: submit + r.Duration, Line: r.Line,
		}
		k := key{submit, r.GPUs, r.VC}
		rows[k] = append(rows[k], i)
		if !quota[r.VC] {
			noQuota++
		}
		if req.GPUs != r.GPUs {
			rounded++
		}
		if req.GPUs > s.Nodes*s.GPUsPerNode {
			tooBig++
		}
	}
	matched := 0
	for _, rr := range s.Recorded {
		k := key{int64(rr.Submitted.Sub(epoch) / time.Second), rr.GPUs, rr.VC}
		i := slices.IndexFunc(rows[k], func(i int) bool {
			d := s.Jobs[i].Duration - rr.RunSeconds
			return !t.Jobs[i].HasRecordedWait && d >= -JoinToleranceSeconds && d <= JoinToleranceSeconds
		})
		if rr.VC == "" || i < 0 {
			t.RecordedElsewhere = append(t.RecordedElsewhere, trace.RecordedWait{Project: rr.VC, GPUs: rr.GPUs, WaitS: rr.QueueDelay})
			continue
		}
		j := &t.Jobs[rows[k][i]]
		j.RecordedWait, j.HasRecordedWait = rr.QueueDelay, true
		matched++
	}
	slices.SortFunc(t.Quotas, func(a, b scheduling.Quota) int { return cmp.Compare(a.Project, b.Project) })
	t.Assumptions = []string{
		fmt.Sprintf("Philly: one pool of %d nodes × %d GPUs (%d GPUs); each VC's quota is its nodes in %s × %d GPUs, without borrowing, where the policy applies the trace's quotas (simulation.trace_quotas) (HeliosArtifact's sizing; the machine list is not public)",
			s.Nodes, s.GPUsPerNode, s.Nodes*s.GPUsPerNode, s.Files.VCs, s.GPUsPerNode),
		fmt.Sprintf("Philly: timestamps are the cluster's local wall clock without a zone, read as UTC (no daylight-saving shift); trace second 0 is %s", epoch.Format(TimeLayout)),
		"Philly: every job is a standard-tier job of its VC (the project); it runs for its duration (the sum of its attempts' run times: failures, retries and the gaps between them are not replayed)",
		fmt.Sprintf("Philly: a job of up to %d GPUs runs on one node; a larger one takes whole nodes (%d requests rounded up to whole nodes)", s.GPUsPerNode, rounded),
		fmt.Sprintf("Philly: %d of %d recorded starts matched to a job row (submit, GPUs, VC, run time within %d s); %d jobs belong to VCs without a size (no quota)",
			matched, len(s.Recorded), JoinToleranceSeconds, noQuota),
	}
	if opts.BackgroundStepS > 0 {
		if len(s.NodeSeq) == 0 {
			return nil, fmt.Errorf("philly: simulation.background_step_s %d needs the node sequence (philly_node_sequence.csv), which was not read", opts.BackgroundStepS)
		}
		var st BackgroundStats
		t.Background, st = Background(s.NodeSeq, t.Jobs, epoch, opts.BackgroundStepS, s.Nodes*s.GPUsPerNode)
		t.Assumptions = append(t.Assumptions, backgroundAssumption(s.Files.NodeSequence, opts.BackgroundStepS, s.Nodes*s.GPUsPerNode, st))
	}
	if tooBig > 0 {
		t.Assumptions = append(t.Assumptions, fmt.Sprintf("Philly: %d jobs ask for more GPUs than the pool has and never start", tooBig))
	}
	t.Published = []trace.Published{{
		Label: "all Philly GPU jobs", Jobs: 112956, MeanS: 3760.6, MedianS: 189,
		Source: "InternLM/AcmeTrace data/cluster_summary.csv (Hu et al., NSDI '24), Philly row",
	}}
	return t, nil
}
