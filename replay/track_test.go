package replay

import (
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/vocab"
)

func liveJob(id string, state vocab.JobState, reason string, updated time.Time) api.Job {
	j := api.Job{ID: id, State: state, UpdatedAt: updated}
	if reason != "" {
		j.Explanation = &api.Explanation{Reason: reason}
	}
	return j
}

// TestTrackerSettles: the jobs settle only after dispatch, when every live
// job waits with a reason unchanged for the settle time, or none is left;
// a look that sees a job placed or running records its start once.
func TestTrackerSettles(t *testing.T) {
	tr := newTracker(2, 10*time.Second)
	for _, id := range []string{"j1", "j2"} {
		tr.submitted(&Submission{Key: id}, &api.Job{ID: id})
	}
	waiting := []api.Job{liveJob("j1", "waiting", "capacity_busy", t0), liveJob("j2", "placed", "", at(2))}
	tr.observe(waiting, at(3))
	if tr.isSettled() {
		t.Fatal("settled before dispatch ended")
	}
	if s := tr.byID["j2"].seenStart; s == nil || !s.Equal(at(2)) {
		t.Errorf("j2 start %v, want its updated_at while placed", s)
	}
	tr.markDispatched()
	both := []api.Job{liveJob("j1", "waiting", "capacity_busy", t0), liveJob("j2", "waiting", "no_matching_capacity", at(4))}
	tr.observe(both, at(5))
	tr.observe(both, at(14))
	if tr.isSettled() {
		t.Error("settled after 9 s unchanged, want 10 s")
	}
	tr.observe(both, at(15))
	if !tr.isSettled() {
		t.Error("not settled after 10 s unchanged")
	}
	changed := []api.Job{liveJob("j1", "waiting", "fragmented", at(16)), both[1]}
	tr.observe(changed, at(16))
	if tr.isSettled() {
		t.Error("settled right after a reason changed")
	}
	tr.observe([]api.Job{liveJob("j1", "waiting", "", at(16))}, at(40))
	if tr.isSettled() {
		t.Error("settled with a job waiting without a reason")
	}
	tr.observe(nil, at(41))
	if !tr.isSettled() {
		t.Error("not settled with no live job left")
	}
	if p := tr.progress(); p.submitted != 2 || p.ended != 2 {
		t.Errorf("progress %+v, want 2 submitted, 2 ended", p)
	}
	if s := tr.byID["j2"].seenStart; !s.Equal(at(2)) {
		t.Errorf("j2 start moved to %v", s)
	}
}
