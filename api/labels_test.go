package api

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
)

// TestNodeSelectorSubmitRoundTrip checks that resources.node_selector is
// stored with the job's request and shown back, apart from the descriptive
// labels, and that a retried submission with another selector is refused.
func TestNodeSelectorSubmitRoundTrip(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	sel := map[string]string{"network": "infiniband", "storage": "local-nvme"}
	spec := with(func(s map[string]any) {
		res(s)["node_selector"] = sel
		res(s)["labels"] = map[string]string{"job_type": "training"}
	})
	r := env.submit(tokAlice, spec, "sel-1")
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var j Job
	r.decode(t, &j)
	if !maps.Equal(j.Resources.NodeSelector, sel) || j.Resources.Labels["job_type"] != "training" {
		t.Fatalf("resources = %+v", j.Resources)
	}
	stored, err := env.store.GetJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(stored.Request.NodeSelector, sel) {
		t.Fatalf("stored selector = %v, want %v", stored.Request.NodeSelector, sel)
	}
	var got Job
	env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil).decode(t, &got)
	if !maps.Equal(got.Resources.NodeSelector, sel) {
		t.Fatalf("GET resources = %+v", got.Resources)
	}
	// The same key with another selector is a different job: refused, the
	// message naming the field that differs.
	other := with(func(s map[string]any) { res(s)["node_selector"] = map[string]string{"network": "ethernet"} })
	r = env.submit(tokAlice, other, "sel-1")
	if r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "resources.node_selector differs") {
		t.Fatalf("retry with another selector: %d %s", r.status, r.body)
	}
}

// TestReportInventoryStoresLabels checks that the labels of an agent's report
// are stored with the node, shown in GET /v1/inventory, and that a change of
// labels alone is a change.
func TestReportInventoryStoresLabels(t *testing.T) {
	t.Parallel()
	env := newNodeTestEnv(t)
	rep := nodeReport()
	rep.Labels = map[string]string{"network": "infiniband"}
	if r := env.do(http.MethodPost, "/v1/nodes/node-1/inventory", tokAgent, rep); r.status != http.StatusOK {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	rep.Labels["storage"] = "local-nvme"
	var res NodeReportResult
	r := env.do(http.MethodPost, "/v1/nodes/node-1/inventory", tokAgent, rep)
	r.decode(t, &res)
	if r.status != http.StatusOK || !res.Changed || !res.LabelsChanged || len(res.Added)+len(res.Removed) != 0 {
		t.Fatalf("label change: %d %s", r.status, r.body)
	}
	var inv Inventory
	env.do(http.MethodGet, "/v1/inventory", tokOps, nil).decode(t, &inv)
	for _, n := range inv.Pools[0].Nodes {
		if n.Name == "node-1" {
			if !maps.Equal(n.Labels, rep.Labels) {
				t.Fatalf("stored labels = %v, want %v", n.Labels, rep.Labels)
			}
			return
		}
	}
	t.Fatal("node-1 not in the inventory")
}
