package activities

import (
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A retry without a heartbeat time of its own, after a heartbeat timeout,
// reads the end of the timed-out attempt; other attempts without one read
// nothing (no evidence either way).
func TestLastHeartbeatOf(t *testing.T) {
	t.Parallel()
	hb := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	ended := hb.Add(30 * time.Second)
	timedOut := &failurepb.Failure{FailureInfo: &failurepb.Failure_TimeoutFailureInfo{
		TimeoutFailureInfo: &failurepb.TimeoutFailureInfo{TimeoutType: enumspb.TIMEOUT_TYPE_HEARTBEAT}}}
	cases := []struct {
		name string
		pa   *workflowpb.PendingActivityInfo
		want time.Time
		ok   bool
	}{
		{"heartbeated", &workflowpb.PendingActivityInfo{Attempt: 1, LastHeartbeatTime: timestamppb.New(hb)}, hb, true},
		{"retry after heartbeat timeout", &workflowpb.PendingActivityInfo{Attempt: 3, LastFailure: timedOut,
			LastAttemptCompleteTime: timestamppb.New(ended)}, ended, true},
		{"retry after another failure", &workflowpb.PendingActivityInfo{Attempt: 2,
			LastFailure: &failurepb.Failure{Message: "boom"}, LastAttemptCompleteTime: timestamppb.New(ended)}, time.Time{}, false},
		{"first attempt, no heartbeat yet", &workflowpb.PendingActivityInfo{Attempt: 1}, time.Time{}, false},
	}
	for _, c := range cases {
		got, ok := lastHeartbeatOf(c.pa)
		if ok != c.ok || !got.Equal(c.want) {
			t.Errorf("%s: got %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
