package main

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

const notReadyJobYAML = jobYAML + `prerequisites:
  - {name: image, ready: true}
  - {name: data, ready: false, message: not staged}
`

// submitCLI submits spec through the CLI and returns the job ID.
func (e *cliEnv) submitCLI(t *testing.T, spec string) string {
	t.Helper()
	out, stderr, err := e.run(t, "submit", "-f", writeFile(t, spec))
	if err != nil {
		t.Fatalf("submit: %v (%s)", err, stderr)
	}
	return strings.TrimSpace(out)
}

// snapshot returns the stored job and its audit entries.
func (e *cliEnv) snapshot(t *testing.T, id string) (store.Job, []store.AuditEntry) {
	t.Helper()
	j, err := e.store.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.store.AuditFor(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return *j, a
}

// TestPrereqCommand sets a prerequisite ready through the CLI against the
// real API and store, and checks that bad arguments are usage errors (exit
// code 2) that change nothing.
func TestPrereqCommand(t *testing.T) {
	env := newCLIEnv(t)
	id := env.submitCLI(t, notReadyJobYAML)
	job0, audit0 := env.snapshot(t, id)

	var ue usageError
	for _, args := range [][]string{
		{"prereq", id, "data"},                           // neither flag
		{"prereq", id, "data", "--ready", "--not-ready"}, // both
		{"prereq", id, "--ready"},                        // no name
		{"prereq", id, "weights", "--ready"},             // unknown prerequisite: 404 from the API
		{"prereq", "j-missing", "data", "--ready"},       // unknown job
		{"prereq", id, "data", "--ready", "--format", "yaml"},
	} {
		_, _, err := env.run(t, args...)
		if !errors.As(err, &ue) {
			t.Errorf("%v: %T %v, want a usage error", args, err, err)
		}
	}
	if _, _, err := env.run(t, "prereq", id, "weights", "--ready"); err == nil || !strings.HasPrefix(err.Error(), "name: ") ||
		!strings.Contains(err.Error(), `"weights"`) {
		t.Errorf("unknown prerequisite: %v", err)
	}
	if job, audit := env.snapshot(t, id); !reflect.DeepEqual(job, job0) || len(audit) != len(audit0) {
		t.Fatalf("rejected commands changed the job or its audit")
	}

	// why names the command that takes the action.
	if _, err := env.store.ApplyCycle(context.Background(), "c1", &scheduling.Result{At: job0.WaitingSince, Waiting: []scheduling.WaitStatus{{
		JobID: id, Reason: vocab.ReasonEnvironmentNotReady, Detail: "not ready: data (not staged)", Rank: 1}}}, job0.WaitingSince); err != nil {
		t.Fatal(err)
	}
	out, _, err := env.run(t, "why", id)
	if want := "to act: gpugov prereq " + id + " data --ready -m MESSAGE\n"; err != nil || !strings.HasSuffix(out, want) {
		t.Fatalf("why: %v\n%s\nwant it to end with %q", err, out, want)
	}

	out, _, err = env.run(t, "prereq", id, "data", "--ready", "-m", "staged to /scratch")
	if err != nil {
		t.Fatalf("prereq: %v", err)
	}
	want := id + ": prerequisite data is ready (staged to /scratch) — every prerequisite is ready; " +
		"the scheduler evaluates the job on its next cycle\n"
	if out != want {
		t.Fatalf("prereq:\n got %q\nwant %q", out, want)
	}
	job, audit := env.snapshot(t, id)
	if p := job.Prerequisites[1]; !p.Ready || p.Message != "staged to /scratch" {
		t.Fatalf("stored prerequisite %+v", p)
	}
	if last := audit[len(audit)-1]; last.Action != store.AuditSetPrerequisite || last.Actor != "alice" {
		t.Fatalf("audit %+v", last)
	}
	out, _, err = env.run(t, "prereq", id, "image", "--not-ready", "-m", "tag deleted")
	if err != nil || !strings.Contains(out, "prerequisite image is not ready (tag deleted) — not ready: image;") {
		t.Fatalf("not-ready: %v %q", err, out)
	}
}

// TestAmendCommand amends a job's resources from a YAML file through the
// real API; a file with an unknown field or a bad value is a usage error
// naming the field and changes nothing.
func TestAmendCommand(t *testing.T) {
	env := newCLIEnv(t)
	id := env.submitCLI(t, jobYAML)
	job0, audit0 := env.snapshot(t, id)

	var ue usageError
	for _, c := range []struct{ file, field string }{
		{"gpus: 1\ngpu_mili: 500\npool: a100-east\n", "resources.gpu_mili: "},
		{"gpus: 1\ngpu_milli: 1500\npool: a100-east\n", "resources.gpu_milli: "},
		{"gpus: two\npool: a100-east\n", "resources.gpus: "},
		{"gpus: 1\npool: h100-west\n", "resources.pool: "},
	} {
		_, _, err := env.run(t, "amend", id, "-f", writeFile(t, c.file))
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: %v, want a usage error naming %s", c.file, err, c.field)
		}
	}
	if _, _, err := env.run(t, "amend", id); !errors.As(err, &ue) {
		t.Errorf("no -f: %v", err)
	}
	if job, audit := env.snapshot(t, id); !reflect.DeepEqual(job, job0) || len(audit) != len(audit0) {
		t.Fatalf("rejected amendments changed the job or its audit")
	}

	displayLocation = time.UTC
	clientNow = func() time.Time { return job0.SubmitTime.Add(time.Minute) }
	t.Cleanup(func() { displayLocation, clientNow = time.Local, time.Now })
	out, _, err := env.run(t, "amend", id, "-f", writeFile(t, "gpus: 1\ngpu_milli: 500\npool: a100-east\n"), "--reason", "half is enough")
	if err != nil {
		t.Fatalf("amend: %v", err)
	}
	if want := id + ": resources now 500 milli-GPU of 1 GPU, pool a100-east (submitted " +
		job0.SubmitTime.UTC().Format("15:04") + ", kept)\n"; out != want {
		t.Fatalf("amend:\n got %q\nwant %q", out, want)
	}
	job, audit := env.snapshot(t, id)
	if job.Request.GPUs != 1 || job.Request.GPUMilli != 500 || !job.SubmitTime.Equal(job0.SubmitTime) {
		t.Fatalf("stored request %+v", job.Request)
	}
	if last := audit[len(audit)-1]; last.Action != store.AuditAmendResources || last.Reason != "half is enough" {
		t.Fatalf("audit %+v", last)
	}
}

// TestEventsCommand prints the wait events the store recorded over three
// cycles: not yet evaluated, environment not ready, then capacity busy (open).
func TestEventsCommand(t *testing.T) {
	env := newCLIEnv(t)
	id := env.submitCLI(t, notReadyJobYAML)
	job, _ := env.snapshot(t, id)
	since := job.WaitingSince
	ctx := context.Background()
	cycle := func(cid string, at time.Time, reason vocab.WaitReason, detail string) {
		t.Helper()
		if _, err := env.store.ApplyCycle(ctx, cid, &scheduling.Result{At: at, Waiting: []scheduling.WaitStatus{{
			JobID: id, Reason: reason, Detail: detail, Rank: 1}}}, at); err != nil {
			t.Fatal(err)
		}
	}
	cycle("c1", since.Add(2*time.Second), vocab.ReasonEnvironmentNotReady, "not ready: data (not staged)")
	cycle("c2", since.Add(10*time.Minute), vocab.ReasonCapacityBusy, "needs 2 × ≥40960 MiB on one node; 2 match in pool, 0 free")
	displayLocation = time.UTC
	clientNow = func() time.Time { return since.Add(25 * time.Minute) }
	t.Cleanup(func() { displayLocation, clientNow = time.Local, time.Now })

	out, _, err := env.run(t, "events", id)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	all := strings.Split(strings.TrimRight(out, "\n"), "\n")
	// The why record first: state, submit, wait start, rank; the last action.
	if len(all) != 6 || !strings.HasPrefix(all[0], id+" waiting; submitted ") || !strings.Contains(all[0], "(25m); rank 1 in pool a100-east") ||
		!strings.HasPrefix(all[1], "last scheduling action: ") || !strings.Contains(all[1], "(cycle c2): evaluated and left waiting (capacity_busy)") {
		t.Fatalf("events:\n%s", out)
	}
	lines := all[2:]
	if !strings.HasPrefix(lines[0], "SINCE") || !strings.Contains(lines[0], "NEXT ACTION") {
		t.Fatalf("events:\n%s", out)
	}
	clock := func(d time.Duration) string { return since.Add(d).UTC().Format("15:04") }
	for i, want := range [][]string{
		{clock(0), clock(2 * time.Second), "2s", "not_yet_evaluated"},
		{clock(2 * time.Second), clock(10 * time.Minute), "9m", "environment_not_ready", "not ready: data (not staged)",
			vocab.ReasonEnvironmentNotReady.NextAction()},
		{clock(10 * time.Minute), "now", "15m", "capacity_busy", "2 match in pool, 0 free"},
	} {
		fields := lines[i+1]
		for _, w := range want {
			if !strings.Contains(fields, w) {
				t.Errorf("row %d lacks %q:\n%s", i+1, w, out)
			}
		}
	}
	t.Logf("gpugov events %s:\n%s", id, out)
	var ue usageError
	if _, _, err := env.run(t, "events"); !errors.As(err, &ue) {
		t.Errorf("no job: %v", err)
	}
	if _, _, err := env.run(t, "events", "j-missing"); !errors.As(err, &ue) {
		t.Errorf("unknown job: %v", err)
	}
}

// TestFlowStyleYAMLFiles runs README's two flow-style examples end to end:
// a job file and an amend file that open '{' with an unquoted key are YAML
// in flow style, not JSON (they were "invalid JSON: invalid character 'g'
// looking for beginning of object key string", exit 2).
func TestFlowStyleYAMLFiles(t *testing.T) {
	env := newCLIEnv(t)
	id := env.submitCLI(t, "{queue: train, resources: {gpus: 2, pool: a100-east, topology: any}, run_seconds: 600,\n"+
		" recovery: {checkpointable: true, checkpoint_interval_s: 120}}\n")
	out, stderr, err := env.run(t, "amend", id, "-f", writeFile(t, "{gpus: 1, pool: a100-east, gpu_models: [A100, H100]}\n"))
	if err != nil {
		t.Fatalf("amend: %v (%s)", err, stderr)
	}
	if !strings.HasPrefix(out, id+": resources now ") {
		t.Fatalf("amend: %q", out)
	}
	job, _ := env.snapshot(t, id)
	if job.Request.GPUs != 1 || !reflect.DeepEqual(job.Request.GPUModels, []string{"A100", "H100"}) {
		t.Fatalf("stored request %+v", job.Request)
	}
	// Real JSON, even cut short, is still reported in JSON's words.
	_, _, err = env.run(t, "amend", id, "-f", writeFile(t, "{ \"gpus\": 1,\n \"pool\": \"a100-east\"\n"))
	if err == nil || !strings.Contains(err.Error(), "truncated JSON") {
		t.Fatalf("truncated JSON amend: %v", err)
	}
}
