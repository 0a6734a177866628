package process

import (
	"time"

	"go.temporal.io/sdk/worker"
)

// Timing of a node agent's run worker.
const (
	// NoticeInterval bounds how long a job's process runs on after its
	// workflow cancelled the run activity (a preemption or cancel notice)
	// before it gets SIGTERM. Temporal tells an activity of its cancellation
	// only in the answer to a heartbeat, and the SDK batches heartbeats for
	// 0.8 × the heartbeat timeout unless told otherwise: 24 s under
	// JobWorkflow's 30 s, all of it counted in the preemption's save time and
	// so in the victim's effective run loss. The agent's run workers send a
	// pending heartbeat at least this often (WorkerOptions) and its executor
	// offers one at least this often (Executor.HeartbeatInterval), at the
	// price of one heartbeat call to Temporal per running job per interval.
	NoticeInterval = 5 * time.Second
	// WorkerStopMargin is added to the grace period for a run worker's stop
	// timeout: time to record the job's final checkpoint and answer Temporal.
	WorkerStopMargin = 15 * time.Second
)

// WorkerOptions are the Temporal worker options of a node agent's run worker
// (one per node, on temporalx.NodeTaskQueue) whose jobs get grace between
// SIGTERM and SIGKILL (≤ 0 means DefaultGracePeriod): a stop timeout that
// lets running jobs save on an agent shutdown, and heartbeats sent at least
// every NoticeInterval so that notices arrive quickly.
func WorkerOptions(grace time.Duration) worker.Options {
	return worker.Options{
		WorkerStopTimeout:            orDefault(grace, DefaultGracePeriod) + WorkerStopMargin,
		MaxHeartbeatThrottleInterval: NoticeInterval,
	}
}
