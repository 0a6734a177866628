package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// with returns validSpec changed by fn.
func with(fn func(s map[string]any)) map[string]any {
	s := validSpec()
	fn(s)
	return s
}

func res(s map[string]any) map[string]any { return s["resources"].(map[string]any) }

// TestSubmitRejectsInvalidSpecNamingTheField checks that every validation
// error is a 400 (malformed) or 422 (invalid) naming the field, and that a
// rejected request changes nothing in the database (docs/design.md invariant 7).
func TestSubmitRejectsInvalidSpecNamingTheField(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	// One accepted job first, so "unchanged" is checked against a non-empty database.
	env.mustSubmit(tokAlice, validSpec())
	before := env.counts()

	cases := []struct {
		name   string
		token  string
		body   any
		key    string
		status int
		code   string
		field  string
	}{
		{"queue missing", tokAlice, with(func(s map[string]any) { delete(s, "queue") }), "", 422, CodeInvalid, "queue"},
		{"queue unknown", tokAlice, with(func(s map[string]any) { s["queue"] = "gold" }), "", 422, CodeInvalid, "queue"},
		{"gpus negative", tokAlice, with(func(s map[string]any) { res(s)["gpus"] = -1 }), "", 422, CodeInvalid, "resources.gpus"},
		{"pool of 100 KB", tokAlice, with(func(s map[string]any) { res(s)["pool"] = strings.Repeat("p", 100_000) }), "", 422, CodeInvalid, "resources.pool"},
		{"pool of 254 bytes", tokAlice, with(func(s map[string]any) { res(s)["pool"] = strings.Repeat("p", 254) }), "", 422, CodeInvalid, "resources.pool"},
		{"pool with a space", tokAlice, with(func(s map[string]any) { res(s)["pool"] = "a100 east" }), "", 422, CodeInvalid, "resources.pool"},
		{"gpu model too long", tokAlice, with(func(s map[string]any) {
			res(s)["gpu_models"] = []string{"T4", strings.Repeat("m", MaxGPUModelLength+1)}
		}), "", 422, CodeInvalid, "resources.gpu_models[1]"},
		{"gpus above int32", tokAlice, with(func(s map[string]any) { res(s)["gpus"] = int64(2147483648) }), "", 422, CodeInvalid, "resources.gpus"},
		{"gpus above MaxGPUs", tokAlice, with(func(s map[string]any) { res(s)["gpus"] = MaxGPUs + 1 }), "", 422, CodeInvalid, "resources.gpus"},
		{"gpu_memory_mib too large", tokAlice, with(func(s map[string]any) { res(s)["gpu_memory_mib"] = MaxGPUMemoryMiB + 1 }), "", 422, CodeInvalid, "resources.gpu_memory_mib"},
		{"cpu_milli too large", tokAlice, with(func(s map[string]any) { res(s)["cpu_milli"] = int64(MaxCPUMilli) + 1 }), "", 422, CodeInvalid, "resources.cpu_milli"},
		{"memory_mib too large", tokAlice, with(func(s map[string]any) { res(s)["memory_mib"] = int64(1) << 62 }), "", 422, CodeInvalid, "resources.memory_mib"},
		{"checkpoint interval too large", tokAlice, with(func(s map[string]any) {
			s["recovery"] = map[string]any{"checkpointable": true, "checkpoint_interval_s": int64(1) << 40}
		}), "", 422, CodeInvalid, "recovery.checkpoint_interval_s"},
		{"gpu_milli above 1000", tokAlice, with(func(s map[string]any) { res(s)["gpus"] = 1; res(s)["gpu_milli"] = 1500 }), "", 422, CodeInvalid, "resources.gpu_milli"},
		{"gpu_milli negative", tokAlice, with(func(s map[string]any) { res(s)["gpus"] = 1; res(s)["gpu_milli"] = -3 }), "", 422, CodeInvalid, "resources.gpu_milli"},
		{"gpu_milli with 2 gpus", tokAlice, with(func(s map[string]any) { res(s)["gpu_milli"] = 500 }), "", 422, CodeInvalid, "resources.gpu_milli"},
		{"gpu_memory_mib negative", tokAlice, with(func(s map[string]any) { res(s)["gpu_memory_mib"] = -1 }), "", 422, CodeInvalid, "resources.gpu_memory_mib"},
		{"empty gpu model", tokAlice, with(func(s map[string]any) { res(s)["gpu_models"] = []string{"A100", " "} }), "", 422, CodeInvalid, "resources.gpu_models[1]"},
		{"pool missing", tokAlice, with(func(s map[string]any) { delete(res(s), "pool") }), "", 422, CodeInvalid, "resources.pool"},
		{"topology unknown", tokAlice, with(func(s map[string]any) { res(s)["topology"] = "ring" }), "", 422, CodeInvalid, "resources.topology"},
		{"cpu_milli negative", tokAlice, with(func(s map[string]any) { res(s)["cpu_milli"] = -1 }), "", 422, CodeInvalid, "resources.cpu_milli"},
		{"memory_mib negative", tokAlice, with(func(s map[string]any) { res(s)["memory_mib"] = -1 }), "", 422, CodeInvalid, "resources.memory_mib"},
		{"node_selector empty value", tokAlice, with(func(s map[string]any) {
			res(s)["node_selector"] = map[string]string{"network": "", "storage": "local-nvme"}
		}), "", 422, CodeInvalid, "resources.node_selector.network"},
		{"node_selector blank key", tokAlice, with(func(s map[string]any) { res(s)["node_selector"] = map[string]string{" ": "x"} }), "", 422, CodeInvalid, "resources.node_selector"},
		{"node_selector value too long", tokAlice, with(func(s map[string]any) {
			res(s)["node_selector"] = map[string]string{"rack": strings.Repeat("r", 254)}
		}), "", 422, CodeInvalid, "resources.node_selector.rack"},
		{"node_selector too many pairs", tokAlice, with(func(s map[string]any) {
			sel := map[string]string{}
			for i := range MaxNodeSelectorPairs + 1 {
				sel[fmt.Sprintf("k%02d", i)] = "v"
			}
			res(s)["node_selector"] = sel
		}), "", 422, CodeInvalid, "resources.node_selector"},
		{"node_selector value not a string", tokAlice, with(func(s map[string]any) { res(s)["node_selector"] = map[string]any{"network": 1} }), "", 400, CodeMalformed, "resources.node_selector.network"},
		{"simulated without run_seconds", tokAlice, with(func(s map[string]any) { delete(s, "run_seconds") }), "", 422, CodeInvalid, "run_seconds"},
		{"run_seconds negative with command", tokAlice, with(func(s map[string]any) { s["command"] = []string{"python"}; s["run_seconds"] = -1 }), "", 422, CodeInvalid, "run_seconds"},
		{"run_seconds 1e300", tokAlice, with(func(s map[string]any) { s["run_seconds"] = 1e300 }), "", 422, CodeInvalid, "run_seconds"},
		{"run_seconds above ten years with command", tokAlice, with(func(s map[string]any) { s["command"] = []string{"python"}; s["run_seconds"] = 1e12 }), "", 422, CodeInvalid, "run_seconds"},
		{"empty program", tokAlice, with(func(s map[string]any) { s["command"] = []string{"", "x"} }), "", 422, CodeInvalid, "command[0]"},
		{"bad env name", tokAlice, with(func(s map[string]any) { s["env"] = map[string]string{"A=B": "1"} }), "", 422, CodeInvalid, "env"},
		{"checkpoint interval negative", tokAlice, with(func(s map[string]any) {
			s["recovery"] = map[string]any{"checkpointable": true, "checkpoint_interval_s": -5}
		}), "", 422, CodeInvalid, "recovery.checkpoint_interval_s"},
		{"checkpoint interval without checkpointable", tokAlice, with(func(s map[string]any) { s["recovery"] = map[string]any{"checkpoint_interval_s": 60} }), "", 422, CodeInvalid, "recovery.checkpoint_interval_s"},
		{"profile naming another project", tokAlice, with(func(s map[string]any) {
			s["recovery"] = map[string]any{"checkpointable": true, "profile": "speech/trainer"}
		}), "", 422, CodeInvalid, "recovery.profile"},
		{"profile of 129 bytes", tokAlice, with(func(s map[string]any) {
			s["recovery"] = map[string]any{"checkpointable": true, "profile": strings.Repeat("p", 129)}
		}), "", 422, CodeInvalid, "recovery.profile"},
		{"total steps of a job without a command", tokAlice, with(func(s map[string]any) {
			s["recovery"] = map[string]any{"checkpointable": true, "total_steps": 5000}
		}), "", 422, CodeInvalid, "recovery.total_steps"},
		{"negative total steps", tokAlice, with(func(s map[string]any) {
			s["command"] = []string{"train"}
			s["recovery"] = map[string]any{"checkpointable": true, "total_steps": -1}
		}), "", 422, CodeInvalid, "recovery.total_steps"},
		{"prerequisite without name", tokAlice, with(func(s map[string]any) { s["prerequisites"] = []any{map[string]any{"ready": true}} }), "", 422, CodeInvalid, "prerequisites[0].name"},
		{"duplicate prerequisite", tokAlice, with(func(s map[string]any) {
			s["prerequisites"] = []any{map[string]any{"name": "data", "ready": true}, map[string]any{"name": "data", "ready": false}}
		}), "", 422, CodeInvalid, "prerequisites[1].name"},
		{"submitter sets protected", tokAlice, with(func(s map[string]any) { s["protected"] = true }), "", 403, CodeForbidden, "protected"},
		{"submitter names another project", tokAlice, with(func(s map[string]any) { s["project"] = "speech" }), "", 403, CodeForbidden, "project"},
		{"gpus not a number", tokAlice, with(func(s map[string]any) { res(s)["gpus"] = "two" }), "", 400, CodeMalformed, "resources.gpus"},
		{"command not an array", tokAlice, with(func(s map[string]any) { s["command"] = "python train.py" }), "", 400, CodeMalformed, "command"},
		{"unknown top-level field", tokAlice, with(func(s map[string]any) { s["priority"] = 5 }), "", 400, CodeMalformed, "priority"},
		{"unknown nested field", tokAlice, with(func(s map[string]any) { res(s)["gpu_type"] = "A100" }), "", 400, CodeMalformed, "resources.gpu_type"},
		{"unknown field in a list", tokAlice, with(func(s map[string]any) {
			s["prerequisites"] = []any{map[string]any{"name": "x", "ready": true, "kind": "image"}}
		}), "", 400, CodeMalformed, "prerequisites[0].kind"},
		{"malformed JSON", tokAlice, `{"queue": "train",`, "", 400, CodeMalformed, ""},
		{"trailing data", tokAlice, `{"queue": "train"} {}`, "", 400, CodeMalformed, ""},
		{"empty body", tokAlice, ``, "", 400, CodeMalformed, ""},
		{"idempotency key too long", tokAlice, validSpec(), strings.Repeat("k", 300), 400, CodeMalformed, IdempotencyKeyHeader},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := env.submit(tc.token, tc.body, tc.key)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			e := r.apiError(t)
			if e.Code != tc.code || e.Field != tc.field {
				t.Fatalf("error code %q field %q, want %q %q: %s", e.Code, e.Field, tc.code, tc.field, r.body)
			}
			if e.Message == "" {
				t.Fatal("empty message")
			}
		})
	}
	after := env.counts()
	for table, n := range before {
		if after[table] != n {
			t.Errorf("%s: %d rows before the rejected requests, %d after", table, n, after[table])
		}
	}
	if got := len(env.wf.startedJobs()); got != 1 {
		t.Errorf("%d workflows started, want 1 (only the accepted job)", got)
	}
}

// TestSubmitReportsEveryFieldError checks that a spec with several problems
// names the first in field order and lists all of them in details.
func TestSubmitReportsEveryFieldError(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	r := env.submit(tokAlice, with(func(s map[string]any) {
		s["queue"] = "gold"
		res(s)["gpus"] = -2
		res(s)["topology"] = "mesh"
	}), "")
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	e := r.apiError(t)
	var fields []string
	for _, d := range e.Details {
		fields = append(fields, d.Field)
	}
	if e.Field != "queue" || strings.Join(fields, ",") != "queue,resources.gpus,resources.topology" {
		t.Fatalf("field %q details %v", e.Field, fields)
	}
}

// TestOperatorMayProtectAndSubmitForAnotherProject checks the role rules of
// the spec: protected and project are allowed to operators.
func TestOperatorMayProtectAndSubmitForAnotherProject(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokOps, with(func(s map[string]any) {
		s["protected"] = true
		s["project"] = "vision"
		s["queue"] = "inference"
	}))
	if !j.Protected || j.Project != "vision" || j.Tier != "production" {
		t.Fatalf("job %+v", j)
	}
	// The submitter of that project sees it.
	if r := env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil); r.status != http.StatusOK {
		t.Fatalf("owner GET: %d %s", r.status, r.body)
	}
}

func TestValidateJobSpecRefusesJobsWithoutGPUs(t *testing.T) {
	t.Parallel()
	known := func(q string) bool { return q == "train" }
	for _, n := range []int{0, -1} {
		s := &JobSpec{Queue: "train", Resources: ResourceSpec{GPUs: n, Pool: "cpu"}, RunSeconds: 60}
		errs := ValidateJobSpec(s, known)
		if len(errs) != 1 || errs[0].Field != "resources.gpus" {
			t.Errorf("gpus %d: want one error on resources.gpus, got %v", n, errs)
		}
	}
}

func TestValidateJobSpecAcceptsGPUShareAndProcess(t *testing.T) {
	t.Parallel()
	known := func(q string) bool { return q == "train" }
	share := &JobSpec{Queue: "train", Resources: ResourceSpec{GPUs: 1, GPUMilli: 250, Pool: "t4"}, RunSeconds: 60}
	process := &JobSpec{Queue: "train", Resources: ResourceSpec{GPUs: 1, Pool: "cpu"}, Command: []string{"sleep", "1"}}
	for _, s := range []*JobSpec{share, process} {
		if errs := ValidateJobSpec(s, known); errs != nil {
			t.Errorf("%+v: %v", s, errs)
		}
	}
}

// TestSubmitSetsRecoveryProfile checks the job's recovery profile: the
// declared name under the job's project, else the base name of the
// command's first word, else "simulated"; and the declared total steps.
func TestSubmitSetsRecoveryProfile(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	declared := env.mustSubmit(tokAlice, with(func(s map[string]any) {
		s["command"] = []string{"/opt/venv/bin/python", "train.py"}
		s["recovery"] = map[string]any{"checkpointable": true, "profile": "resnet", "total_steps": 9000}
	}))
	if r := declared.Recovery; r.Profile != "vision/resnet" || r.TotalSteps != 9000 {
		t.Errorf("declared: recovery %+v, want profile vision/resnet and 9000 steps", r)
	}
	byCommand := env.mustSubmit(tokAlice, with(func(s map[string]any) { s["command"] = []string{"/opt/venv/bin/python", "train.py"} }))
	if p := byCommand.Recovery.Profile; p != "vision/python" {
		t.Errorf("by command: profile %q, want vision/python", p)
	}
	if p := env.mustSubmit(tokAlice, validSpec()).Recovery.Profile; p != "vision/simulated" {
		t.Errorf("simulated: profile %q, want vision/simulated", p)
	}
}
