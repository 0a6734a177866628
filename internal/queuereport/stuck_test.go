package queuereport

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestNoMatchingCapacityIsStuckNotStarving: a job still waiting with
// no_matching_capacity at the report end passes releases like a starving job,
// but waiting will not help it: it carries no signal and is listed as stuck
// with its owner and the action. A job that waited in that reason earlier and
// now waits for GPUs is starving as before.
func TestNoMatchingCapacityIsStuckNotStarving(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("spec", 0, func(j *Job) { j.Project = "vision" }),
			testJob("busy", 0),
			testJob("fixed", 0),
		},
		WaitEvents: []WaitEvent{
			{JobID: "spec", Reason: vocab.ReasonNotYetEvaluated, Start: at(0), End: atp(1)},
			{JobID: "spec", Reason: vocab.ReasonNoMatchingCapacity, Start: at(1)},
			{JobID: "busy", Reason: vocab.ReasonCapacityBusy, Start: at(0)},
			{JobID: "fixed", Reason: vocab.ReasonNoMatchingCapacity, Start: at(0), End: atp(30)},
			{JobID: "fixed", Reason: vocab.ReasonCapacityBusy, Start: at(30)},
		},
		Releases: []Release{{At: at(40), Pool: "p"}, {At: at(60), Pool: "p"}},
	}
	r := mustCompute(t, in, window(0, 100, 100, nil))
	s := starvingByID(r)
	if _, ok := s["spec"]; ok || r.Total.StarvingJobs != 2 || s["busy"].Releases != 2 || s["fixed"].Releases != 2 {
		t.Errorf("starving %v (total %d); want busy and fixed with 2 releases each, not spec", r.Starving, r.Total.StarvingJobs)
	}
	if r.Total.StuckJobs != 1 || len(r.Stuck) != 1 {
		t.Fatalf("stuck %+v (total %d), want spec alone", r.Stuck, r.Total.StuckJobs)
	}
	got := r.Stuck[0]
	if got.JobID != "spec" || got.Project != "vision" || got.Reason != string(vocab.ReasonNoMatchingCapacity) ||
		got.Action != vocab.ReasonNoMatchingCapacity.NextAction() || !got.WaitStart.Equal(at(0)) || got.WaitS != 100 ||
		got.Pool != "p" || got.Queue != "q" || got.Tier != "standard" {
		t.Errorf("stuck job %+v", got)
	}
	if g := findGroup(t, r, map[string]string{"queue": "q", "tier": "standard", "job_type": "train", "pool": "p"}); g.StuckJobs != 1 {
		t.Errorf("group stuck_jobs %d, want 1", g.StuckJobs)
	}
	var buf bytes.Buffer
	if err := RenderReport(&buf, r); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	i := strings.Index(text, "Stuck: needs action (1 listed of 1)")
	if i < 0 || !strings.Contains(text[i:], "spec") || !strings.Contains(text[i:], "vision") ||
		!strings.Contains(text[i:], vocab.ReasonNoMatchingCapacity.NextAction()) {
		t.Errorf("text report lacks the stuck job with owner and action:\n%s", text)
	}
	// Placed before the report end: no longer stuck.
	in.Jobs[0].FirstStart = atp(80)
	in.Runs = []Run{{JobID: "spec", Start: at(80), GPUMilli: 1000}}
	in.WaitEvents[1].End = atp(80)
	if r := mustCompute(t, in, window(0, 100, 100, nil)); len(r.Stuck) != 0 || r.Total.StuckJobs != 0 {
		t.Errorf("a job that started is listed stuck: %+v", r.Stuck)
	}
}
