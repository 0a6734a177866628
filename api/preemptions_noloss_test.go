package api_test

import (
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
)

// A preemption whose victim ended first, that was aborted before the release
// or only proposed has no loss to measure, and says so; one measured, or in
// progress, or aborted after its release, does not.
func TestPreemptionNoLossReason(t *testing.T) {
	loss, released := 12.5, time.Now()
	for _, c := range []struct {
		p    api.Preemption
		want bool
	}{
		{api.Preemption{Outcome: "victim_ended"}, true},
		{api.Preemption{Outcome: "aborted_no_checkpoint"}, true},
		{api.Preemption{Outcome: "aborted_ineligible"}, true},
		{api.Preemption{Outcome: "aborted_no_checkpoint", ReleasedAt: &released}, false},
		{api.Preemption{Outcome: "would_preempt"}, true},
		{api.Preemption{Outcome: "completed", EffectiveLossGPUSeconds: &loss}, false},
		{api.Preemption{Outcome: "victim_ended", EffectiveLossGPUSeconds: &loss}, false},
		{api.Preemption{}, false}, // in progress
	} {
		if got := c.p.NoLossReason() != ""; got != c.want {
			t.Errorf("%+v: no-loss reason %q, want one: %v", c.p.Outcome, c.p.NoLossReason(), c.want)
		}
	}
}
