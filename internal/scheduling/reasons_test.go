package scheduling

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// busyNode returns running jobs that occupy the given GPU indices of node n
// (one job per GPU, standard tier, not checkpointable so never a victim).
func busyNode(pool string, n Node, idx ...int) []RunningJob {
	var rs []RunningJob
	for _, i := range idx {
		r := mkRunning(n.Name+"-busy"+string(rune('a'+i)), vocab.TierStandard, pool, n.Name, time.Hour, n.GPUs[i].UUID)
		r.Recovery.Checkpointable = false
		rs = append(rs, r)
	}
	return rs
}

// TestWaitReasons has one scenario per wait reason of docs/design.md §1 and checks
// the reason, the blocking job and the quantities in the texts.
func TestWaitReasons(t *testing.T) {
	n1 := mkNode("n1", 8, "H100", 81920, 4)
	n2 := mkNode("n2", 8, "H100", 81920, 4)
	tests := []struct {
		name     string
		build    func() *Snapshot
		job      string
		reason   vocab.WaitReason
		blocking string
		detail   []string // substrings of Detail
		reEval   []string // substrings of ReEvaluate
	}{
		{
			name: "held",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierStandard, 1, "p", 0)
				j.Held = true
				return &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{j}}
			},
			job: "j", reason: vocab.ReasonHeld, reEval: []string{"hold is released"},
		},
		{
			name: "pool unknown",
			build: func() *Snapshot {
				return &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{mkJob("j", vocab.TierStandard, 1, "nope", 0)}}
			},
			job: "j", reason: vocab.ReasonPoolUnavailable, detail: []string{`pool "nope" is unknown`},
		},
		{
			name: "pool drained",
			build: func() *Snapshot {
				p := mkPool("p", n1)
				p.Available = false
				return &Snapshot{Pools: []Pool{p}, Pending: []PendingJob{mkJob("j", vocab.TierStandard, 1, "p", 0)}}
			},
			job: "j", reason: vocab.ReasonPoolUnavailable, detail: []string{"drained or cordoned"},
		},
		{
			name: "every node cordoned",
			build: func() *Snapshot {
				c := mkNode("c", 8, "H100", 81920, 4)
				c.Schedulable = false
				return &Snapshot{Pools: []Pool{mkPool("p", c)}, Pending: []PendingJob{mkJob("j", vocab.TierStandard, 1, "p", 0)}}
			},
			job: "j", reason: vocab.ReasonPoolUnavailable, detail: []string{"no schedulable node"},
		},
		{
			name: "environment not ready",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierStandard, 1, "p", 0)
				j.Prerequisites = []Prerequisite{{Name: "image", Ready: true}, {Name: "dataset", Message: "volume not mounted"}}
				return &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{j}}
			},
			job: "j", reason: vocab.ReasonEnvironmentNotReady,
			detail: []string{`"dataset" not ready: volume not mounted`}, reEval: []string{"dataset"},
		},
		{
			name: "preemption in progress",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierKeyProject, 8, "p", 0)
				j.PreemptionInProgress = []string{"victim-1"}
				s := &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{j}}
				withRunning(s, mkRunning("victim-1", vocab.TierExperiment, "p", "n1", time.Hour, "n1-gpu0"))
				return s
			},
			job: "j", reason: vocab.ReasonPreemptionInProgress, detail: []string{"victim-1"},
		},
		{
			name: "no matching model",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierStandard, 2, "p", 0)
				j.Request.GPUModels = []string{"A100"}
				return &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{j}}
			},
			job: "j", reason: vocab.ReasonNoMatchingCapacity, detail: []string{"needs 2 × A100 anywhere in the pool", "0 matching"},
			reEval: []string{"waiting will not help"},
		},
		{
			name: "too many GPUs for one node",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierStandard, 12, "p", 0)
				j.Request.Topology = TopologySameNode
				return &Snapshot{Pools: []Pool{mkPool("p", n1, n2)}, Pending: []PendingJob{j}}
			},
			job: "j", reason: vocab.ReasonNoMatchingCapacity, detail: []string{"16 matching", "largest group on one node 8"},
		},
		{
			name: "not enough memory per GPU",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierStandard, 1, "p", 0)
				j.Request.GPUMemoryMiB = 143360
				return &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{j}}
			},
			job: "j", reason: vocab.ReasonNoMatchingCapacity, detail: []string{"≥143360 MiB"},
		},
		{
			name: "quota exhausted",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierKeyProject, 2, "p", 0)
				j.Project = "team"
				r := mkRunning("r", vocab.TierKeyProject, "p", "n1", time.Hour, "n1-gpu0", "n1-gpu1")
				r.Project = "team"
				s := &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{j},
					Quotas: []Quota{{Project: "team", Pool: "p", NominalMilli: 3000, BorrowingLimitMilli: 8000}}}
				withRunning(s, r)
				return s
			},
			job: "j", reason: vocab.ReasonQuotaExhausted,
			detail: []string{"uses 2000 of nominal 3000", "needs 2000 more", "tier key-project may not borrow"},
			reEval: []string{"at most 1000 milli-GPU"},
		},
		{
			name: "reserved for a higher-ranked job",
			build: func() *Snapshot {
				big := mkJob("big", vocab.TierKeyProject, 8, "p", 0)
				big.Request.Topology = TopologySameNode
				small := mkJob("small", vocab.TierStandard, 1, "p", 0)
				s := &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{small, big}}
				withRunning(s, busyNode("p", n1, 0, 1, 2, 3)...)
				return s
			},
			job: "small", reason: vocab.ReasonReservedForHigherPriority, blocking: "big",
			detail: []string{"8 match in pool, 4 free (4 reserved for higher-ranked jobs)", "reserved for job big"},
			reEval: []string{"when job big starts"},
		},
		{
			name: "fragmented",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierStandard, 4, "p", 0)
				j.Request.Topology = TopologySameNode
				s := &Snapshot{Pools: []Pool{mkPool("p", n1, n2)}, Pending: []PendingJob{j}}
				withRunning(s, busyNode("p", n1, 0, 1, 2, 3, 4, 5)...)
				withRunning(s, busyNode("p", n2, 0, 1, 2, 3, 4)...)
				return s
			},
			job: "j", reason: vocab.ReasonFragmented,
			detail: []string{"needs 4 × GPU on one node; 16 match in pool, 5 free, largest free group on one node 3"},
			reEval: []string{"when 4 matching GPU(s) on one node are free"},
		},
		{
			name: "capacity busy",
			build: func() *Snapshot {
				j := mkJob("j", vocab.TierStandard, 2, "p", 0)
				j.Request.GPUModels = []string{"H100", "H200"}
				j.Request.GPUMemoryMiB = 81920
				s := &Snapshot{Pools: []Pool{mkPool("p", n1)}, Pending: []PendingJob{j}}
				withRunning(s, busyNode("p", n1, 0, 1, 2, 3, 4, 5, 6)...)
				return s
			},
			job: "j", reason: vocab.ReasonCapacityBusy,
			detail: []string{"needs 2 × ≥81920 MiB H100|H200 anywhere in the pool; 8 match in pool, 1 free"},
			reEval: []string{"when 2 matching GPU(s) anywhere in the pool are free"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			p.Preemption.Enabled = false
			res := Plan(tc.build(), p, t0)
			w := waitOf(res, tc.job)
			if w == nil {
				t.Fatalf("job %s not waiting; placements %+v", tc.job, res.Placements)
			}
			if w.Reason != tc.reason || w.BlockingJobID != tc.blocking {
				t.Fatalf("reason %s blocking %q, want %s %q (detail %q)", w.Reason, w.BlockingJobID, tc.reason, tc.blocking, w.Detail)
			}
			for _, d := range tc.detail {
				if !strings.Contains(w.Detail, d) {
					t.Errorf("detail %q lacks %q", w.Detail, d)
				}
			}
			for _, r := range tc.reEval {
				if !strings.Contains(w.ReEvaluate, r) {
					t.Errorf("re-evaluate %q lacks %q", w.ReEvaluate, r)
				}
			}
			if w.Detail == "" || w.ReEvaluate == "" {
				t.Errorf("empty texts: %+v", w)
			}
		})
	}
}

// TestReasonPrecedence checks that when several reasons apply, the one
// earliest in held > pool_unavailable > environment_not_ready >
// preemption_in_progress > no_matching_capacity > quota_exhausted wins.
func TestReasonPrecedence(t *testing.T) {
	notReady := []Prerequisite{{Name: "image"}}
	tests := []struct {
		name   string
		mod    func(j *PendingJob)
		reason vocab.WaitReason
	}{
		{"held beats unknown pool", func(j *PendingJob) { j.Held = true; j.Request.Pool = "nope" }, vocab.ReasonHeld},
		{"unknown pool beats not ready", func(j *PendingJob) { j.Request.Pool = "nope"; j.Prerequisites = notReady }, vocab.ReasonPoolUnavailable},
		{"not ready beats preempting", func(j *PendingJob) { j.Prerequisites = notReady; j.PreemptionInProgress = []string{"v"} }, vocab.ReasonEnvironmentNotReady},
		{"preempting beats no match", func(j *PendingJob) { j.PreemptionInProgress = []string{"v"}; j.Request.GPUs = 99 }, vocab.ReasonPreemptionInProgress},
		{"no match beats quota", func(j *PendingJob) { j.Request.GPUs = 99 }, vocab.ReasonNoMatchingCapacity},
		{"quota beats capacity", func(j *PendingJob) {}, vocab.ReasonQuotaExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := mkNode("n1", 8, "H100", 81920, 0)
			j := mkJob("j", vocab.TierKeyProject, 2, "p", 0)
			j.Project = "team"
			tc.mod(&j)
			s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{j},
				Quotas: []Quota{{Project: "team", Pool: "p", NominalMilli: 1000}}}
			withRunning(s, busyNode("p", n, 0, 1, 2, 3, 4, 5, 6, 7)...)
			if got := waitOf(Plan(s, testPolicy(), t0), "j"); got == nil || got.Reason != tc.reason {
				t.Fatalf("got %+v, want %s", got, tc.reason)
			}
		})
	}
}

// TestAgingClause checks the re-evaluation time at which aging lifts a job
// above the job ranked just above it: standard 10,000 and key-project 12,000
// points, 100 points per 10 minutes; job "above" is a standard job already at
// its 3,000-point cap (13,000), job "me" a fresh key-project job (12,000): it
// ties at +1,000 (100 min; the tie goes to the earlier submit) and passes at
// +1,100, i.e. 110 minutes from now.
func TestAgingClause(t *testing.T) {
	p := testPolicy()
	p.TierBase[vocab.TierKeyProject] = 12000
	p.Preemption.Enabled = false
	n := mkNode("n1", 2, "H100", 81920, 0)
	above := mkJob("above", vocab.TierStandard, 1, "p", 6*time.Hour)
	me := mkJob("me", vocab.TierKeyProject, 1, "p", 0)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{me, above}}
	withRunning(s, busyNode("p", n, 0, 1)...)
	res := Plan(s, p, t0)
	w := waitOf(res, "me")
	if w == nil || w.Rank != 2 {
		t.Fatalf("me: %+v", w)
	}
	want := "at " + t0.Add(110*time.Minute).Format(time.RFC3339) + " when aging lifts rank above job above"
	if !strings.Contains(w.ReEvaluate, want) {
		t.Fatalf("re-evaluate %q lacks %q", w.ReEvaluate, want)
	}
	if a := waitOf(res, "above"); strings.Contains(a.ReEvaluate, "aging") {
		t.Fatalf("top job has an aging clause: %q", a.ReEvaluate)
	}
	if ot := w.Overtake; ot == nil || ot.Never || !ot.At.Equal(t0.Add(110*time.Minute)) || ot.AheadJobID != "above" ||
		ot.GapPoints != 1000 || w.Next.Kind != vocab.NextEvalAgingOvertake || !w.Next.At.Equal(ot.At) {
		t.Fatalf("overtake %+v, next %+v", w.Overtake, w.Next)
	}
	// An experiment job (0 points, at most 3,000 from aging) never passes
	// 13,000: no time is promised, the clause says never with the numbers,
	// and the next re-evaluation is the timer's.
	s.Pending[0].Tier = vocab.TierExperiment
	s.CycleIntervalSeconds = 5
	w = waitOf(Plan(s, p, t0), "me")
	never := "aging never lifts rank above job above: it is 13000 points ahead, this job's credit can still grow 3000 (bound 3000), its own 0"
	if w.Rank != 2 || !strings.Contains(w.ReEvaluate, never) || strings.Contains(w.ReEvaluate, " when aging lifts") {
		t.Fatalf("unreachable overtake: %q, want %q", w.ReEvaluate, never)
	}
	if ot := w.Overtake; ot == nil || !ot.Never || !ot.At.IsZero() || ot.GapPoints != 13000 || ot.HeadroomPoints != 3000 {
		t.Fatalf("overtake %+v", w.Overtake)
	}
	if w.Next != (NextEvaluation{At: t0.Add(5 * time.Second), Kind: vocab.NextEvalTimer}) {
		t.Fatalf("next %+v, want the timer at +5 s", w.Next)
	}
}
