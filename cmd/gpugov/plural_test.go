package main

import (
	"strings"

	"github.com/gpugov/gpugov/api"
	"testing"
)

// gpusText picks the noun by the GPU figure, whole or not, as plural.Count
// (internal/plural) does by a count.
func TestPlural(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{gpusText(1), "1 GPU"},
		{gpusText(0.5), "0.5 GPU"},
		{gpusText(2), "2 GPUs"},
		{gpusText(0), "0 GPUs"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// The audit list's footer counts its page in English: one entry is "1
// entry", not "1 entries".
func TestAuditFooterSingular(t *testing.T) {
	var b strings.Builder
	l := &api.AuditList{Entries: []api.AuditEntry{{Actor: "alice", Action: "hold", Subject: "j-1"}}, NextCursor: "c-1"}
	if err := printAudit(&b, l); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1 entry; older ones") {
		t.Errorf("footer: %q", b.String())
	}
}

// A request's GPUs are counted in English: it printed "16 GPU".
func TestDescribeResourcesCountsGPUs(t *testing.T) {
	for gpus, want := range map[int]string{1: "1 GPU, pool p", 16: "16 GPUs, pool p"} {
		if got := describeResources(api.ResourceSpec{GPUs: gpus, Pool: "p"}); got != want {
			t.Errorf("%d GPUs: %q, want %q", gpus, got, want)
		}
	}
}
