package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestGetJobSuggestionsAndReleases checks that GET /v1/jobs/{id} carries the
// last cycle's nearest-fit suggestions and expected releases under the
// explanation with the names openapi.json gives them.
func TestGetJobSuggestionsAndReleases(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	at := time.Now().UTC().Truncate(time.Second)
	end := at.Add(40 * time.Minute)
	applyWait(t, env, "c1", at, scheduling.WaitStatus{
		JobID: j.ID, Reason: vocab.ReasonFragmented, Rank: 1, Detail: "needs 2 × GPU on one node; 2 match in pool, 2 free",
		Suggestions: []scheduling.Suggestion{{Field: "topology", Value: "any", Now: true, MatchingGPUs: 2, FreeGPUs: 2,
			Nodes: 1, Text: "fits now with topology any: 2 matching GPUs, 2 free"}},
		Releases: []scheduling.ExpectedRelease{{JobID: "j-other", Milli: 1000, ExpectedEnd: end}},
	})
	r := env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var raw struct {
		Explanation struct {
			Suggestions []map[string]any `json:"suggestions"`
			Releases    []map[string]any `json:"releases"`
		} `json:"explanation"`
	}
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw.Explanation.Suggestions) != 1 || len(raw.Explanation.Releases) != 1 {
		t.Fatalf("explanation %s", r.body)
	}
	sg := raw.Explanation.Suggestions[0]
	for k, v := range map[string]any{"field": "topology", "value": "any", "now": true, "matching_gpus": 2.0,
		"free_gpus": 2.0, "nodes": 1.0, "text": "fits now with topology any: 2 matching GPUs, 2 free"} {
		if sg[k] != v {
			t.Errorf("suggestion %s = %v, want %v", k, sg[k], v)
		}
	}
	rel := raw.Explanation.Releases[0]
	if rel["job_id"] != "j-other" || rel["milli"] != 1000.0 || rel["expected_end"] != end.Format(time.RFC3339) {
		t.Errorf("release %v", rel)
	}
	var got Job
	r.decode(t, &got)
	if e := got.Explanation; len(e.Suggestions) != 1 || !e.Suggestions[0].Now || len(e.Releases) != 1 ||
		!e.Releases[0].ExpectedEnd.Equal(end) {
		t.Fatalf("decoded explanation %+v", e)
	}
	// Every field the handler returns is in the OpenAPI schema, and only those.
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(env.do(http.MethodGet, "/v1/openapi.json", "", nil).body, &doc); err != nil {
		t.Fatal(err)
	}
	for schema, obj := range map[string]map[string]any{"Suggestion": sg, "ExpectedRelease": rel} {
		props := doc.Components.Schemas[schema].Properties
		if len(props) != len(obj) {
			t.Errorf("schema %s has %d properties, the answer %d", schema, len(props), len(obj))
		}
		for k := range obj {
			if _, ok := props[k]; !ok {
				t.Errorf("schema %s lacks %s", schema, k)
			}
		}
	}
	for _, k := range []string{"suggestions", "releases"} {
		if _, ok := doc.Components.Schemas["Explanation"].Properties[k]; !ok {
			t.Errorf("schema Explanation lacks %s", k)
		}
	}
}
