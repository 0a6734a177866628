// Package process runs one run of a job as a real local process on a GPU node,
// as Slurm's slurmstepd or a kubelet would: it gives the job its allocated GPUs
// and a checkpoint directory, tails the job's status file for progress and
// checkpoints, stops it gracefully (SIGTERM to its process group, a grace
// period, then SIGKILL) on preemption or cancel, and reports how it ended.
//
// The job protocol below is also written up in docs/job-protocol.md; keep the
// two in step.
//
// # Environment
//
// The job's process starts in its own process group with these variables, on
// top of a few inherited from the node agent (Executor.InheritEnv) and the
// ones in Spec.Env (which may not redefine them):
//
//	CUDA_VISIBLE_DEVICES   comma-joined NVML UUIDs of the allocated GPUs ("" = no GPU)
//	GPUGOV_JOB_ID          the job's ID
//	GPUGOV_RUN_ID          this run's ID
//	GPUGOV_CHECKPOINT_DIR  <root>/<job>/checkpoints, mode 0700, kept across runs of the job
//	GPUGOV_RESUME_FROM     location of the checkpoint to resume from; "" for a fresh start
//	GPUGOV_RESUME_STEP     step of that checkpoint; "0" for a fresh start
//	GPUGOV_STATUS_FILE     <root>/<job>/runs/<run>/status.jsonl, where the job reports
//
// Stdout and stderr share one pipe; the last Spec.OutputTailBytes bytes are
// kept for the Outcome. Stdin is /dev/null. The working directory defaults to
// <root>/<job>/runs/<run>.
//
// # Status file
//
// The job appends JSON lines to GPUGOV_STATUS_FILE, each written with one
// write call and ended by "\n". The executor creates the file empty before
// the job starts; the job must not truncate, replace or rename it.
//
//	{"type":"started","from_step":N}                  once, first: the step the job really resumed at (0 when fresh)
//	{"type":"progress","step":N}                      the last step completed
//	{"type":"checkpoint","step":N,"location":"..."}   a checkpoint of step N is complete and readable
//
// Steps are integers ≥ 0. Within a run, progress steps never decrease,
// checkpoint steps never decrease, and neither is below the started
// from_step. A checkpoint location containing "://" is a remote URI and is
// taken as is; any other location is a file or directory path (relative paths
// are relative to GPUGOV_CHECKPOINT_DIR) that must exist when the line is read,
// so the job writes the checkpoint completely (and renames it into place)
// before it writes the line. Unknown fields are ignored; blank lines are
// skipped. Any other line is a bad line: it is counted and sampled in the
// Outcome and logged, and never stops the run.
//
// The executor reads the file every Executor.PollInterval and reports each
// change as a Progress. The started line is what verifies a resume: a run
// given ResumeFrom at step S that reports from_step S resumed where it should.
//
// # Stopping
//
// On Process.Stop, or when the context given to Start or Run ends, the
// executor sends SIGTERM to the job's process group. The job should write a
// final checkpoint, report it, and exit 0. If the leader has not exited after
// the grace period, the group gets SIGKILL. When the leader exits, for any
// reason, whatever is left of its group is killed, so no child keeps a GPU.
// A descendant that leaves the group (setsid, setpgid) escapes this.
//
// # Use from a Temporal activity
//
// Run blocks until the process ends, so an activity can be
//
//	out, err := ex.Run(ctx, spec, func(p process.Progress) { activity.RecordHeartbeat(ctx, p) })
//
// Temporal delivers a cancellation (a preemption notice) to ctx when a
// heartbeat learns of it; Run calls the callback at least every
// Executor.HeartbeatInterval, even without news, so that it does; the SDK
// sends heartbeats in batches, which a node agent's worker caps at
// NoticeInterval (WorkerOptions), so the notice arrives within about that
// time. Run ends
// the process with StopPreemption on ctx cancellation, StopDeadline when ctx
// times out, or the StopReason given as the context's cause
// (context.WithCancelCause). A retried attempt of the same run kills the
// process group of an earlier attempt still alive (its node agent crashed)
// before it starts, so one run never holds its GPUs twice.
package process
