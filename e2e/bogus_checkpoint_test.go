package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/store"
)

// checkpointPost is one checkpoint report through the node agent's route
// and what the service answered.
type checkpointPost struct {
	what   string
	jobID  string
	runID  string
	at     time.Time
	step   int64
	loc    string
	status int    // the status wanted
	code   string // the error code wanted ("" for a 200)
	field  string // the field the 422 must name
}

// postCheckpoint posts cp to POST /v1/jobs/{id}/runs/{run}/checkpoints with
// the agent token, as the node agent does (internal/inventory/httpreport),
// and returns the status and the body as sent back.
func postCheckpoint(t *testing.T, e *env, cp checkpointPost) (int, string, string) {
	t.Helper()
	req := fmt.Sprintf(`{"at":%q,"step":%d,"location":%q}`, cp.at.UTC().Format(time.RFC3339Nano), cp.step, cp.loc)
	path := "/v1/jobs/" + cp.jobID + "/runs/" + cp.runID + "/checkpoints"
	r, err := http.NewRequest(http.MethodPost, "http://"+e.svc.APIAddr()+path, strings.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+agentToken)
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, "POST " + path + " " + req, string(bytes.TrimSpace(body))
}

// checkpointState is what a checkpoint report could change: the job's and
// the run's stored checkpoints (jsonb text), the released run's, the
// drilled job's, and the recovery profile's evidence.
type checkpointState struct {
	jobCheckpoint, runCheckpoint, releasedRunCheckpoint string
	drilledJobStep                                      int64
	drilledJobLocation                                  string
	profile                                             *store.ProfileRecord
	evidence                                            []store.ResumeEvidence
}

// readCheckpointState reads checkpointState of job quiet (run quietRun),
// drilled job drilled (released run releasedRun) and profile at now.
func readCheckpointState(t *testing.T, e *env, quiet, quietRun, drilled, releasedRun, profile string, now time.Time) checkpointState {
	t.Helper()
	ctx := context.Background()
	var s checkpointState
	q := func(sql string, arg string, dst any) {
		if err := e.db.QueryRow(ctx, sql, arg).Scan(dst); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q(`SELECT coalesce(recovery->'last_checkpoint', 'null'::jsonb)::text FROM jobs WHERE id = $1`, quiet, &s.jobCheckpoint)
	q(`SELECT coalesce(last_checkpoint, 'null'::jsonb)::text FROM runs WHERE id = $1`, quietRun, &s.runCheckpoint)
	q(`SELECT coalesce(last_checkpoint, 'null'::jsonb)::text FROM runs WHERE id = $1`, releasedRun, &s.releasedRunCheckpoint)
	q(`SELECT coalesce((recovery->'last_checkpoint'->>'step')::int8, -1) FROM jobs WHERE id = $1`, drilled, &s.drilledJobStep)
	q(`SELECT coalesce(recovery->'last_checkpoint'->>'location', '') FROM jobs WHERE id = $1`, drilled, &s.drilledJobLocation)
	var err error
	if s.profile, err = e.svc.Store().ProfileEvidence(ctx, profile, 30*24*time.Hour, now); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{quiet, drilled} {
		ev, err := e.svc.Store().ResumeEvidenceOf(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		s.evidence = append(s.evidence, ev...)
	}
	return s
}

// checkBogusCheckpoints runs after the drill of job drilled (whose run
// releasedRun's allocation the drill released): a second job of the same
// recovery profile, checkpointable and saving only what its node agent
// reports (no simulated checkpoints), gets one valid checkpoint through the
// agent's route; then reports with a time in the future, before the run
// started, a step past the declared work, a step going backwards, one older
// than the current, and one from the released run are each refused with
// the field or code that says why, and neither job's stored checkpoint nor
// the profile's evidence changes. The valid one again is a 200. It returns
// the second job (running) for the audit checks.
func checkBogusCheckpoints(t *testing.T, e *env, drilled *api.Job, releasedRun string) *api.Job {
	t.Helper()
	ctx := context.Background()
	const profile = "vision/simulated"
	spec := &api.JobSpec{Project: "vision", Queue: "experiment", RunSeconds: 3600,
		Recovery:  api.RecoverySpec{Checkpointable: true}, // interval 0: only its agent's reports save checkpoints
		Resources: api.ResourceSpec{GPUs: 1, Pool: "rehearse"}}
	quiet, status, err := e.client.Submit(ctx, spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: %d %v", status, err)
	}
	var runID string
	var started time.Time
	waitFor(t, 30*time.Second, "the second job running", func() (bool, string) {
		err := e.db.QueryRow(ctx, `SELECT id, started_at FROM runs WHERE job_id = $1 AND ended_at IS NULL`, quiet.ID).Scan(&runID, &started)
		return err == nil, fmt.Sprint(err)
	})
	// The valid report: three steps three seconds into the run.
	valid := checkpointPost{what: "valid", jobID: quiet.ID, runID: runID, at: started.Add(3 * time.Second), step: 3,
		loc: "file:///ckpt/" + quiet.ID + "/step-3", status: http.StatusOK}
	time.Sleep(time.Until(valid.at))
	if code, req, body := postCheckpoint(t, e, valid); code != http.StatusOK {
		t.Fatalf("%s: %d %s", req, code, body)
	}
	now := time.Now()
	before := readCheckpointState(t, e, quiet.ID, runID, drilled.ID, releasedRun, profile, now)
	if before.profile.Verified != 1 || len(before.evidence) != 1 || !strings.Contains(before.jobCheckpoint, `"step": 3`) {
		t.Fatalf("state before the bogus reports: %+v", before)
	}
	bogus := func(what string, at time.Time, step int64, status int, code, field string) checkpointPost {
		return checkpointPost{what: what, jobID: quiet.ID, runID: runID, at: at, step: step,
			loc: "file:///ckpt/" + quiet.ID + "/bogus-" + strings.ReplaceAll(what, " ", "-"), status: status, code: code, field: field}
	}
	posts := []checkpointPost{
		bogus("in the future", now.Add(time.Hour), 4, http.StatusUnprocessableEntity, api.CodeInvalid, "at"),
		bogus("before the run started", started.Add(-2*time.Minute), 4, http.StatusUnprocessableEntity, api.CodeInvalid, "at"),
		bogus("past the declared work", valid.at.Add(time.Second), 3601, http.StatusUnprocessableEntity, api.CodeInvalid, "step"),
		bogus("step going backwards", valid.at.Add(time.Second), 2, http.StatusUnprocessableEntity, api.CodeInvalid, "step"),
		bogus("older than the current", valid.at.Add(-time.Second), 2, http.StatusConflict, api.CodeStale, ""),
		{what: "from the released run", jobID: drilled.ID, runID: releasedRun, at: time.Now(), step: 3000,
			loc: "file:///ckpt/" + drilled.ID + "/bogus-released", status: http.StatusConflict, code: api.CodeConflict},
		valid, // the same valid report again: accepted, nothing changes
	}
	for _, p := range posts {
		code, req, body := postCheckpoint(t, e, p)
		t.Logf("checkpoint %s:\n  %s\n  → %d %s", p.what, req, code, body)
		if code != p.status {
			t.Errorf("checkpoint %s: status %d, want %d", p.what, code, p.status)
			continue
		}
		if p.status == http.StatusOK {
			continue
		}
		var er api.ErrorResponse
		if err := json.Unmarshal([]byte(body), &er); err != nil || er.Error.Code != p.code || er.Error.Field != p.field || er.Error.Message == "" {
			t.Errorf("checkpoint %s: error %+v (%v), want code %s field %q", p.what, er.Error, err, p.code, p.field)
		}
	}
	after := readCheckpointState(t, e, quiet.ID, runID, drilled.ID, releasedRun, profile, now)
	// The drilled job keeps checkpointing in its resumed run; the bogus
	// report of its released run must not have reached it.
	if after.drilledJobStep < before.drilledJobStep || after.drilledJobStep >= 3000 || strings.Contains(after.drilledJobLocation, "bogus") {
		t.Errorf("drilled job's checkpoint went from step %d to %d (%s)", before.drilledJobStep, after.drilledJobStep, after.drilledJobLocation)
	}
	before.drilledJobStep, before.drilledJobLocation, after.drilledJobStep, after.drilledJobLocation = 0, "", 0, ""
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the refused reports changed something:\nbefore %+v\nafter  %+v", before, after)
	}
	t.Logf("unchanged after the refused reports: job %s checkpoint %s; released run %s checkpoint %s; profile %s: %d verified, %d failed",
		quiet.ID, after.jobCheckpoint, releasedRun, after.releasedRunCheckpoint, profile, after.profile.Verified, after.profile.Failed)
	return quiet
}
