package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// GET /v1/jobs/{id} shows started_at, ended_at and the last run with why it
// ended; a job that never ran has none of them.
func TestGetJobShowsLastRun(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	ctx := context.Background()
	j := env.mustSubmit(tokAlice, validSpec())
	var before Job
	env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil).decode(t, &before)
	if before.StartedAt != nil || before.EndedAt != nil || before.LastRun != nil {
		t.Fatalf("job that never ran: started %v ended %v last run %+v", before.StartedAt, before.EndedAt, before.LastRun)
	}

	start := time.Now().UTC().Truncate(time.Second)
	out, err := env.store.ApplyCycle(ctx, "c-run", &scheduling.Result{PolicyVersion: "test", At: start,
		Placements: []scheduling.Placement{{JobID: j.ID, Pool: "a100-east", Node: "node-1", Rank: 1,
			GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}, {UUID: "GPU-bbbb", Milli: 1000}}}}}, start)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("placement: %+v, %v", out, err)
	}
	runID, err := env.store.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, start)
	if err != nil {
		t.Fatal(err)
	}
	end := start.Add(5 * time.Minute)
	detail := "node failure: no agent on node node-1 took the run within 5m0s"
	if err := env.store.FinishRun(ctx, j.ID, runID, vocab.RunFailed, detail, end); err != nil {
		t.Fatal(err)
	}
	var got Job
	if r := env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	} else {
		r.decode(t, &got)
	}
	if got.StartedAt == nil || !got.StartedAt.Equal(start) || got.EndedAt == nil {
		t.Fatalf("started %v (want %v), ended %v", got.StartedAt, start, got.EndedAt)
	}
	r := got.LastRun
	if r == nil || r.ID != runID || r.Number != 1 || r.Outcome != "failed" || r.EndedAt == nil || !r.EndedAt.Equal(end) ||
		!strings.Contains(r.Detail, "node failure") {
		t.Fatalf("last run %+v", r)
	}
}
