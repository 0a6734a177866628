package scheduling

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// preemptScenario is one 8-GPU node fully held by experiment job "v" (eligible
// by default) and a pending key-project job "j" that needs the whole node.
func preemptScenario() (*Snapshot, *Policy) {
	n := mkNode("n1", 8, "A100", 81920, 8)
	var uuids []string
	for _, g := range n.GPUs {
		uuids = append(uuids, g.UUID)
	}
	j := mkJob("j", vocab.TierKeyProject, 8, "p", 0)
	j.Request.Topology = TopologySameNode
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{j},
		Queues: []Queue{{Name: "q-experiment", Tier: vocab.TierExperiment}, {Name: "q-key-project", Tier: vocab.TierKeyProject}}}
	withRunning(s, mkRunning("v", vocab.TierExperiment, "p", "n1", time.Hour, uuids...))
	return s, testPolicy()
}

// TestVictimEligibility checks every gate of checkpoint-gated preemption.
func TestVictimEligibility(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(s *Snapshot, p *Policy)
		propose bool
	}{
		{"eligible", func(s *Snapshot, p *Policy) {}, true},
		{"not checkpointable", func(s *Snapshot, p *Policy) { s.Running[0].Recovery.Checkpointable = false }, false},
		{"own verified resume, none for its profile", func(s *Snapshot, p *Policy) { s.Running[0].Recovery.ProfileVerifiedResumes = 0 }, false},
		{"new job of a profile with evidence", func(s *Snapshot, p *Policy) { s.Running[0].Recovery.VerifiedResumes = 0 }, true},
		{"profile below the policy's N", func(s *Snapshot, p *Policy) { p.Preemption.MinVerifiedResumes = 2 }, false},
		{"profile at the policy's N", func(s *Snapshot, p *Policy) {
			p.Preemption.MinVerifiedResumes = 2
			s.Running[0].Recovery.ProfileVerifiedResumes = 2
		}, true},
		{"profile failure rate above x", func(s *Snapshot, p *Policy) {
			s.Running[0].Recovery.ProfileVerifiedResumes, s.Running[0].Recovery.ProfileFailedResumes = 3, 1 // 25 % > 20 %
		}, false},
		{"profile failure rate at x", func(s *Snapshot, p *Policy) {
			s.Running[0].Recovery.ProfileVerifiedResumes, s.Running[0].Recovery.ProfileFailedResumes = 4, 1 // 20 %
		}, true},
		{"verified resume not required", func(s *Snapshot, p *Policy) {
			s.Running[0].Recovery.VerifiedResumes, s.Running[0].Recovery.ProfileVerifiedResumes = 0, 0
			p.Preemption.RequireVerifiedResume = false
		}, true},
		{"resume downgraded", func(s *Snapshot, p *Policy) { s.Running[0].Recovery.ResumeDowngraded = true }, false},
		{"resume downgraded, verified resume not required", func(s *Snapshot, p *Policy) {
			s.Running[0].Recovery.ResumeDowngraded = true
			p.Preemption.RequireVerifiedResume = false
		}, false},
		{"protected job", func(s *Snapshot, p *Policy) { s.Running[0].Protected = true }, false},
		{"protected queue", func(s *Snapshot, p *Policy) { s.Queues[0].Protected = true }, false},
		{"protection window on its queue", func(s *Snapshot, p *Policy) {
			s.ProtectionWindows = []ProtectionWindow{{Name: "launch", Start: t0.Add(-time.Hour), End: t0.Add(time.Hour), Queues: []string{"q-experiment"}}}
		}, false},
		{"protection window on all queues", func(s *Snapshot, p *Policy) {
			s.ProtectionWindows = []ProtectionWindow{{Name: "freeze", Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}}
		}, false},
		{"protection window on another queue", func(s *Snapshot, p *Policy) {
			s.ProtectionWindows = []ProtectionWindow{{Name: "launch", Start: t0.Add(-time.Hour), End: t0.Add(time.Hour), Queues: []string{"q-other"}}}
		}, true},
		{"protection window over", func(s *Snapshot, p *Policy) {
			s.ProtectionWindows = []ProtectionWindow{{Name: "launch", Start: t0.Add(-2 * time.Hour), End: t0}}
		}, true},
		{"too young", func(s *Snapshot, p *Policy) { s.Running[0].StartedAt = t0.Add(-5 * time.Minute) }, false},
		{"preempted too often", func(s *Snapshot, p *Policy) {
			s.Running[0].RecentPreemptions = []time.Time{t0.Add(-time.Hour), t0.Add(-3 * time.Hour), t0.Add(-20 * time.Hour)}
		}, false},
		{"preemptions outside the window", func(s *Snapshot, p *Policy) {
			s.Running[0].RecentPreemptions = []time.Time{t0.Add(-30 * time.Hour), t0.Add(-40 * time.Hour), t0.Add(-50 * time.Hour)}
		}, true},
		{"same tier", func(s *Snapshot, p *Policy) { s.Running[0].Tier = vocab.TierKeyProject }, false},
		{"aging never lifts eligibility", func(s *Snapshot, p *Policy) {
			s.Running[0].Tier = vocab.TierStandard
			s.Pending[0].Tier = vocab.TierStandard
			s.Pending[0].WaitingSince = t0.Add(-48 * time.Hour)
		}, false},
		{"preemption disabled", func(s *Snapshot, p *Policy) { p.Preemption.Enabled = false }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, p := preemptScenario()
			tc.mod(s, p)
			res := Plan(s, p, t0)
			w := waitOf(res, "j")
			if w == nil || w.Reason != vocab.ReasonCapacityBusy {
				t.Fatalf("job j: %+v", w)
			}
			if got := len(res.Preemptions) == 1; got != tc.propose {
				t.Fatalf("proposed %v, want %v: %+v", got, tc.propose, res.Preemptions)
			}
			if tc.propose {
				pp := res.Preemptions[0]
				if pp.ForJobID != "j" || pp.Node != "n1" || len(pp.Victims) != 1 || pp.Victims[0].JobID != "v" || !pp.Act {
					t.Fatalf("proposal %+v", pp)
				}
				// 8 GPUs × (3600 s since start + 60 s save/restore).
				if pp.EstimatedLossGPUSeconds != 8*3660 || pp.Victims[0].AllocationID != "alloc-v" {
					t.Fatalf("loss %v", pp.EstimatedLossGPUSeconds)
				}
				if !strings.Contains(w.Detail, "preemption of 1 job(s) on node n1 proposed") {
					t.Fatalf("detail %q", w.Detail)
				}
			}
		})
	}
}

// lossVictim is a running experiment job on the given GPUs of node whose last
// checkpoint was sinceCkpt ago (it started an hour ago).
func lossVictim(id, node string, sinceCkpt time.Duration, gpus ...int) RunningJob {
	var uuids []string
	for _, g := range gpus {
		uuids = append(uuids, node+"-gpu"+string(rune('0'+g)))
	}
	r := mkRunning(id, vocab.TierExperiment, "p", node, time.Hour, uuids...)
	r.Recovery.LastCheckpoint = &Checkpoint{At: t0.Add(-sinceCkpt), Step: 10, Location: "s3://ckpt/" + id}
	return r
}

// TestLeastLossVictims checks the victim set with the least effective run
// loss: GPUs × (time since last checkpoint + 60 s save/restore) summed.
func TestLeastLossVictims(t *testing.T) {
	tests := []struct {
		name    string
		count   int
		running []RunningJob
		nodes   []string
		want    []string
		loss    float64
		node    string
	}{
		{
			// Need 3 GPUs on n1. x: 2×(40+60)=200, y: 2×(50+60)=220, z: 1×(90+60)=150;
			// greedy by loss per GPU would take x+y (420); the least is x+z (350).
			name: "exact beats greedy", count: 3, nodes: []string{"n1"},
			running: []RunningJob{
				lossVictim("x", "n1", 40*time.Second, 0, 1), lossVictim("y", "n1", 50*time.Second, 2, 3),
				lossVictim("z", "n1", 90*time.Second, 4), pinned("n1", 5), pinned("n1", 6), pinned("n1", 7),
			},
			want: []string{"z", "x"}, loss: 350, node: "n1", // listed least loss first
		},
		{
			// A recent checkpoint makes a victim cheaper.
			name: "recent checkpoint", count: 4, nodes: []string{"n1"},
			running: []RunningJob{
				lossVictim("old", "n1", 1000*time.Second, 0, 1, 2, 3),
				lossVictim("fresh", "n1", 100*time.Second, 4, 5, 6, 7),
			},
			want: []string{"fresh"}, loss: 4 * 160, node: "n1",
		},
		{
			// The cheaper target wins across nodes.
			name: "across nodes", count: 8, nodes: []string{"n1", "n2"},
			running: []RunningJob{
				lossVictim("a", "n1", 500*time.Second, 0, 1, 2, 3), lossVictim("b", "n1", 500*time.Second, 4, 5, 6, 7),
				lossVictim("c", "n2", 200*time.Second, 0, 1, 2, 3, 4, 5, 6, 7),
			},
			want: []string{"c"}, loss: 8 * 260, node: "n2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []Node
			for _, n := range tc.nodes {
				nodes = append(nodes, mkNode(n, 8, "A100", 81920, 8))
			}
			j := mkJob("j", vocab.TierKeyProject, tc.count, "p", 0)
			j.Request.Topology = TopologySameNode
			s := &Snapshot{Pools: []Pool{mkPool("p", nodes...)}, Pending: []PendingJob{j}}
			withRunning(s, tc.running...)
			res := Plan(s, testPolicy(), t0)
			if len(res.Preemptions) != 1 {
				t.Fatalf("proposals %+v", res.Preemptions)
			}
			pp := res.Preemptions[0]
			var got []string
			for _, v := range pp.Victims {
				got = append(got, v.JobID)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || pp.EstimatedLossGPUSeconds != tc.loss || pp.Node != tc.node {
				t.Fatalf("victims %v loss %v node %s, want %v %v %s", got, pp.EstimatedLossGPUSeconds, pp.Node, tc.want, tc.loss, tc.node)
			}
		})
	}
}

// pinned is a job on one GPU that can never be a victim.
func pinned(node string, gpu int) RunningJob {
	r := lossVictim(node+"-pinned"+string(rune('0'+gpu)), node, time.Second, gpu)
	r.Recovery.Checkpointable = false
	return r
}

// TestVictimsNotProposedTwice checks that one cycle never names a victim in two
// proposals and that later jobs get none when victims run out.
func TestVictimsNotProposedTwice(t *testing.T) {
	n := mkNode("n1", 8, "A100", 81920, 4)
	var pending []PendingJob
	for _, id := range []string{"j1", "j2", "j3"} {
		j := mkJob(id, vocab.TierKeyProject, 4, "p", 0)
		j.Request.Topology = TopologySameNode
		pending = append(pending, j)
	}
	pending[1].SubmitTime = t0.Add(time.Second)
	pending[2].SubmitTime = t0.Add(2 * time.Second)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: pending}
	withRunning(s, lossVictim("cheap", "n1", 100*time.Second, 0, 1, 2, 3), lossVictim("dear", "n1", 900*time.Second, 4, 5, 6, 7))
	res := Plan(s, testPolicy(), t0)
	if len(res.Preemptions) != 2 || res.Preemptions[0].ForJobID != "j1" || res.Preemptions[0].Victims[0].JobID != "cheap" ||
		res.Preemptions[1].ForJobID != "j2" || res.Preemptions[1].Victims[0].JobID != "dear" {
		t.Fatalf("proposals %+v", res.Preemptions)
	}
	if w := waitOf(res, "j3"); w.Reason != vocab.ReasonCapacityBusy || strings.Contains(w.Detail, "preempt") {
		t.Fatalf("j3 %+v", w)
	}
}

// TestStageActs checks Act by automation stage: observe records only, trial
// acts on low-risk queues only, automate acts.
func TestStageActs(t *testing.T) {
	tests := []struct {
		stage   vocab.AutomationStage
		lowRisk bool
		act     bool
		phrase  string
	}{
		{vocab.StageObserve, true, false, "would preempt 1 job(s) on node n1 (pool stage observe)"},
		{vocab.StageTrial, false, false, "would preempt"},
		{vocab.StageTrial, true, true, "proposed"},
		{vocab.StageAutomate, false, true, "proposed"},
	}
	for _, tc := range tests {
		t.Run(string(tc.stage), func(t *testing.T) {
			s, p := preemptScenario()
			s.Pools[0].Stage = tc.stage
			s.Queues[0].LowRisk = tc.lowRisk
			res := Plan(s, p, t0)
			if len(res.Preemptions) != 1 || res.Preemptions[0].Act != tc.act {
				t.Fatalf("proposals %+v", res.Preemptions)
			}
			if w := waitOf(res, "j"); !strings.Contains(w.Detail, tc.phrase) {
				t.Fatalf("detail %q lacks %q", w.Detail, tc.phrase)
			}
		})
	}
}

// TestLenderReclaimsBorrowed checks that a project within its nominal quota
// may preempt borrowed allocations of its own tier, but not lent-free ones.
func TestLenderReclaimsBorrowed(t *testing.T) {
	tests := []struct {
		name     string
		borrowed bool
		nominal  int64
		propose  bool
	}{
		{"borrowed victim, lender within nominal", true, 8000, true},
		{"victim not borrowed", false, 8000, false},
		{"job would itself borrow", true, 4000, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, p := preemptScenario()
			s.Pending[0].Tier, s.Pending[0].Project = vocab.TierStandard, "lender"
			s.Running[0].Tier, s.Running[0].Project = vocab.TierStandard, "borrower"
			s.Running[0].Allocation.Borrowed = tc.borrowed
			s.Allocations[0].Borrowed = tc.borrowed
			s.Quotas = []Quota{
				{Project: "lender", Pool: "p", NominalMilli: tc.nominal, BorrowingLimitMilli: 8000},
				{Project: "borrower", Pool: "p", NominalMilli: 4000, BorrowingLimitMilli: 8000},
				{Project: "idle", Pool: "p", NominalMilli: 16000}, // leaves quota to borrow
			}
			res := Plan(s, p, t0)
			if w := waitOf(res, "j"); w == nil || w.Reason != vocab.ReasonCapacityBusy {
				t.Fatalf("job j %+v", w)
			}
			if got := len(res.Preemptions) == 1; got != tc.propose {
				t.Fatalf("proposed %v, want %v (%+v, %+v)", got, tc.propose, res.Preemptions, res.Waiting)
			}
		})
	}
}

// TestDowngradedVictimGateSaysWhy checks that a job whose recovery evidence a
// wrong-step resume downgraded is gated with that reason even when the policy
// does not ask for a verified resume, and is eligible again once a verified
// resume cleared the downgrade.
func TestDowngradedVictimGateSaysWhy(t *testing.T) {
	s, p := preemptScenario()
	p.Preemption.RequireVerifiedResume = false
	s.Running[0].Recovery.ResumeDowngraded = true
	s.Running[0].Recovery.VerifiedResumes, s.Running[0].Recovery.ProfileVerifiedResumes = 0, 0
	c := newCycle(s, p, t0, false, nil)
	if gate := c.victimGate(&s.Running[0]); !strings.Contains(gate, "downgraded by a wrong-step resume") {
		t.Fatalf("gate %q, want the downgrade named", gate)
	}
	s.Running[0].Recovery.ResumeDowngraded = false
	s.Running[0].Recovery.VerifiedResumes = 1
	if res := Plan(s, p, t0); len(res.Preemptions) != 1 || res.Preemptions[0].Victims[0].JobID != "v" {
		t.Fatalf("after a verified resume: proposals %+v, want v", res.Preemptions)
	}
}

// TestEvidenceGateNamesTheProfile checks that the evidence rule reads the
// victim's recovery profile, not its own count, and says which record
// failed it: too few verified resumes, then a failure rate above the
// policy's bound.
func TestEvidenceGateNamesTheProfile(t *testing.T) {
	s, p := preemptScenario()
	r := &s.Running[0]
	r.Recovery.Profile, r.Recovery.VerifiedResumes, r.Recovery.ProfileVerifiedResumes = "vision/train", 5, 0
	c := newCycle(s, p, t0, false, nil)
	if gate, want := c.victimGate(r), "recovery profile vision/train has 0 verified resumes in the last 30 days, 1 required"; gate != want {
		t.Fatalf("gate %q, want %q", gate, want)
	}
	// One verified resume below a rule of two reads in the singular.
	p.Preemption.MinVerifiedResumes, r.Recovery.ProfileVerifiedResumes = 2, 1
	c = newCycle(s, p, t0, false, nil)
	if gate, want := c.victimGate(r), "recovery profile vision/train has 1 verified resume in the last 30 days, 2 required"; gate != want {
		t.Fatalf("gate %q, want %q", gate, want)
	}
	p.Preemption.MinVerifiedResumes, r.Recovery.ProfileVerifiedResumes = 1, 0
	r.Recovery.ProfileVerifiedResumes, r.Recovery.ProfileFailedResumes = 2, 2
	c = newCycle(s, p, t0, false, nil)
	if gate, want := c.victimGate(r), "recovery profile vision/train failed 2 of 4 resumes in the last 30 days (50%, more than the 20% allowed)"; gate != want {
		t.Fatalf("gate %q, want %q", gate, want)
	}
	r.Recovery.VerifiedResumes, r.Recovery.ProfileVerifiedResumes, r.Recovery.ProfileFailedResumes = 0, 1, 0
	if res := Plan(s, p, t0); len(res.Preemptions) != 1 {
		t.Fatalf("a job without resumes of its own, of a profile with one: proposals %+v, want one", res.Preemptions)
	}
}

// TestVictimsLowRiskFirst checks the victim order (docs/design.md §5):
// victims of low-risk queues are taken before any other, whatever their
// loss, then the least expected loss; the proposal lists them in that order
// and records every job it weighed on the target with its loss, whether it
// was chosen and why an ineligible one could not be.
func TestVictimsLowRiskFirst(t *testing.T) {
	n := mkNode("n1", 4, "A100", 81920, 4)
	j := mkJob("j", vocab.TierKeyProject, 2, "p", 0)
	j.Request.Topology = TopologySameNode
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{j},
		Queues: []Queue{{Name: "q-experiment", Tier: vocab.TierExperiment}, {Name: "scratch", Tier: vocab.TierExperiment, LowRisk: true}}}
	// cheap: 1×(50+60) = 110 in a normal queue; l1: 1×(300+60) = 360 and
	// l2: 1×(400+60) = 460 in the low-risk queue; pinned is not checkpointable.
	cheap, l1, l2 := lossVictim("cheap", "n1", 50*time.Second, 0), lossVictim("l1", "n1", 300*time.Second, 1), lossVictim("l2", "n1", 400*time.Second, 2)
	l1.Queue, l2.Queue = "scratch", "scratch"
	withRunning(s, l2, cheap, l1, pinned("n1", 3))
	res := Plan(s, testPolicy(), t0)
	if len(res.Preemptions) != 1 {
		t.Fatalf("proposals %+v", res.Preemptions)
	}
	pp := res.Preemptions[0]
	var got []string
	for _, v := range pp.Victims {
		got = append(got, v.JobID)
	}
	if strings.Join(got, ",") != "l1,l2" || pp.EstimatedLossGPUSeconds != 820 {
		t.Fatalf("victims %v loss %v, want the low-risk l1,l2 (820) over the cheaper cheap", got, pp.EstimatedLossGPUSeconds)
	}
	want := []Candidate{
		{JobID: "l1", Queue: "scratch", LowRisk: true, GPUs: 1, EstimatedLossGPUSeconds: 360, Chosen: true},
		{JobID: "l2", Queue: "scratch", LowRisk: true, GPUs: 1, EstimatedLossGPUSeconds: 460, Chosen: true},
		{JobID: "cheap", Queue: "q-experiment", GPUs: 1, EstimatedLossGPUSeconds: 110},
		{JobID: "n1-pinned3", Queue: "q-experiment", GPUs: 1, EstimatedLossGPUSeconds: 61, Gate: "not checkpointable"},
	}
	if !reflect.DeepEqual(pp.Candidates, want) {
		t.Fatalf("candidates\n got %+v\nwant %+v", pp.Candidates, want)
	}
	// With one GPU needed and a single low-risk victim dearer than the
	// other, the low-risk one is still taken.
	j.Request.GPUs = 1
	s.Pending[0] = j
	res = Plan(s, testPolicy(), t0)
	if len(res.Preemptions) != 1 || res.Preemptions[0].Victims[0].JobID != "l1" {
		t.Fatalf("one GPU: proposals %+v, want l1", res.Preemptions)
	}
}

// TestLossUsesCheckpointRealAge checks the planner's loss estimate: the
// checkpoint's real age (now − its time), not the declared interval, plus
// the save/restore estimate, per GPU; a checkpoint stamped a little ahead
// of the planner's clock (within the store's allowed skew) counts as fresh,
// never as a negative loss.
func TestLossUsesCheckpointRealAge(t *testing.T) {
	for _, tc := range []struct {
		name string
		age  time.Duration
		want float64
	}{
		{"old checkpoint, short interval", 900 * time.Second, 8 * (900 + 60)},
		{"checkpoint stamped ahead", -30 * time.Second, 8 * 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := preemptScenario()
			s.Running[0].Recovery.CheckpointIntervalSeconds = 60
			s.Running[0].Recovery.LastCheckpoint = &Checkpoint{At: t0.Add(-tc.age), Step: 10}
			res := Plan(s, p, t0)
			if len(res.Preemptions) != 1 || res.Preemptions[0].EstimatedLossGPUSeconds != tc.want {
				t.Fatalf("proposals %+v, want an estimated loss of %v GPU-s", res.Preemptions, tc.want)
			}
		})
	}
}
