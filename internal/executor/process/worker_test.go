package process

import (
	"testing"
	"time"
)

// TestWorkerOptions: a run worker's stop timeout covers the jobs' grace
// period plus the margin, and heartbeats (which carry cancellations) are
// sent at least every NoticeInterval whatever the heartbeat timeout.
func TestWorkerOptions(t *testing.T) {
	for _, tc := range []struct{ grace, stop time.Duration }{
		{10 * time.Second, 10*time.Second + WorkerStopMargin},
		{0, DefaultGracePeriod + WorkerStopMargin},
	} {
		o := WorkerOptions(tc.grace)
		if o.WorkerStopTimeout != tc.stop || o.MaxHeartbeatThrottleInterval != NoticeInterval {
			t.Errorf("WorkerOptions(%s) = stop %s, throttle %s; want %s, %s",
				tc.grace, o.WorkerStopTimeout, o.MaxHeartbeatThrottleInterval, tc.stop, NoticeInterval)
		}
	}
}
