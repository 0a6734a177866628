package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// tierNames returns the name of every tier, highest first.
func tierNames() []string {
	out := make([]string, len(vocab.Tiers))
	for i, t := range vocab.Tiers {
		out[i] = t.String()
	}
	return out
}

// finalStates returns the job states that are final, in order.
func finalStates() []string {
	var out []string
	for _, s := range vocab.JobStates {
		if s.Final() {
			out = append(out, string(s))
		}
	}
	return out
}

// openAPIEnum returns the enum of the schema at path in the OpenAPI
// document, following $ref. path is a list of object keys; a key
// "param:<name>" selects the parameter of that name in a parameters list.
func openAPIEnum(t *testing.T, doc map[string]any, path ...string) []string {
	t.Helper()
	var cur any = doc
	for _, key := range path {
		if name, ok := strings.CutPrefix(key, "param:"); ok {
			params, _ := cur.([]any)
			cur = nil
			for _, p := range params {
				if pm, _ := p.(map[string]any); pm["name"] == name {
					cur = pm["schema"]
				}
			}
		} else {
			m, _ := cur.(map[string]any)
			cur = m[key]
		}
		if cur == nil {
			t.Fatalf("openapi.json: no %s", strings.Join(path, " / "))
		}
	}
	for range 4 {
		m, _ := cur.(map[string]any)
		ref, ok := m["$ref"].(string)
		if !ok {
			break
		}
		cur = doc["components"].(map[string]any)["schemas"].(map[string]any)[strings.TrimPrefix(ref, "#/components/schemas/")]
	}
	m, _ := cur.(map[string]any)
	raw, ok := m["enum"].([]any)
	if !ok {
		t.Fatalf("openapi.json: %s has no enum", strings.Join(path, " / "))
	}
	out := make([]string, len(raw))
	for i, v := range raw {
		out[i], _ = v.(string)
	}
	return out
}

// TestVocabularyMatchesOpenAPI checks that every enum of the OpenAPI document
// that lists a term of internal/vocab lists exactly its values in its order
// (plus "" where the field may be empty), so a state, outcome, reason, class,
// mode, stage or tier added in one place only fails here.
func TestVocabularyMatchesOpenAPI(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	schema := func(name string, prop ...string) []string {
		return append([]string{"components", "schemas", name}, prop...)
	}
	prop := func(name, field string, more ...string) []string {
		return append(schema(name, "properties", field), more...)
	}
	param := func(route, name string) []string {
		return []string{"paths", route, "get", "parameters", "param:" + name}
	}
	withEmpty := func(vs []string) []string { return append(slices.Clone(vs), "") }
	cases := []struct {
		path []string
		want []string
	}{
		{schema("JobState"), names(vocab.JobStates)},
		{prop("Job", "state"), names(vocab.JobStates)},
		{prop("StarvingJob", "state"), names(vocab.JobStates)},
		{param("/v1/jobs", "state"), names(vocab.JobStates)},
		{schema("WaitReason"), names(vocab.RecordedReasons)},
		{prop("Wait", "reason"), names(vocab.RecordedReasons)},
		{prop("Explanation", "reason"), names(vocab.RecordedReasons)},
		{prop("WaitEvent", "reason"), names(vocab.RecordedReasons)},
		{prop("ReasonShare", "reason"), names(vocab.RecordedReasons)},
		{schema("ReasonGroup"), names(vocab.ReasonGroups)},
		{prop("ReasonGroupShare", "group"), names(vocab.ReasonGroups)},
		{prop("PoolReasonShares", "main_basis"), withEmpty([]string{queuereport.BasisGPUSeconds, queuereport.BasisJobSeconds})},
		{param("/v1/jobs", "reason"), names(vocab.RecordedReasons)},
		{schema("Tier"), tierNames()},
		{prop("Job", "tier"), tierNames()},
		{prop("Queue", "tier"), tierNames()},
		{prop("StarvingJob", "tier"), tierNames()},
		{schema("AutomationStage"), names(vocab.AutomationStages)},
		{prop("Pool", "stage"), names(vocab.AutomationStages)},
		{prop("Run", "outcome"), names(vocab.RunOutcomes)},
		{prop("Preemption", "state"), names(vocab.PreemptionStates)},
		{param("/v1/preemptions", "state"), names(vocab.PreemptionStates)},
		{prop("Preemption", "outcome"), withEmpty(names(vocab.PreemptionOutcomes))},
		{param("/v1/preemptions", "outcome"), names(vocab.PreemptionOutcomes)},
		{prop("Preemption", "final_state"), withEmpty(finalStates())},
		{prop("Reclaim", "class"), names(vocab.ReclaimClasses)},
		{param("/v1/reclaims", "class"), names(vocab.ReclaimClasses)},
		{prop("Reclaim", "mode"), names(vocab.ReclaimModes)},
		{param("/v1/reclaims", "mode"), names(vocab.ReclaimModes)},
		{prop("Reclaim", "configured_mode"), withEmpty(names(vocab.ReclaimModes))},
		{prop("Reclaim", "stage"), withEmpty(names(vocab.AutomationStages))},
		{prop("Reclaim", "state"), names(vocab.ReclaimStates)},
		{schema("NextEvalKind"), names(vocab.NextEvalKinds)},
		{prop("NextEvaluation", "kind"), names(vocab.NextEvalKinds)},
		{schema("SchedulingAction"), names(vocab.SchedulingActions)},
		{prop("LastDecision", "action"), names(vocab.SchedulingActions)},
		{prop("LastDecision", "reason"), names(vocab.RecordedReasons)},
		{prop("WaitEventList", "state"), names(vocab.JobStates)},
		{param("/v1/reclaims", "state"), names(vocab.ReclaimStates)},
		{prop("Notification", "type"), names(vocab.NotificationKinds)},
		{prop("Notification", "state"), names(vocab.NotificationStates)},
		{param("/v1/notifications", "state"), names(vocab.NotificationStates)},
		{schema("QuotaRequestState"), names(vocab.QuotaRequestStates)},
		{prop("QuotaRequest", "state"), names(vocab.QuotaRequestStates)},
		{param("/v1/quota-requests", "state"), names(vocab.QuotaRequestStates)},
		{schema("PolicyGroup"), names(vocab.PolicyGroups)},
		{prop("PolicyGroupDiff", "group"), names(vocab.PolicyGroups)},
		{schema("ExperimentState"), names(vocab.ExperimentStates)},
		{prop("Experiment", "state"), names(vocab.ExperimentStates)},
		{schema("ExperimentVerdict"), names(vocab.ExperimentVerdicts)},
		{prop("Experiment", "verdict"), withEmpty(names(vocab.ExperimentVerdicts))},
		{prop("ExperimentOutcome", "verdict"), names(vocab.ExperimentVerdicts)},
		{prop("Experiment", "groups", "items"), names(vocab.PolicyGroups)},
		{prop("ExperimentExpectation", "direction"), names([]experiment.Direction{experiment.Decrease, experiment.Increase})},
		{prop("ExperimentExpectedResult", "direction"), names([]experiment.Direction{experiment.Decrease, experiment.Increase})},
		{schema("PreemptionKind"), names(vocab.PreemptionKinds)},
		{prop("Preemption", "kind"), names(vocab.PreemptionKinds)},
		{param("/v1/preemptions", "kind"), names(vocab.PreemptionKinds)},
		{schema("ReadinessCheck"), names(vocab.ReadinessChecks)},
		{prop("ReadinessCheckResult", "check"), names(vocab.ReadinessChecks)},
		{schema("StageChangeOutcome"), names(vocab.StageChangeOutcomes)},
		{prop("PoolStageChange", "outcome"), names(vocab.StageChangeOutcomes)},
		{prop("StageChange", "outcome"), withEmpty(names(vocab.StageChangeOutcomes))},
		{prop("PoolReadiness", "stage"), names(vocab.AutomationStages)},
		{param("/v1/audit", "action"), vocab.AuditActions},
	}
	for _, tc := range cases {
		where := strings.Join(tc.path, " / ")
		if got := openAPIEnum(t, doc, tc.path...); !slices.Equal(got, tc.want) {
			t.Errorf("openapi.json %s: enum %q; internal/vocab has %q", where, got, tc.want)
		}
	}
}
