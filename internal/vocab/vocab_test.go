package vocab

import (
	"slices"
	"testing"
)

func TestJobStatePredicatesPartitionTheStates(t *testing.T) {
	for _, s := range JobStates {
		n := 0
		for _, p := range []bool{s.Pending(), s.HoldsGPUs(), s.Final()} {
			if p {
				n++
			}
		}
		if n != 1 {
			t.Errorf("state %s: pending %v, holds GPUs %v, final %v; want exactly one", s, s.Pending(), s.HoldsGPUs(), s.Final())
		}
		if !s.Valid() {
			t.Errorf("state %s is listed but not valid", s)
		}
	}
	if JobState("done").Valid() || JobState("done").Final() {
		t.Error("an unknown state is valid or final")
	}
}

func TestEndsJobAs(t *testing.T) {
	want := map[RunOutcome]JobState{RunSucceeded: JobSucceeded, RunFailed: JobFailed, RunCancelled: JobCancelled,
		RunPreempted: "", RunRequeued: ""}
	for o, s := range want {
		if got := o.EndsJobAs(); got != s {
			t.Errorf("%s.EndsJobAs() = %q, want %q", o, got, s)
		}
	}
}

func TestTierNamesRoundTrip(t *testing.T) {
	if len(Tiers) != 4 {
		t.Fatalf("%d tiers, want 4", len(Tiers))
	}
	for i, tier := range Tiers {
		got, err := ParseTier(tier.String())
		if err != nil || got != tier {
			t.Errorf("ParseTier(%q) = %v, %v", tier.String(), got, err)
		}
		if i > 0 && Tiers[i-1] <= tier {
			t.Errorf("Tiers not from highest to lowest at %d: %v", i, Tiers)
		}
	}
	if _, err := ParseTier("gold"); err == nil {
		t.Error("ParseTier accepted gold")
	}
	if s := Tier(9).String(); s != "tier(9)" {
		t.Errorf("Tier(9).String() = %q", s)
	}
}

func TestReasonCatalogue(t *testing.T) {
	seen := map[WaitReason]bool{}
	for _, r := range Reasons {
		if seen[r.Code] {
			t.Errorf("reason %s listed twice", r.Code)
		}
		seen[r.Code] = true
		if r.Meaning == "" || r.NextAction == "" {
			t.Errorf("reason %s lacks a meaning or next action", r.Code)
		}
		if got, ok := LookupReason(r.Code); !ok || got != r {
			t.Errorf("LookupReason(%s) = %+v, %v", r.Code, got, ok)
		}
		if !r.Code.Known() || r.Code.NextAction() != r.NextAction || r.Code.TimeCanChange() != r.TimeCanChange ||
			r.Code.HistoryOnly() != r.HistoryOnly {
			t.Errorf("methods of %s disagree with its row", r.Code)
		}
	}
	if len(WaitReasons)+1 != len(RecordedReasons) || RecordedReasons[len(RecordedReasons)-1] != ReasonNotYetEvaluated {
		t.Errorf("WaitReasons %v, RecordedReasons %v: want the recorded ones to add not_yet_evaluated", WaitReasons, RecordedReasons)
	}
	if slices.Contains(WaitReasons, ReasonNotYetEvaluated) {
		t.Error("not_yet_evaluated is listed as a reason a cycle gives")
	}
	if _, ok := LookupReason("busy"); ok || WaitReason("busy").NextAction() != "" {
		t.Error("an unknown code has a catalogue row")
	}
}

// TestTimeCanChange pins which reasons the simulator wakes a cycle for: only
// an action changes the others (no_matching_capacity holds "even if empty").
func TestTimeCanChange(t *testing.T) {
	var got []WaitReason
	for _, r := range WaitReasons {
		if r.TimeCanChange() {
			got = append(got, r)
		}
	}
	want := []WaitReason{ReasonQuotaExhausted, ReasonFragmented, ReasonCapacityBusy, ReasonReservedForHigherPriority,
		ReasonPreemptionInProgress}
	if !slices.Equal(got, want) {
		t.Errorf("time-changeable reasons %v, want %v", got, want)
	}
}

// TestEarnsAging pins which reasons are waiting for GPUs: held, not ready,
// unavailable pool and a request no node fits earn no aging (issue 11 item 4);
// the time before the first evaluation is the service's latency and earns.
func TestEarnsAging(t *testing.T) {
	var none []WaitReason
	for _, r := range RecordedReasons {
		if !r.EarnsAging() {
			none = append(none, r)
		}
	}
	want := []WaitReason{ReasonEnvironmentNotReady, ReasonNoMatchingCapacity, ReasonHeld, ReasonPoolUnavailable}
	if !slices.Equal(none, want) {
		t.Errorf("reasons that earn no aging %v, want %v", none, want)
	}
	if WaitReason("bogus").EarnsAging() {
		t.Error("an unknown reason earns aging")
	}
}

func TestValidSets(t *testing.T) {
	for _, m := range ReclaimModes {
		if !m.Valid() {
			t.Errorf("mode %s not valid", m)
		}
	}
	for _, k := range ReclaimClasses {
		if !k.Valid() {
			t.Errorf("class %s not valid", k)
		}
	}
	for _, s := range AutomationStages {
		if !s.Valid() {
			t.Errorf("stage %s not valid", s)
		}
	}
	for _, r := range Roles {
		if !r.Valid() {
			t.Errorf("role %s not valid", r)
		}
	}
	for _, q := range QuotaRequestStates {
		if !q.Valid() {
			t.Errorf("quota request state %s not valid", q)
		}
	}
	if ReclaimMode("later").Valid() || ReclaimClass("busy").Valid() || AutomationStage("on").Valid() || Role("root").Valid() ||
		QuotaRequestState("open").Valid() {
		t.Error("an unknown value is valid")
	}
	if !RoleOperator.SeesAllProjects() || !RoleAdmin.SeesAllProjects() || RoleSubmitter.SeesAllProjects() || RoleAgent.SeesAllProjects() {
		t.Error("SeesAllProjects: want operator and admin only")
	}
}

// TestReasonGroups checks the grouping of the wait-reason report
// (docs/design.md §6): every reason has a known group, every group has a
// reason, and only not_yet_evaluated (service latency) is outside the verdict.
func TestReasonGroups(t *testing.T) {
	want := map[WaitReason]ReasonGroup{
		ReasonCapacityBusy: GroupCapacity, ReasonPreemptionInProgress: GroupCapacity,
		ReasonFragmented: GroupFragmentationSpec, ReasonNoMatchingCapacity: GroupFragmentationSpec,
		ReasonReservedForHigherPriority: GroupQueueOrder, ReasonQuotaExhausted: GroupQuota,
		ReasonEnvironmentNotReady: GroupEnvironmentOperator, ReasonHeld: GroupEnvironmentOperator,
		ReasonPoolUnavailable: GroupEnvironmentOperator, ReasonNotYetEvaluated: GroupServiceLatency,
	}
	used := map[ReasonGroup]bool{}
	for _, r := range Reasons {
		if r.Group != want[r.Code] || r.Code.Group() != r.Group {
			t.Errorf("reason %s: group %q (method %q), want %q", r.Code, r.Group, r.Code.Group(), want[r.Code])
		}
		if r.Group.InVerdict() == (r.Code == ReasonNotYetEvaluated) {
			t.Errorf("reason %s: group %s in verdict %v", r.Code, r.Group, r.Group.InVerdict())
		}
		used[r.Group] = true
	}
	for _, g := range ReasonGroups {
		if !used[g] || !g.Known() {
			t.Errorf("group %s has no reason or is unknown", g)
		}
	}
	if len(used) != len(ReasonGroups) || ReasonGroup("other").Known() || ReasonGroup("other").InVerdict() {
		t.Errorf("groups %v used, %v listed", used, ReasonGroups)
	}
	if GroupFragmentationSpec.Label() != "fragmentation and spec" || WaitReason("x").Group() != "" {
		t.Error("label or unknown reason's group")
	}
}
