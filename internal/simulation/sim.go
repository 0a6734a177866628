// Package simulation replays a GPU cluster trace through scheduling.Plan on a
// virtual clock and reports the queue service it would have given: waits per
// tier against the waits recorded in the trace, time per wait reason,
// preemptions and their effective run loss, GPU utilisation and starvation.
//
// It is a discrete-event simulation: pods arrive at their creation time, run
// for the time the trace gives, and a scheduling cycle runs at every instant
// where something changed (an arrival, a release while jobs wait, a
// preemption) and on a periodic timer while some job waits for a reason that
// time alone can change. Everything the trace does not carry (recovery
// evidence, projects, queues) comes from Config and is stated in the report's
// assumptions.
package simulation

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/accounting"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Input is the trace to simulate: Source when set (any format, package
// trace), else the Alibaba node and pod lists as read by package alibaba.
type Input struct {
	Nodes   []alibaba.NodeRow
	Pods    []alibaba.PodRow
	Skipped alibaba.Skipped // pod rows the reader dropped (ReadOptions.SkipInvalid), reported as given
	// Source, when not nil, is the trace instead of Nodes, Pods and Skipped.
	Source trace.Source
}

// source returns the trace.Source of in.
func (in Input) source() trace.Source {
	if in.Source != nil {
		return in.Source
	}
	return alibaba.Source{Nodes: in.Nodes, Pods: in.Pods, Skipped: in.Skipped}
}

// BatchGCPercent is the GOGC value `gpugov simulate` runs a simulation
// under (runtime/debug.SetGCPercent): a heap goal of 5× the live heap
// instead of 2×. It was set when every cycle rebuilt the whole capacity
// index, when it saved about a third of the CPU time for about 100 MiB more
// heap on the default trace; since the scheduling.Planner reuses the index
// a whole run allocates about 230 MB, and BenchmarkSimulateDefaultTrace's
// gc=400 and gc=100 cases show how much it still saves.
const BatchGCPercent = 400

// simInventoryVersion is the InventoryVersion of every snapshot of a run:
// the simulated pools never change, so one scheduling.Planner index serves
// every cycle.
const simInventoryVersion = 1

// maxRoundsPerInstant bounds the cycles run at one instant after preemptions
// freed GPUs (each round may preempt for the next blocked job).
const maxRoundsPerInstant = 8

type jobState uint8

const (
	stFuture    jobState = iota // not yet created
	stWaiting                   // pending, first wait or after a preemption
	stRunning                   // holding an allocation
	stDone                      // run ended
	stCancelled                 // deleted while waiting (never-scheduled trace pods)
)

// simJob is one GPU pod's life in the simulation. Times are trace seconds.
type simJob struct {
	idx        int
	tj         *trace.Job
	spec       scheduling.PendingJob // as converted; WaitingSince, aging and recovery set on each (re)queue
	objectiveS int64                 // the queue's wait objective; 0 means none
	recovery   scheduling.RecoveryEvidence
	state      jobState

	deleteAt int64 // jobs the trace never scheduled: deleted then, waiting or running
	runLeft  int64 // jobs the trace scheduled: run seconds still to do
	// declaredRun is the run time the job declares, as the replay submits
	// it as run_seconds (the trace's run time, or deletion − creation for a
	// pod never scheduled; at least 1 s): RunningJob.RunSeconds.
	declaredRun int64

	waitStart int64
	reason    vocab.WaitReason // the last cycle's reason; "" until a cycle evaluated the wait
	// wait is the job's wait-event state as the store holds it, and openAt the
	// open event's start: accounting.WaitTransition segments the waits.
	wait   accounting.WaitState
	openAt int64
	// aging is the job's eligible wait (accounting.AgingClock), advanced at
	// the instants the store advances it: arrival and requeue start it, each
	// cycle's wait status starts or stops it, a placement stops it.
	aging        accounting.AgingClock
	firstStart   int64 // -1 until the first run starts
	longestWaitS int64 // the longest continuous wait so far (for the starved-job list)
	endAt        int64 // when the job left: its last run's end, or its deletion while waiting
	seenCycle    int

	// The job's history as the queue service report reads it (report.go):
	// every run, and its wait events, written as the store writes them.
	runs  []simRun
	waits []simWait
	// loss is the effective run loss of the job's last preemption, charged
	// when the run after it ends (or the simulation does): its recompute term
	// is known only then.
	loss *pendingLoss

	runSeq      int
	runStart    int64
	runEnd      int64
	milli       int64
	ckptStep    int64
	preemptedAt []time.Time
	pendIdx     int
	runIdx      int
}

// simRun is one run of a job in trace seconds; end is -1 while it runs.
type simRun struct{ start, end int64 }

// simWait is one closed wait event [start, end) of a job: the reason it
// waited for, as the service's wait_events table records it.
type simWait struct {
	reason     vocab.WaitReason
	start, end int64
}

// pendingLoss is one preemption's accounting.LossInput, less the next run's
// resume and pass times, which the run after the preemption supplies.
type pendingLoss struct {
	in   accounting.LossInput
	tier vocab.Tier
	// redoS is the time the next run needs, from its start, to be back at the
	// step reached at the notice: restore plus the work lost.
	redoS float64
	// resumed is the start of the run after the preemption; -1 until it starts.
	resumed int64
}

func (j *simJob) order() int {
	if j == nil {
		return -1
	}
	return j.idx
}

// engine is the simulation state. pending/pendJobs and running/allocs/runJobs
// are parallel slices kept in a deterministic order (swap-remove), handed to
// Plan without copying.
type engine struct {
	cfg        Config
	trace      *trace.Trace // the converted input
	epoch      time.Time
	pools      []scheduling.Pool
	healthyGPU map[string]bool   // UUIDs of the pool's healthy GPUs
	gpuModel   map[string]string // model of every GPU of the pool, by UUID
	used       accounting.Ledger // milli-GPU granted per GPU UUID
	gpus       int

	jobs     []*simJob
	byID     map[string]*simJob
	cpuOnly  int
	cutOff   int // Running pods deleted at the window end (cut off by it)
	pending  []scheduling.PendingJob
	pendJobs []*simJob
	running  []scheduling.RunningJob
	allocs   []scheduling.Allocation
	runJobs  []*simJob

	events  eventQueue
	now     int64 // the instant the state has been advanced to
	start   int64 // first arrival
	timerAt int64 // the armed timer's instant, -1 when none
	passAt  int64 // the armed scheduling pass's instant (Config.CyclePeriodSeconds), -1 when none

	projects  []string
	projIdx   map[string]int
	usage     []float64 // decayed GPU-seconds per project as of now
	rate      []float64 // GPUs (milli/1000) each project holds now
	usageRows []scheduling.ProjectUsage

	allocMilli  int64   // milli-GPU allocated now
	allocMilliS float64 // integral of allocMilli over time

	cycleNo int
	// planner reuses the static capacity index of pools (which never change
	// during a run) across the cycles; snapshots carry simInventoryVersion.
	planner scheduling.Planner
	// changeable counts the waiting jobs whose last reason a release, a
	// deletion or time alone may change (vocab.WaitReason.TimeCanChange). It
	// is exact after each cycle; jobs queued since then (arrivals, requeued
	// victims) get a cycle at their own instant.
	changeable int
	placed     int
	placements []Placement           // every grant, in order (Report.History)
	releases   []queuereport.Release // every release of GPUs, for the starvation signals
	preempts   map[vocab.Tier]int
	lossGPUS   map[vocab.Tier]float64
	unmeasured int // preemptions whose loss has no recompute term (the next run never passed the step)
	// recomputeGPUS sums the recompute part of the losses: GPUs × recompute seconds.
	recomputeGPUS float64
	wouldPreempt  int

	// bg is the background occupancy, nil without one; nbg is the number of
	// its per-node allocations at the front of allocs (0 without one).
	bg  *background
	nbg int
	// relaxed counts the waits whose locality constraint was relaxed
	// (Config.LocalityRelaxS).
	relaxed int

	// fault is the first broken engine invariant found where no error can be
	// returned (a release of GPUs the ledger had not granted); loop stops on it.
	fault error

	progress     io.Writer
	arrived      int
	nextProgress int
}

// Run replays in under cfg and returns the report. progress, when not nil,
// receives a line at every 5% of arrivals. It returns cfg.Validate's error
// for an invalid Config; any other error means Plan broke its
// contract (a job left without outcome, a GPU granted beyond capacity, a
// victim without recovery evidence …), or that queuereport rejected the
// records the simulation built (a bug of the engine): the simulation stops
// rather than report numbers built on it.
func Run(in Input, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("simulation config: %w", err)
	}
	tr, err := in.source().Trace(trace.Options{Pool: cfg.PoolName, Stage: cfg.Stage, Projects: cfg.Projects,
		BackgroundStepS: cfg.BackgroundStepS})
	if err != nil {
		return nil, fmt.Errorf("simulation input: %w", err)
	}
	if cfg.TraceQuotas {
		cfg.Quotas = withTraceQuotas(cfg.Quotas, tr.Quotas)
	}
	e := newEngine(tr, cfg, progress)
	if err := e.loop(); err != nil {
		return nil, err
	}
	return e.report()
}

// withTraceQuotas adds the trace's quotas to the policy's, the policy's
// winning for a project and pool both name.
func withTraceQuotas(policyQuotas, traceQuotas []scheduling.Quota) []scheduling.Quota {
	out := slices.Clone(policyQuotas)
	for _, q := range traceQuotas {
		if !slices.ContainsFunc(policyQuotas, func(p scheduling.Quota) bool { return p.Project == q.Project && p.Pool == q.Pool }) {
			out = append(out, q)
		}
	}
	return out
}

func newEngine(tr *trace.Trace, cfg Config, progress io.Writer) *engine {
	e := &engine{
		cfg: cfg, trace: tr, epoch: tr.Epoch, timerAt: -1, passAt: -1, progress: progress,
		pools:      []scheduling.Pool{tr.Pool},
		healthyGPU: map[string]bool{}, gpuModel: map[string]string{}, used: accounting.Ledger{}, byID: map[string]*simJob{},
		projIdx: map[string]int{}, preempts: map[vocab.Tier]int{}, lossGPUS: map[vocab.Tier]float64{},
	}
	for _, n := range e.pools[0].Nodes {
		for _, g := range n.GPUs {
			e.healthyGPU[g.UUID] = true
			e.gpuModel[g.UUID] = g.Model
			e.gpus++
		}
	}
	e.initBackground(tr.Background)
	e.addJobs(tr)
	return e
}

// addJobs takes the trace's GPU jobs, draws their recovery evidence and
// queues their arrival (and, for jobs the trace never scheduled, their
// deletion) events.
func (e *engine) addJobs(tr *trace.Trace) {
	e.cpuOnly = tr.NonGPU
	e.start = math.MaxInt64
	for i := range tr.Jobs {
		p := &tr.Jobs[i]
		spec := p.Spec
		if p.CutOff {
			e.cutOff++
		}
		j := &simJob{idx: len(e.jobs), tj: p, spec: spec, firstStart: -1, pendIdx: -1, runIdx: -1}
		if q := e.queue(spec.Queue); q != nil {
			j.objectiveS = int64(q.MaxWait / time.Second)
			j.spec.Protected = q.Protected
		}
		j.recovery = drawRecovery(e.cfg, spec.ID, spec.Tier)
		if p.Scheduled {
			j.runLeft, j.declaredRun = p.RunSeconds, max(p.RunSeconds, 1)
		} else {
			j.deleteAt, j.declaredRun = p.End, max(p.End-p.Submit, 1)
			e.events.push(event{t: p.End, kind: evCancel, job: j})
		}
		e.events.push(event{t: p.Submit, kind: evArrival, job: j})
		e.start = min(e.start, p.Submit)
		e.jobs = append(e.jobs, j)
		e.byID[spec.ID] = j
		e.project(spec.Project)
	}
	if len(e.jobs) == 0 {
		e.start = 0
	}
	e.now = e.start
	slices.Sort(e.projects)
	for i, p := range e.projects {
		e.projIdx[p] = i
	}
}

func (e *engine) queue(name string) *scheduling.Queue {
	for i := range e.cfg.Queues {
		if e.cfg.Queues[i].Name == name {
			return &e.cfg.Queues[i]
		}
	}
	return nil
}

func (e *engine) project(name string) {
	if _, ok := e.projIdx[name]; !ok {
		e.projIdx[name] = -1
		e.projects = append(e.projects, name)
		e.usage = append(e.usage, 0)
		e.rate = append(e.rate, 0)
	}
}

// at converts a trace second to the instant Plan sees.
func (e *engine) at(t int64) time.Time { return e.epoch.Add(time.Duration(t) * time.Second) }

// loop runs the virtual clock until no event is left.
func (e *engine) loop() error {
	for e.events.Len() > 0 {
		if ev := e.events[0]; ev.kind == evTimer && (ev.t != e.timerAt || len(e.pending) == 0) {
			e.events.pop() // superseded or idle: not an instant of the simulation
			continue
		}
		t := e.events[0].t
		e.advance(t)
		changed := false
		for e.events.Len() > 0 && e.events[0].t == t {
			if e.apply(e.events.pop(), t) {
				changed = true
			}
		}
		if e.fault != nil {
			return e.fault
		}
		if changed && !e.onPass(t) {
			changed = false // deferred to the next scheduling pass
		}
		if changed {
			if err := e.schedule(t); err != nil {
				return err
			}
		}
		e.logProgress(t)
	}
	e.finish()
	if e.progress != nil {
		fmt.Fprintf(e.progress, "simulate: done at t=%ds (day %.1f), cycles %d, placed %d, still waiting %d\n",
			e.now, float64(e.now)/86400, e.cycleNo, e.placed, len(e.pending))
	}
	return nil
}

// onPass reports whether a cycle due at t runs at t: always without
// Config.CyclePeriodSeconds; with it, only at a multiple of the period, the
// cycle otherwise deferred to the next multiple (one pass for every change
// in between).
func (e *engine) onPass(t int64) bool {
	p := e.cfg.CyclePeriodSeconds
	if p <= 0 || t%p == 0 {
		return true
	}
	if at := (t/p + 1) * p; e.passAt != at {
		e.passAt = at
		e.events.push(event{t: at, kind: evPass})
	}
	return false
}

// apply carries out one event and reports whether a scheduling cycle is due.
func (e *engine) apply(ev event, t int64) bool {
	j := ev.job
	switch ev.kind {
	case evCompletion:
		if j.state != stRunning || ev.seq != j.runSeq {
			return false // a run that was preempted; its completion is void
		}
		e.release(j, t)
		e.chargeLoss(j, t)
		j.state, j.endAt = stDone, t
		return e.changeable > 0
	case evArrival:
		j.state = stWaiting
		j.waitStart, j.wait.WaitingSince = t, e.at(t)
		e.addPending(j, t)
		e.arrived++
		return true
	case evCancel:
		if j.state != stWaiting {
			return false // running: its run ends at the deletion by its completion event
		}
		e.endWait(j, t)
		if j.wait.Open { // the store's cancel closes the open wait event
			e.closeWait(j, t)
		}
		e.removePending(j)
		j.state, j.endAt = stCancelled, t
		return e.changeable > 0
	case evBackground:
		return e.backgroundStep(ev.seq) && len(e.pending) > 0
	case evPass:
		if t != e.passAt {
			return false
		}
		e.passAt = -1
		return true
	case evTimer:
		if t != e.timerAt {
			return false // superseded by a later arming
		}
		e.timerAt = -1
		return true
	}
	return false
}

// schedule runs the cycles of instant t and arms the timer.
func (e *engine) schedule(t int64) error {
	preempted := true
	for round := 0; preempted && round < maxRoundsPerInstant; round++ {
		var err error
		if preempted, err = e.cycle(t); err != nil {
			return err
		}
	}
	// A preemption in the last round leaves requeued victims without a cycle:
	// the timer gives them one.
	e.timerAt = -1
	if len(e.pending) > 0 && (preempted || len(e.running) > 0 && e.changeable > 0) {
		e.timerAt = t + e.cfg.CycleIntervalSeconds
		e.events.push(event{t: e.timerAt, kind: evTimer})
	}
	return nil
}

// cycle runs one scheduling cycle at t and applies its outcome. It reports
// whether a preemption was carried out (GPUs were freed for a blocked job).
func (e *engine) cycle(t int64) (bool, error) {
	now := e.at(t)
	e.refreshCheckpoints(t)
	e.relaxLocality(t)
	snap := &scheduling.Snapshot{
		Pools: e.pools, Allocations: e.allocs, Running: e.running, Pending: e.pending,
		Quotas: e.cfg.Quotas, Queues: e.cfg.Queues, Usage: e.usageAt(now),
		CycleIntervalSeconds: float64(e.cfg.CycleIntervalSeconds),
		InventoryVersion:     simInventoryVersion,
	}
	res := e.planner.Plan(snap, &e.cfg.Policy, now)
	if res == nil {
		return false, fmt.Errorf("t=%ds: scheduling.Plan returned no result", t)
	}
	e.cycleNo++
	e.changeable = 0
	for _, w := range res.Waiting {
		j, err := e.pendingByID(w.JobID, t, "wait status")
		if err != nil {
			return false, err
		}
		e.segment(j, accounting.WaitTransition(j.wait, false, w.Reason, w.Detail, now), w.Reason, w.Detail, t)
		j.reason = w.Reason
		j.aging = j.aging.OnReason(w.Reason, now)
		e.syncAging(j)
		if w.Reason.TimeCanChange() {
			e.changeable++
		}
	}
	for i := range res.Placements {
		j, err := e.pendingByID(res.Placements[i].JobID, t, "placement")
		if err != nil {
			return false, err
		}
		if err := e.startRun(j, &res.Placements[i], t); err != nil {
			return false, err
		}
	}
	for _, j := range e.pendJobs {
		if j.seenCycle != e.cycleNo {
			return false, fmt.Errorf("t=%ds: scheduling.Plan gave pending job %s neither a placement nor a wait status", t, j.spec.ID)
		}
	}
	return e.applyPreemptions(res.Preemptions, t)
}

// relaxLocality lets every pending job of more than one GPU that has
// waited Config.LocalityRelaxS or longer in its current wait spread over
// any nodes of the pool (scheduling.TopologyAny) instead of one node or
// whole nodes: Philly's scheduler relaxed a waiting job's locality
// constraint (Jeon et al., ATC '19). The job's own request is kept: a
// requeued job starts its new wait under it again.
func (e *engine) relaxLocality(t int64) {
	r := e.cfg.LocalityRelaxS
	if r <= 0 {
		return
	}
	for i, j := range e.pendJobs {
		req := &e.pending[i].Request
		if req.Topology != scheduling.TopologyAny && req.GPUs > 1 && t-j.waitStart >= r {
			req.Topology = scheduling.TopologyAny
			e.relaxed++
		}
	}
}

// pendingByID finds the pending job an outcome names and marks it as having
// one in this cycle; a second outcome or an unknown job is a Plan error.
func (e *engine) pendingByID(id string, t int64, what string) (*simJob, error) {
	j := e.byID[id]
	switch {
	case j == nil || j.state != stWaiting:
		return nil, fmt.Errorf("t=%ds: scheduling.Plan gave a %s to %q, which is not pending", t, what, id)
	case j.seenCycle == e.cycleNo:
		return nil, fmt.Errorf("t=%ds: scheduling.Plan gave pending job %s more than one outcome", t, id)
	}
	j.seenCycle = e.cycleNo
	return j, nil
}

// startRun grants pl to j: it checks the grant against GPU capacity and the
// request, records the wait that ends, and queues the run's completion.
func (e *engine) startRun(j *simJob, pl *scheduling.Placement, t int64) error {
	var milli int64
	for _, g := range pl.GPUs {
		if !e.healthyGPU[g.UUID] {
			return fmt.Errorf("t=%ds: placement of %s names GPU %q, not a healthy GPU of the pool", t, j.spec.ID, g.UUID)
		}
		milli += int64(g.Milli)
	}
	if why := e.used.Admit(pl.GPUs); why != "" {
		return fmt.Errorf("t=%ds: placement of %s refused by the store's admission rules: %s (docs/design.md invariant 1)",
			t, j.spec.ID, why)
	}
	if want := j.spec.Request.TotalMilli(); milli != want || len(pl.GPUs) != j.spec.Request.GPUs {
		return fmt.Errorf("t=%ds: placement of %s grants %d milli-GPU on %d GPUs, the request needs %d on %d",
			t, j.spec.ID, milli, len(pl.GPUs), want, j.spec.Request.GPUs)
	}
	e.used.Grant(pl.GPUs)
	e.endWait(j, t)
	e.segment(j, accounting.WaitTransition(j.wait, true, "", "", e.at(t)), "", "", t)
	e.removePending(j)
	if j.loss != nil {
		j.loss.resumed = t
	}
	if j.firstStart >= 0 {
		// The resume from the checkpoint is this run: the simulator's resumes
		// are always verified, for the job and its profile alike.
		j.recovery.VerifiedResumes++
		j.recovery.ProfileVerifiedResumes++
	} else {
		j.firstStart = t
	}
	j.state, j.runSeq, j.runStart, j.ckptStep, j.milli = stRunning, j.runSeq+1, t, 0, milli
	j.runs = append(j.runs, simRun{start: t, end: -1})
	j.runEnd = t + j.runLeft
	if !j.tj.Scheduled {
		j.runEnd = j.deleteAt // the owner deleted the pod then, whenever it started
	}
	now := e.at(t)
	req := j.spec.Request
	alloc := scheduling.Allocation{
		ID: fmt.Sprintf("%s/run-%d", j.spec.ID, j.runSeq), JobID: j.spec.ID, Pool: pl.Pool, Node: pl.Node,
		GPUs: pl.GPUs, CPUMilli: req.CPUMilli, MemoryMiB: req.MemoryMiB, Borrowed: pl.Borrowed,
	}
	j.runIdx = len(e.running)
	e.running = append(e.running, scheduling.RunningJob{
		ID: j.spec.ID, Project: j.spec.Project, Queue: j.spec.Queue, Tier: j.spec.Tier, Request: req,
		Allocation: alloc, StartedAt: now, RunSeconds: j.declaredRun, Recovery: j.recovery, Protected: j.spec.Protected,
		RecentPreemptions: e.recentPreemptions(j, now),
	})
	e.allocs = append(e.allocs, alloc)
	e.runJobs = append(e.runJobs, j)
	e.allocMilli += milli
	e.rate[e.projIdx[j.spec.Project]] += float64(milli) / scheduling.MilliPerGPU
	e.placed++
	e.placements = append(e.placements, Placement{JobID: j.spec.ID, At: now, Cycle: e.cycleNo, Rank: pl.Rank, Node: pl.Node})
	e.events.push(event{t: j.runEnd, kind: evCompletion, job: j, seq: j.runSeq})
	return nil
}

// recentPreemptions returns j's preemption times inside the anti-thrash window.
func (e *engine) recentPreemptions(j *simJob, now time.Time) []time.Time {
	var recent []time.Time
	window := time.Duration(e.cfg.Policy.Preemption.WindowSeconds * float64(time.Second))
	for _, p := range j.preemptedAt {
		if now.Sub(p) < window {
			recent = append(recent, p)
		}
	}
	return recent
}

// applyPreemptions stops the victims of every proposal Plan lets act and
// counts the others as "would preempt". It reports whether any victim stopped.
func (e *engine) applyPreemptions(props []scheduling.PreemptionProposal, t int64) (bool, error) {
	stopped := false
	for _, pr := range props {
		if !pr.Act {
			e.wouldPreempt++
			continue
		}
		for _, v := range pr.Victims {
			if err := e.preempt(v.JobID, pr.ForJobID, t); err != nil {
				return stopped, err
			}
			stopped = true
		}
		// The store's record of victims released for the job in its
		// current wait (scheduling.PendingJob.VictimsReleasedAt).
		if j := e.byID[pr.ForJobID]; j != nil && j.state == stWaiting && j.pendIdx >= 0 {
			e.pending[j.pendIdx].VictimsReleasedAt = e.at(t)
		}
	}
	return stopped, nil
}

// preempt stops victim id at t, books its effective run loss and requeues
// it. Checkpoints are taken every CheckpointIntervalSeconds of the run and the
// victim saves none on the way out, so its resumable checkpoint is the run's
// last periodic one (none before the first interval) and the work since then
// is lost. The loss is accounting.EffectiveRunLoss, the service's formula:
// lost since checkpoint + save/restore (0 here: no checkpoint is saved after
// the notice) + recompute, per GPU held. The service measures recompute as
// the time from the next run's start until it is back past the step reached
// at the notice; the simulator's next run restores for
// Policy.Preemption.SaveRestoreSeconds and then redoes the lost seconds, so
// it passes that step restore + lost after it starts — measured when the run
// gets there before it ends or the simulation does, as in the service, and
// otherwise left out (Preemptions.RecomputeUnmeasured). The loss is booked
// when that next run ends (chargeLoss). The requeued job keeps its submit
// time and accrued aging; its remaining work is what it had left plus the
// lost seconds plus the restore time.
func (e *engine) preempt(id, forID string, t int64) error {
	j := e.byID[id]
	switch {
	case j == nil || j.state != stRunning:
		return fmt.Errorf("t=%ds: scheduling.Plan proposed %q as a victim for %s, but it is not running", t, id, forID)
	case !j.recovery.Checkpointable || j.spec.Protected:
		return fmt.Errorf("t=%ds: scheduling.Plan proposed %s (checkpointable %v, protected %v) as a victim for %s (docs/design.md invariant 5)",
			t, id, j.recovery.Checkpointable, j.spec.Protected, forID)
	}
	e.chargeLoss(j, t) // a run preempted before it passed the earlier preemption's step
	interval := j.recovery.CheckpointIntervalSeconds
	in := accounting.LossInput{GPUs: float64(j.milli) / scheduling.MilliPerGPU, NotifiedAt: e.at(t), RunStartedAt: e.at(j.runStart)}
	if step := (t - j.runStart) / interval; step > 0 {
		in.Resumable = &scheduling.Checkpoint{At: e.at(j.runStart + step*interval), Step: step}
	}
	lost := (t - j.runStart) % interval
	restore := e.cfg.Policy.Preemption.SaveRestoreSeconds
	j.loss = &pendingLoss{in: in, tier: j.spec.Tier, redoS: restore + float64(lost), resumed: -1}
	e.preempts[j.spec.Tier]++
	e.release(j, t)
	if j.tj.Scheduled {
		j.runLeft = (j.runEnd - t) + lost + int64(math.Ceil(restore))
	}
	j.preemptedAt = append(j.preemptedAt, e.at(t))
	j.state = stWaiting
	// The store's requeue: waiting since the release, no reason, no open event.
	j.waitStart, j.reason = t, ""
	j.wait.WaitingSince = e.at(t)
	e.addPending(j, t)
	return nil
}

// chargeLoss books the effective run loss of j's last preemption, if any, at
// t, when the run after it has ended or the simulation does: the recompute
// is measured when that run started and reached the step of the notice by t.
func (e *engine) chargeLoss(j *simJob, t int64) {
	pl := j.loss
	if pl == nil {
		return
	}
	j.loss = nil
	in := pl.in
	if pl.resumed >= 0 && float64(pl.resumed)+pl.redoS <= float64(t) {
		in.ResumedAt = e.at(pl.resumed)
		in.PassedAt = in.ResumedAt.Add(time.Duration(pl.redoS * float64(time.Second)))
	}
	l := accounting.EffectiveRunLoss(in)
	if !l.RecomputeMeasured {
		e.unmeasured++
	}
	e.recomputeGPUS += in.GPUs * l.RecomputeSeconds
	e.lossGPUS[pl.tier] += l.GPUSeconds
}

// release returns j's GPUs at t, takes it off the running list, ends its
// run and records the release with the models of the GPUs freed.
func (e *engine) release(j *simJob, t int64) {
	var models []string
	ai := e.nbg + j.runIdx
	if err := e.used.Release(e.allocs[ai].GPUs); err != nil && e.fault == nil {
		e.fault = fmt.Errorf("t=%ds: release of %s: %w", t, j.spec.ID, err)
	}
	for _, g := range e.allocs[ai].GPUs {
		if m := e.gpuModel[g.UUID]; !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	slices.Sort(models)
	e.releases = append(e.releases, queuereport.Release{At: e.at(t), Pool: e.pools[0].Name, Models: models, GPUMilli: j.milli})
	j.runs[len(j.runs)-1].end = t
	e.allocMilli -= j.milli
	e.rate[e.projIdx[j.spec.Project]] -= float64(j.milli) / scheduling.MilliPerGPU
	last := len(e.running) - 1
	i := j.runIdx
	e.running[i], e.allocs[e.nbg+i], e.runJobs[i] = e.running[last], e.allocs[e.nbg+last], e.runJobs[last]
	e.runJobs[i].runIdx = i
	e.running, e.allocs, e.runJobs = e.running[:last], e.allocs[:e.nbg+last], e.runJobs[:last]
	j.runIdx = -1
}

// addPending puts j on the pending list as Plan sees it: waiting since t,
// with its accrued aging and current recovery evidence.
func (e *engine) addPending(j *simJob, t int64) {
	pj := j.spec
	pj.WaitingSince = e.at(t)
	j.aging = j.aging.Start(e.at(t))
	pj.Recovery = j.recovery
	pj.RecentPreemptions = e.recentPreemptions(j, e.at(t))
	j.pendIdx = len(e.pending)
	e.pending = append(e.pending, pj)
	e.pendJobs = append(e.pendJobs, j)
	e.syncAging(j)
}

// syncAging copies j's aging clock into its pending entry, as the store's
// snapshot reads jobs.accrued_aging_s and jobs.aging_since.
func (e *engine) syncAging(j *simJob) {
	pj := &e.pending[j.pendIdx]
	pj.AccruedAgingS, pj.AgingSince, pj.AgingPaused = j.aging.AccruedS, j.aging.Since, !j.aging.Running()
}

func (e *engine) removePending(j *simJob) {
	last := len(e.pending) - 1
	i := j.pendIdx
	e.pending[i], e.pendJobs[i] = e.pending[last], e.pendJobs[last]
	e.pendJobs[i].pendIdx = i
	e.pending, e.pendJobs = e.pending[:last], e.pendJobs[:last]
	j.pendIdx = -1
}

// segment applies one accounting.WaitStep of j at t (reason and detail are
// the cycle's wait status, empty for a placement): the closed
// not-yet-evaluated event, the close of the open event, the new open event
// or the refresh of the open one's detail, as the store writes them.
func (e *engine) segment(j *simJob, st accounting.WaitStep, reason vocab.WaitReason, detail string, t int64) {
	if st.NotYetEvaluated {
		from := int64(st.NotYetEvaluatedFrom.Sub(e.epoch) / time.Second)
		j.waits = append(j.waits, simWait{reason: vocab.ReasonNotYetEvaluated, start: from, end: t})
		j.wait.LastEnded = e.at(t)
	}
	if st.Close {
		e.closeWait(j, t)
	}
	if st.Open {
		j.wait.Open, j.wait.Reason, j.wait.Detail = true, reason, detail
		j.openAt = t
	}
	if st.Refresh { // the same wait goes on: its latest detail, its start kept
		j.wait.Detail = detail
	}
}

// closeWait closes j's open wait event at t (accounting.CloseAt).
func (e *engine) closeWait(j *simJob, t int64) {
	end := max(t, j.openAt)
	j.waits = append(j.waits, simWait{reason: j.wait.Reason, start: j.openAt, end: end})
	j.wait.Open, j.wait.Reason, j.wait.Detail = false, "", ""
	j.wait.LastEnded = e.at(end)
}

// endWait ends the wait of j at t (a run starts, the pod is deleted, or the
// simulation ends): the longest continuous wait, and the eligible stretch
// carried into aging (accounting.AgingClock.Stop). The waits themselves are derived from the job's submit time and runs
// by queuereport (report.go); its wait events are closed by the caller.
func (e *engine) endWait(j *simJob, t int64) {
	w := t - j.waitStart
	j.longestWaitS = max(j.longestWaitS, w)
	j.aging = j.aging.Stop(e.at(t))
}

// refreshCheckpoints sets each checkpointable run's last checkpoint as of t:
// runs checkpoint every CheckpointIntervalSeconds from their start.
func (e *engine) refreshCheckpoints(t int64) {
	for i, j := range e.runJobs {
		if !j.recovery.Checkpointable {
			continue
		}
		step := (t - j.runStart) / j.recovery.CheckpointIntervalSeconds
		if step == j.ckptStep {
			continue
		}
		j.ckptStep = step
		at := j.runStart + step*j.recovery.CheckpointIntervalSeconds
		e.running[i].Recovery.LastCheckpoint = &scheduling.Checkpoint{
			At: e.at(at), Step: step, Location: fmt.Sprintf("sim://%s/run-%d/ckpt-%d", j.spec.ID, j.runSeq, step),
		}
	}
}

// advance moves the clock to t, integrating allocated GPU-seconds and every
// project's decayed usage. Usage grows at the project's GPU rate r and decays
// with half-life h, so over dt it becomes scheduling.DecayUsage of U plus
// scheduling.AccrueUsage of r: the store's rule for charging a run's usage.
func (e *engine) advance(t int64) {
	dt := t - e.now
	if dt <= 0 {
		return
	}
	e.allocMilliS += float64(e.allocMilli) * float64(dt)
	if e.bg != nil {
		e.bg.heldS += float64(e.bg.held) * float64(dt)
		e.bg.wantS += float64(e.bg.target) * float64(dt)
	}
	if e.cfg.Policy.FairShare.Enabled {
		h := e.cfg.Policy.FairShare.HalfLifeSeconds
		from, to := e.at(e.now), e.at(t)
		for i := range e.usage {
			e.usage[i] = scheduling.DecayUsage(e.usage[i], from, to, h) + scheduling.AccrueUsage(e.rate[i], float64(dt), h)
		}
	}
	e.now = t
}

// usageAt returns the projects' decayed usage as of now (the clock is there),
// their shares set from Config.ProjectWeights.
func (e *engine) usageAt(now time.Time) []scheduling.ProjectUsage {
	if !e.cfg.Policy.FairShare.Enabled {
		return nil
	}
	e.usageRows = e.usageRows[:0]
	for i, p := range e.projects {
		e.usageRows = append(e.usageRows, scheduling.ProjectUsage{Project: p, DecayedGPUSeconds: e.usage[i], AsOf: now})
	}
	policy.ApplyProjectWeights(e.usageRows, e.cfg.ProjectWeights)
	return e.usageRows
}

// finish ends the waits of the jobs still pending when no event is left,
// closing their open wait events at the simulation's end, and books the
// losses of preemptions whose next run has not ended.
func (e *engine) finish() {
	for _, j := range e.pendJobs {
		e.endWait(j, e.now)
		if j.wait.Open {
			e.closeWait(j, e.now)
		}
	}
	for _, j := range e.jobs {
		e.chargeLoss(j, e.now)
	}
}

func (e *engine) logProgress(t int64) {
	if e.progress == nil || len(e.jobs) == 0 {
		return
	}
	pct := e.arrived * 100 / len(e.jobs)
	if pct < e.nextProgress {
		return
	}
	e.nextProgress = pct/5*5 + 5
	fmt.Fprintf(e.progress, "simulate: %3d%% of arrivals, t=%ds (day %.1f), cycles %d, placed %d, running %d, waiting %d\n",
		pct, t, float64(t)/86400, e.cycleNo, e.placed, len(e.running), len(e.pending))
}
