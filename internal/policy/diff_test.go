package policy

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestTopLevelGroupsCoverEveryField: every top-level field of the stored
// body has a variable group (or is the format version), and the map names
// no field the body lacks, so a new policy field cannot be left out of
// diffs (and so out of the one-variable rule) silently.
func TestTopLevelGroupsCoverEveryField(t *testing.T) {
	rt := reflect.TypeFor[Policy]()
	var fields []string
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			t.Fatalf("Policy.%s has no json name", rt.Field(i).Name)
		}
		fields = append(fields, name)
	}
	var body map[string]json.RawMessage
	// Omitted when empty, so that a policy without them keeps its hash
	// (shards, added after versions were stored): set here.
	full := Default()
	full.Shards = map[string][]string{"s": {"p"}}
	if err := json.Unmarshal(full.Canonical(), &body); err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if _, ok := body[f]; !ok {
			t.Errorf("field %s is not in the canonical body", f)
		}
	}
	for k := range body {
		g, ok := TopLevelGroups[k]
		switch {
		case !ok:
			t.Errorf("top-level field %q has no variable group: add it to TopLevelGroups (and vocab.PolicyGroup's doc)", k)
		case g == "" && k != "version":
			t.Errorf("top-level field %q is mapped to no group", k)
		case g != "" && !g.Valid():
			t.Errorf("top-level field %q: group %q is not a vocab.PolicyGroup", k, g)
		}
	}
	for k := range TopLevelGroups {
		if _, ok := body[k]; !ok {
			t.Errorf("TopLevelGroups names %q, which the body does not have", k)
		}
	}
	// Every group is reachable.
	reach := map[vocab.PolicyGroup]bool{}
	for _, g := range TopLevelGroups {
		reach[g] = true
	}
	for _, g := range queueFieldGroups {
		reach[g] = true
	}
	for _, g := range vocab.PolicyGroups {
		if !reach[g] {
			t.Errorf("group %s has no field", g)
		}
	}
	// Every queue field refined out of queue_service exists.
	var q map[string]any
	cap := 1.0
	b, _ := json.Marshal(Queue{Name: "x", MinShare: 1, MaxShare: 1, AgingCeilingTier: "standard", AgingCapPoints: &cap,
		ProtectionExplicit: true})
	_ = json.Unmarshal(b, &q)
	for f := range queueFieldGroups {
		if _, ok := q[f]; !ok {
			t.Errorf("queueFieldGroups names %q, which a queue does not have", f)
		}
	}
}

// TestDiffSamePolicyIsEmpty: equal rules, however spelt, have no diff.
func TestDiffSamePolicyIsEmpty(t *testing.T) {
	a, err := Load("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load("testdata/reordered.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() {
		t.Skip("testdata/reordered.yaml is not the same rules as good.yaml")
	}
	if d := Diff(a, b); len(d) != 0 {
		t.Fatalf("diff of equal policies: %+v", d)
	}
	if d := Diff(Default(), Default()); len(d) != 0 {
		t.Fatalf("diff of the default with itself: %+v", d)
	}
}

const diffBase = `version: gpugov.policy/v1
tier_base: {production: 30000, key-project: 20000, standard: 10000, experiment: 0}
aging: {enabled: true, step_points: 100, interval_s: 600, cap_points: 3000}
queues:
  - {name: production, tier: production, share: 4, max_wait_s: 60, protected: true}
  - {name: standard, tier: standard, share: 2, max_wait_s: 3600}
  - {name: experiment, tier: experiment, share: 1, max_wait_s: 21600, low_risk: true}
quotas:
  - {project: team-a, pool: a100, nominal_milli: 8000}
  - {project: team-b, pool: a100, nominal_milli: 4000}
pools: {a100: {stage: observe}}
reclaim:
  enabled: true
  rules:
    - {pool: a100, mode: notify}
`

const diffCandidate = `version: gpugov.policy/v1
tier_base: {production: 30000, key-project: 20000, standard: 10000, experiment: 0}
aging: {enabled: true, step_points: 100, interval_s: 600, cap_points: 4000}
fair_share: {project_weights: {vision: 2}}
queues:
  - {name: production, tier: production, share: 4, max_wait_s: 60, protected: true}
  - {name: standard, tier: standard, share: 2, max_wait_s: 3600, aging_cap_points: 15000, aging_ceiling_tier: key-project}
  - {name: experiment, tier: experiment, share: 1, max_wait_s: 21600, max_share: 0.5}
  - {name: batch, tier: standard, share: 1}
quotas:
  - {project: team-b, pool: a100, nominal_milli: 4000}
  - {project: team-a, pool: a100, nominal_milli: 12000}
pools: {a100: {stage: trial}, h100: {stage: observe}}
reclaim:
  enabled: true
  rules:
    - {pool: a100, mode: confirm}
protection_windows:
  - {name: launch, start: "2026-12-01T00:00:00Z", end: "2026-12-02T00:00:00Z", queues: [production]}
`

// TestDiffGroupsEveryChange: each change lands in its variable group with
// the field named in the file's terms, lists keyed by identity (a
// reordered quota list is no change), whole entries added or removed as
// one change, groups in vocab order and fields sorted.
func TestDiffGroupsEveryChange(t *testing.T) {
	a, err := Parse("base.yaml", []byte(diffBase))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("candidate.yaml", []byte(diffCandidate))
	if err != nil {
		t.Fatal(err)
	}
	got := Diff(a, b)
	want := []GroupDiff{
		{vocab.PolicyQueueService, []FieldChange{
			{"queues[batch]", "", `{"name":"batch","protected":false,"tier":"standard","share":1,"max_wait_s":0,"low_risk":false}`},
			{"queues[experiment].max_share", "", "0.5"},
		}},
		{vocab.PolicyQuota, []FieldChange{{"quotas[team-a/a100].nominal_milli", "8000", "12000"}}},
		{vocab.PolicyAging, []FieldChange{
			{"aging.cap_points", "3000", "4000"},
			{"queues[standard].aging_cap_points", "", "15000"},
			{"queues[standard].aging_ceiling_tier", "", `"key-project"`},
		}},
		{vocab.PolicyFairShare, []FieldChange{{"fair_share.project_weights.vision", "", "2"}}},
		{vocab.PolicyReclaim, []FieldChange{{"reclaim.rules[0].mode", `"notify"`, `"confirm"`}}},
		{vocab.PolicyAutomationStage, []FieldChange{
			{"pools.a100.stage", `"observe"`, `"trial"`},
			{"pools.h100", "", `{"stage":"observe"}`},
		}},
		{vocab.PolicyProtection, []FieldChange{
			{"protection_windows[launch]", "", `{"end":"2026-12-02T00:00:00Z","name":"launch","queues":["production"],"start":"2026-12-01T00:00:00Z"}`},
			{"queues[experiment].low_risk", "true", "false"},
			{"queues[experiment].protection_explicit", "true", ""},
		}},
	}
	// Whole entries are the canonical object with sorted keys; compare them as values.
	if len(got) != len(want) {
		t.Fatalf("groups %v, want %v\n%+v", Groups(got), Groups(want), got)
	}
	for i := range want {
		if got[i].Group != want[i].Group || len(got[i].Changes) != len(want[i].Changes) {
			t.Fatalf("group %d: %+v, want %+v", i, got[i], want[i])
		}
		for j, w := range want[i].Changes {
			g := got[i].Changes[j]
			if g.Field != w.Field || !sameJSON(t, g.Before, w.Before) || !sameJSON(t, g.After, w.After) {
				t.Errorf("%s change %d: %+v, want %+v", want[i].Group, j, g, w)
			}
		}
	}
	// Reversed, before and after swap.
	back := Diff(b, a)
	if !slices.Equal(Groups(back), Groups(got)) || back[1].Changes[0].Before != "12000" || back[1].Changes[0].After != "8000" {
		t.Fatalf("reversed %+v", back)
	}
}

// sameJSON compares two sides as JSON values ("" only equals "").
func sameJSON(t *testing.T, x, y string) bool {
	t.Helper()
	if x == "" || y == "" {
		return x == y
	}
	var vx, vy any
	if err := json.Unmarshal([]byte(x), &vx); err != nil {
		t.Fatalf("%q: %v", x, err)
	}
	if err := json.Unmarshal([]byte(y), &vy); err != nil {
		t.Fatalf("%q: %v", y, err)
	}
	return reflect.DeepEqual(vx, vy)
}

// TestDiffOneGroupEach: a change of one section's scalar lands in that
// section's group alone, for every group reachable from a scalar.
func TestDiffOneGroupEach(t *testing.T) {
	for _, tc := range []struct {
		group vocab.PolicyGroup
		edit  func(*Policy)
	}{
		{vocab.PolicyOrdering, func(p *Policy) { p.TierBase["standard"] = 11000 }},
		{vocab.PolicyOrdering, func(p *Policy) { p.Reservation.Depth = 9 }},
		{vocab.PolicyAging, func(p *Policy) { p.Aging.StepPoints = 7 }},
		{vocab.PolicyFairShare, func(p *Policy) { p.FairShare.HalfLifeSeconds = 3600 }},
		{vocab.PolicyPreemption, func(p *Policy) { p.Preemption.GraceSeconds = 1 }},
		{vocab.PolicyReclaim, func(p *Policy) { p.Reclaim.IdleGPUPercent = 9 }},
		{vocab.PolicyNotifications, func(p *Policy) { p.Notifications.Delivery.MaxAttempts = 2 }},
		{vocab.PolicyNotifications, func(p *Policy) {
			p.Notifications.Webhooks = []Webhook{{Project: "vision", URL: "https://hooks.example/v", SecretEnv: "V"}}
		}},
		{vocab.PolicyQuota, func(p *Policy) { p.Quotas = []Quota{{Project: "x", Pool: "p", NominalMilli: 1}} }},
		{vocab.PolicyQueueService, func(p *Policy) { p.Queues = DefaultQueues()[:1] }},
	} {
		b := Default()
		tc.edit(b)
		d := Diff(Default(), b)
		if len(d) != 1 || d[0].Group != tc.group || len(d[0].Changes) != 1 {
			t.Errorf("%s: %+v", tc.group, d)
		}
	}
}

// TestDiffRepeatedNamesByPosition: a list whose identity repeats is
// compared by position.
func TestDiffRepeatedNamesByPosition(t *testing.T) {
	a, b := Default(), Default()
	w := Window{Name: "same"}
	a.ProtectionWindows = []Window{w, w}
	w2 := w
	w2.Queues = []string{"production"}
	b.ProtectionWindows = []Window{w, w2}
	d := Diff(a, b)
	if len(d) != 1 || d[0].Group != vocab.PolicyProtection || d[0].Changes[0].Field != "protection_windows[1].queues[0]" {
		t.Fatalf("%+v", d)
	}
}
