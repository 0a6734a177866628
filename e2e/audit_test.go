package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/store"
)

// startCLIBuild starts building the gpugov CLI into the test's temporary
// folder, concurrently with the test; the returned function waits for it
// and returns the binary.
func startCLIBuild(t *testing.T) func() string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpugov")
	cmd := exec.Command("go", "build", "-o", bin, filepath.Join(repoRoot(t), "cmd", "gpugov"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("build gpugov: %v", err)
	}
	return func() string {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("build gpugov: %v\n%s", err, out.String())
		}
		return bin
	}
}

// auditWant is one audit entry a live run must have left: its action, its
// subject and actor, and the evidence keys (with values where given).
type auditWant struct {
	action, subject, actor string
	reason                 string // a substring of the reason
	keys                   []string
	values                 map[string]any
}

// checkLiveAudit holds and releases a pending job and changes a quota
// through the API, then reads the audit of the whole run (GET /v1/audit
// through the API client, filtered by subject, action and since) and finds
// each governance action with who, why and its evidence: the readiness
// override, the drill and its preemption workflow's steps, the stage
// changes, the policy activations, the hold and release, the quota change.
// The real CLI's `gpugov audit` of the run is logged verbatim.
func checkLiveAudit(t *testing.T, e *env, since time.Time, drilled *api.Job, drill *api.Preemption, cli string) {
	t.Helper()
	ctx := context.Background()
	// A job that cannot fit (three GPUs, two free) waits: hold it, release
	// it, cancel it.
	waiting, status, err := e.client.Submit(ctx, &api.JobSpec{Project: "vision", Queue: "experiment", RunSeconds: 600,
		Resources: api.ResourceSpec{GPUs: 3, Pool: "rehearse"}}, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: %d %v", status, err)
	}
	if _, err := e.client.Hold(ctx, waiting.ID, "hold for the audit: wait for the drill review"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Release(ctx, waiting.ID, "drill reviewed"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Cancel(ctx, waiting.ID, "not needed after all"); err != nil {
		t.Fatal(err)
	}
	quota, err := e.client.SetQuota(ctx, "rehearse", "vision", 3000, 1000, "vision rehearses on three GPUs of rehearse")
	if err != nil || !quota.Changed {
		t.Fatalf("set quota: %+v %v", quota, err)
	}

	wants := []auditWant{
		{action: store.AuditOverrideReadiness, subject: "rehearse", actor: "e2e-admin", reason: "override",
			keys: []string{"from", "to", "outcome", "failed_checks", "readiness", "policy_hash"}, values: map[string]any{"outcome": "overridden", "to": "automate"}},
		{action: store.AuditSetPoolStage, subject: "rehearse", actor: "e2e-admin", reason: "drilled",
			keys: []string{"from", "to", "outcome", "ready", "readiness", "policy_hash"}, values: map[string]any{"outcome": "applied", "ready": true, "to": "automate"}},
		{action: store.AuditDrill, subject: drilled.ID, actor: "e2e-admin", reason: "earn the first verified resume",
			keys: []string{"preemption_id", "allocation_id", "run_id", "pool", "queue"}, values: map[string]any{"preemption_id": drill.ID, "run_id": drill.RunID}},
		{action: "preempt_notice", subject: drill.ID, actor: "governance", keys: []string{"workflow_step", "victim_job_id", "allocation_id"},
			values: map[string]any{"victim_job_id": drilled.ID}},
		{action: "preempt_release", subject: drill.ID, actor: "governance", keys: []string{"workflow_step", "saved_checkpoint", "released_at"}},
		{action: "preempt_requeue", subject: drill.ID, actor: "governance", keys: []string{"workflow_step", "victim_job_id"}},
		{action: "preempt_finish", subject: drill.ID, actor: "governance", keys: []string{"workflow_step", "resumed_run_id", "resumed_correctly", "effective_loss_gpu_s"},
			values: map[string]any{"resumed_correctly": true, "outcome": "completed"}},
		{action: "hold", subject: waiting.ID, actor: "e2e-admin", reason: "hold for the audit", keys: []string{"state"}},
		{action: "release_hold", subject: waiting.ID, actor: "e2e-admin", reason: "drill reviewed", keys: []string{"state"}},
		{action: store.AuditSetQuota, subject: "rehearse/vision", actor: "e2e-admin", reason: "three GPUs",
			keys: []string{"pool", "project", "before", "after", "policy", "previous_policy"}},
		{action: store.AuditActivatePolicy, subject: quota.Policy, actor: "e2e-admin", reason: "three GPUs", keys: []string{"previous"},
			values: map[string]any{"previous": quota.PreviousPolicy}},
	}
	for _, w := range wants {
		list, err := e.client.Audit(ctx, apiclient.AuditOptions{Subject: w.subject, Action: w.action, Since: since})
		if err != nil {
			t.Fatalf("GET /v1/audit?subject=%s&action=%s: %v", w.subject, w.action, err)
		}
		if len(list.Entries) == 0 {
			t.Errorf("no %s audit entry for %s", w.action, w.subject)
			continue
		}
		if msg := auditMismatch(list.Entries, w); msg != "" {
			t.Errorf("%s of %s: %s (entries %+v)", w.action, w.subject, msg, list.Entries)
		}
	}
	// The policy activations of the run, by whoever: the service's first,
	// the override's, the narrowing back, the drilled widening, the quota's.
	acts, err := e.client.Audit(ctx, apiclient.AuditOptions{Action: store.AuditActivatePolicy, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, a := range acts.Entries {
		reasons = append(reasons, a.Actor+": "+a.Reason)
	}
	if len(acts.Entries) != 5 {
		t.Errorf("%d policy activations, want 5: %q", len(acts.Entries), reasons)
	}

	apiURL := "http://" + e.svc.APIAddr()
	sinceArg := since.UTC().Format(time.RFC3339Nano)
	out, err := exec.Command(cli, "audit", "--since", sinceArg, "--api", apiURL, "--token", adminToken).CombinedOutput()
	if err != nil {
		t.Fatalf("gpugov audit: %v\n%s", err, out)
	}
	t.Logf("$ gpugov audit --since %s\n%s", sinceArg, out)
	for _, w := range wants {
		if !strings.Contains(string(out), "  "+w.action+"  ") {
			t.Errorf("gpugov audit lists no %s", w.action)
		}
	}
	out, err = exec.Command(cli, "audit", "--subject", drill.ID, "--api", apiURL, "--token", adminToken).CombinedOutput()
	if err != nil {
		t.Fatalf("gpugov audit --subject: %v\n%s", err, out)
	}
	t.Logf("$ gpugov audit --subject %s\n%s", drill.ID, out)
}

// auditMismatch says why no entry of entries matches w, or "".
func auditMismatch(entries []api.AuditEntry, w auditWant) string {
	var why []string
	for _, e := range entries {
		msg := ""
		switch {
		case e.Action != w.action || e.Subject != w.subject:
			msg = fmt.Sprintf("entry %d is %s of %s", e.ID, e.Action, e.Subject)
		case e.Actor != w.actor:
			msg = fmt.Sprintf("entry %d actor %q, want %q", e.ID, e.Actor, w.actor)
		case e.Reason == "" || !strings.Contains(e.Reason, w.reason):
			msg = fmt.Sprintf("entry %d reason %q, want one containing %q", e.ID, e.Reason, w.reason)
		}
		for _, k := range w.keys {
			if _, ok := e.Evidence[k]; !ok && msg == "" {
				msg = fmt.Sprintf("entry %d evidence has no %s: %v", e.ID, k, e.Evidence)
			}
		}
		for k, v := range w.values {
			if e.Evidence[k] != v && msg == "" {
				msg = fmt.Sprintf("entry %d evidence %s = %v, want %v", e.ID, k, e.Evidence[k], v)
			}
		}
		if msg == "" {
			return ""
		}
		why = append(why, msg)
	}
	return strings.Join(slices.Compact(why), "; ")
}
