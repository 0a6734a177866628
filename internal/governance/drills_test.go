package governance

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// drillFixture is a trial pool "a" with one running, low-risk,
// checkpointable job of a profile without evidence, and two free A100s.
func drillFixture() DrillInput {
	p := policy.Default()
	p.Drills = &policy.Drills{AutoInTrial: true, PerProfilePerDay: 1}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return DrillInput{
		Now: now, Policy: p, Evidence: EvidenceRule{MinVerified: 1, MaxFailureRate: 0.2},
		Stages: map[string]vocab.AutomationStage{"a": vocab.StageTrial, "b": vocab.StageAutomate},
		Candidates: []DrillCandidate{{JobID: "j1", AllocationID: "al1", RunID: "r1", Pool: "a", Queue: "experiment",
			Profile: "vision/train", Request: scheduling.ResourceRequest{Pool: "a", GPUs: 2, GPUModels: []string{"A100"}},
			RunStartedAt: now.Add(-time.Hour), Checkpointable: true, LowRisk: true}},
		Free: []FreeGPU{{Pool: "a", UUID: "g1", Model: "A100", MemoryMiB: 81920, FreeMilli: 1000},
			{Pool: "a", UUID: "g2", Model: "A100", MemoryMiB: 81920, FreeMilli: 1000},
			{Pool: "a", UUID: "g3", Model: "T4", MemoryMiB: 16384, FreeMilli: 1000},
			{Pool: "b", UUID: "g4", Model: "A100", MemoryMiB: 81920, FreeMilli: 1000}},
		Profiles: map[string]ProfileStanding{}, DrillsToday: map[string]int{}, BusyPools: map[string]bool{},
	}
}

// TestChooseDrills: a trial pool's unproven profile is drilled while
// matching GPUs are free; each gate on its own stops it.
func TestChooseDrills(t *testing.T) {
	got := ChooseDrills(drillFixture())
	if len(got) != 1 || got[0].JobID != "j1" || got[0].AllocationID != "al1" || got[0].Profile != "vision/train" {
		t.Fatalf("choices %+v, want j1", got)
	}
	if !strings.Contains(got[0].Reason, "0 verified resumes, needs 1") || !strings.Contains(got[0].Reason, "2 matching GPUs free") {
		t.Errorf("reason %q", got[0].Reason)
	}
	for _, tc := range []struct {
		name   string
		change func(*DrillInput)
	}{
		{"automatic drills off", func(in *DrillInput) { in.Policy.Drills.AutoInTrial = false }},
		{"pool in automate", func(in *DrillInput) { in.Stages["a"] = vocab.StageAutomate }},
		{"pool in observe", func(in *DrillInput) { in.Stages["a"] = vocab.StageObserve }},
		{"pool busy", func(in *DrillInput) { in.BusyPools["a"] = true }},
		{"profile proven", func(in *DrillInput) { in.Profiles["vision/train"] = ProfileStanding{Verified: 1} }},
		{"daily bound reached", func(in *DrillInput) { in.DrillsToday["vision/train"] = 1 }},
		{"not low-risk", func(in *DrillInput) { in.Candidates[0].LowRisk = false }},
		{"protected", func(in *DrillInput) { in.Candidates[0].Protected = true }},
		{"not checkpointable", func(in *DrillInput) { in.Candidates[0].Checkpointable = false }},
		{"not running", func(in *DrillInput) { in.Candidates[0].RunID = "" }},
		{"in a preemption", func(in *DrillInput) { in.Candidates[0].InPreemption = true }},
		{"too few matching GPUs free", func(in *DrillInput) { in.Free = in.Free[1:] }},
		{"free GPUs of another model", func(in *DrillInput) { in.Candidates[0].Request.GPUModels = []string{"H100"} }},
		{"in a protection window", func(in *DrillInput) {
			in.Policy.ProtectionWindows = []policy.Window{{Name: "launch", Start: in.Now.Add(-time.Minute), End: in.Now.Add(time.Hour)}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := drillFixture()
			tc.change(&in)
			if got := ChooseDrills(in); len(got) != 0 {
				t.Fatalf("choices %+v, want none", got)
			}
		})
	}
}

// TestChooseDrillsFailingProfile: a profile over the failure rate is
// drilled again (its record must be re-earned), within the daily bound.
func TestChooseDrillsFailingProfile(t *testing.T) {
	in := drillFixture()
	in.Profiles["vision/train"] = ProfileStanding{Verified: 2, Failed: 2}
	got := ChooseDrills(in)
	if len(got) != 1 || !strings.Contains(got[0].Reason, "fails 50% of its resumes (2 of 4), at most 20% allowed") {
		t.Fatalf("choices %+v", got)
	}
}

// TestChooseDrillsBounds: one drill per pool per call, the per-profile
// bound counting the drills chosen in the same call, deterministic order
// (oldest run first).
func TestChooseDrillsBounds(t *testing.T) {
	in := drillFixture()
	in.Policy.Drills.PerProfilePerDay = 2
	base := in.Candidates[0]
	older, other := base, base
	older.JobID, older.AllocationID, older.RunStartedAt = "j0", "al0", base.RunStartedAt.Add(-time.Hour)
	other.JobID, other.AllocationID, other.Pool, other.Request.Pool = "j2", "al2", "c", "c"
	in.Stages["c"] = vocab.StageTrial
	in.Free = append(in.Free, FreeGPU{Pool: "c", UUID: "g5", Model: "A100", MemoryMiB: 81920, FreeMilli: 1000},
		FreeGPU{Pool: "c", UUID: "g6", Model: "A100", MemoryMiB: 81920, FreeMilli: 1000})
	in.Candidates = []DrillCandidate{other, base, older}
	got := ChooseDrills(in)
	if len(got) != 2 || got[0].JobID != "j0" || got[1].JobID != "j2" {
		t.Fatalf("choices %+v, want j0 (pool a, oldest run) then j2 (pool c)", got)
	}
	in.Policy.Drills.PerProfilePerDay = 1
	if got := ChooseDrills(in); len(got) != 1 || got[0].JobID != "j0" {
		t.Fatalf("with one drill a day: %+v, want only j0", got)
	}
}

// TestFreeMatching counts GPUs by model, memory and the share needed.
func TestFreeMatching(t *testing.T) {
	free := []FreeGPU{{Pool: "a", Model: "A100", MemoryMiB: 40960, FreeMilli: 1000},
		{Pool: "a", Model: "A100", MemoryMiB: 81920, FreeMilli: 500}, {Pool: "a", Model: "T4", MemoryMiB: 16384, FreeMilli: 1000}}
	for _, tc := range []struct {
		req  scheduling.ResourceRequest
		want int
	}{
		{scheduling.ResourceRequest{GPUs: 1}, 2},
		{scheduling.ResourceRequest{GPUs: 1, GPUMilli: 500}, 3},
		{scheduling.ResourceRequest{GPUs: 1, GPUMilli: 500, GPUMemoryMiB: 65536}, 1},
		{scheduling.ResourceRequest{GPUs: 2, GPUModels: []string{"A100"}}, 1},
	} {
		if got := FreeMatching(free, "a", tc.req); got != tc.want {
			t.Errorf("FreeMatching(%+v) = %d, want %d", tc.req, got, tc.want)
		}
	}
}
