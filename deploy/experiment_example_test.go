package deploy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestExperimentExampleIsOneVariable reads deploy/gpugov/experiment-aging.yaml
// as `gpugov experiment create -f` does (experiment.ParseSpecFile, which reads
// its candidate.file, deploy/gpugov/policy-aging-candidate.yaml) and checks
// what the API will check against a service running deploy/gpugov/policy.yaml
// (`GPUGOV_POLICY_FILE=deploy/gpugov/policy.yaml make run`, as README says):
// the spec is valid at serve's default 5 s cycle, the candidate loads, and it
// differs from policy.yaml in the aging group only (the one-variable rule,
// no override), in the two fields the file's header names.
func TestExperimentExampleIsOneVariable(t *testing.T) {
	spec, err := experiment.ParseSpecFile("gpugov/experiment-aging.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if errs := spec.Validate(5 * time.Second); len(errs) > 0 {
		t.Fatalf("the example does not validate: %v", errs)
	}
	if spec.Override != nil || spec.Candidate.Policy == "" || spec.Candidate.File != "" {
		t.Fatalf("candidate %+v override %+v: want the candidate file's text and no override", spec.Candidate, spec.Override)
	}
	if !slices.Equal(spec.Scope.Pools, []string{alibaba.DefaultPoolName}) {
		t.Errorf("scope.pools %v, want [%s], the pool `make run` imports the trace's nodes into", spec.Scope.Pools, alibaba.DefaultPoolName)
	}
	baseline, err := policy.Load("gpugov/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	candidate, err := policy.Parse("gpugov/policy-aging-candidate.yaml", []byte(spec.Candidate.Policy))
	if err != nil {
		t.Fatal(err)
	}
	groups, ferr := experiment.CheckOneVariable(spec, baseline, candidate)
	if ferr != nil || !slices.Equal(groups, []vocab.PolicyGroup{vocab.PolicyAging}) {
		t.Fatalf("groups %v (%v), want [aging] only", groups, ferr)
	}
	var fields []string
	for _, g := range policy.Diff(baseline, candidate) {
		for _, c := range g.Changes {
			fields = append(fields, c.Field)
		}
	}
	want := []string{"aging.step_points", "queues[experiment].aging_cap_points", "queues[experiment].aging_ceiling_tier"}
	if !slices.Equal(fields, want) {
		t.Errorf("diff %v, want exactly %v", fields, want)
	}
}
