package replay

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/api"
)

// The governance section counts in English: it printed "1 jobs waited",
// "1 of replayed jobs" and "1 GPUs".
func TestGovernanceCountsInWords(t *testing.T) {
	res := &Result{Governance: &Governance{Pool: "p", Stage: "trial", ReservedJobs: 1, ReservedSeconds: 60,
		ReservationHolds: []ReservationRow{{JobID: "j-1", Pod: "pod-1", Tier: "standard", GPUs: 1, Waiters: 1, Seconds: 60}},
		Preemptions:      []api.Preemption{{ID: "p-1", VictimJobID: "j-2", ForJobID: "j-1", GPUs: 1, State: "in_progress"}}}}
	res.Report.Total.JobsOverObjective = 1
	var buf bytes.Buffer
	res.renderGovernance(&errWriter{w: &buf}, "")
	out := buf.String()
	for _, want := range []string{"Reservations: 1 job waited 1m", "(standard, 1 GPU, job j-1): 1 job waited", "Preemptions: 1 preemption of replayed jobs",
		"    1 job waited past their queue's objective"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, bad := range []string{"1 jobs", "1 GPUs", "1 of replayed"} {
		if strings.Contains(out, bad) {
			t.Errorf("%q in:\n%s", bad, out)
		}
	}
}
