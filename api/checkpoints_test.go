package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv/nvmltest"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestBogusCheckpointsAreRefused posts checkpoint reports that are not
// evidence to POST /v1/jobs/{id}/runs/{run}/checkpoints — a time in the
// future or before the run started, a step past the job's declared work or
// going backwards, an older checkpoint than the current one, a report of a
// run whose allocation was released — and checks that each is refused with
// its status, code and field, and that nothing stored changed (the run's and
// the job's last checkpoint, the job's row). The agent's client sees the
// refusals as executor.ErrCheckpointRefused.
func TestBogusCheckpointsAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := newService(t)
	inv, err := dgxCollector().CollectNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, svc.url, tokAgent)
	if err := c.Report(ctx, inv); err != nil {
		t.Fatal(err)
	}
	job, _, err := svc.store.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		Request:  scheduling.ResourceRequest{GPUs: 1, Pool: "a100-east"},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60, TotalSteps: 1000},
		Command:  []string{"python", "train.py"}})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	out, err := svc.store.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: "v1", At: started,
		Placements: []scheduling.Placement{{JobID: job.ID, Pool: "a100-east", Node: "dgx-01", Rank: 1,
			GPUs: []scheduling.GPUShare{{UUID: nvmltest.UUID(0), Milli: 1000}}}}}, started)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("apply cycle: %+v %v", out, err)
	}
	runID, err := svc.store.MarkRunning(ctx, job.ID, out.Placed[0].AllocationID, 0, started)
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/jobs/" + job.ID + "/runs/" + runID + "/checkpoints"
	post := func(body string) (int, api.ErrorBody, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, svc.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokAgent)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var er api.ErrorResponse
		_ = json.Unmarshal(raw, &er)
		return resp.StatusCode, er.Error, string(raw)
	}
	cp := func(at time.Time, step int64) string {
		b, _ := json.Marshal(api.Checkpoint{At: at, Step: step, Location: "/ckpt/step"})
		return string(b)
	}
	stored := func() string {
		var doc string
		if err := svc.store.Pool().QueryRow(ctx, `SELECT coalesce(r.last_checkpoint::text, '') || ' | ' || j.recovery::text || ' | ' || j.updated_at::text
			FROM runs r JOIN jobs j ON j.id = r.job_id WHERE r.id = $1`, runID).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	if code, _, raw := post(cp(started.Add(30*time.Minute), 500)); code != http.StatusOK {
		t.Fatalf("a valid checkpoint: %d %s", code, raw)
	}
	now := time.Now().UTC()
	cases := []struct {
		name   string
		body   string
		status int
		code   string
		field  string
	}{
		{"in the future", cp(now.Add(10*time.Minute), 600), http.StatusUnprocessableEntity, api.CodeInvalid, "at"},
		{"before the run started", cp(started.Add(-10*time.Minute), 600), http.StatusUnprocessableEntity, api.CodeInvalid, "at"},
		{"past the declared work", cp(now, 1001), http.StatusUnprocessableEntity, api.CodeInvalid, "step"},
		{"step going backwards", cp(started.Add(40*time.Minute), 400), http.StatusUnprocessableEntity, api.CodeInvalid, "step"},
		{"older than the current one", cp(started.Add(20*time.Minute), 400), http.StatusConflict, api.CodeStale, ""},
	}
	for _, tc := range cases {
		before := stored()
		code, body, raw := post(tc.body)
		if code != tc.status || body.Code != tc.code || body.Field != tc.field {
			t.Errorf("%s: %d %s, want %d with code %s naming %q", tc.name, code, raw, tc.status, tc.code, tc.field)
		}
		t.Logf("%s: HTTP %d %s", tc.name, code, raw)
		if after := stored(); after != before {
			t.Errorf("%s: the refused checkpoint changed the record:\n%s\n%s", tc.name, before, after)
		}
	}
	// The agent's client reports a refusal as final.
	err = c.RecordCheckpoint(ctx, job.ID, runID, scheduling.Checkpoint{At: now.Add(time.Hour), Step: 700, Location: "/x"})
	if !errors.Is(err, executor.ErrCheckpointRefused) {
		t.Errorf("client error %v, want ErrCheckpointRefused", err)
	}
	// The same checkpoint again is accepted (a retry).
	if code, _, raw := post(cp(started.Add(30*time.Minute), 500)); code != http.StatusOK {
		t.Fatalf("the same checkpoint again: %d %s", code, raw)
	}

	// Once the run's allocation was released, its reports are no evidence.
	if err := svc.store.FinishRun(ctx, job.ID, runID, vocab.RunFailed, "exit 1", now); err != nil {
		t.Fatal(err)
	}
	before := stored()
	code, body, raw := post(cp(now, 900))
	if code != http.StatusConflict || body.Code != api.CodeConflict || !strings.Contains(body.Message, "was released") {
		t.Errorf("released allocation: %d %s, want 409 conflict naming the release", code, raw)
	}
	t.Logf("released allocation: HTTP %d %s", code, raw)
	if after := stored(); after != before {
		t.Errorf("the released run's checkpoint changed the record:\n%s\n%s", before, after)
	}
}
