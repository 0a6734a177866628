package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/queuereport"
)

// GovernanceMeasured lists the experiment.Governance fields (by their JSON
// names, the experiment metric names) that GovernanceMetrics measures from
// the stored records: all of them.
var GovernanceMeasured = []string{
	"preemptions", "effective_run_loss_gpu_s", "recompute_gpu_s", "resumes_verified", "resumes_failed",
	"resume_success_rate", "reclaims", "false_reclaims", "starts", "start_failures", "start_success_rate",
	"gpu_release_time_s", "cancel_rate", "service_share_delivered",
}

// NodeFailureDetailPrefix starts the detail of a run that no node agent took
// (workflows' supervise, Slurm's NODE_FAIL): the run row exists, but the run
// never started on a node. GovernanceMetrics counts such runs as start
// failures, not starts.
const NodeFailureDetailPrefix = "node failure:"

// governanceSQL measures experiment.Governance over [$1, $2) for the pools
// $3 (all when empty) and, for the delivered share, the watched queues $4
// (all when empty). Every event counted happened before $2, the end of the
// window's observed part: a window is what had been recorded by its end,
// whenever it is read. A job's pool is the pool of the allocation the event
// is about (preemptions, runs, placements) or the reclaim's pool; for the
// cancel rate, a job is of the pools when its request names one of them or
// one of its allocations was in one.
const governanceSQL = `
WITH pr AS (
	SELECT p.state, p.notified_at, p.released_at, p.finished_at, p.effective_loss_gpu_s, p.recompute_s,
		p.resumed_correctly, p.resume_verified,
		coalesce(p.gpus, (SELECT coalesce(sum(m), 0) / 1000.0 FROM unnest(a.gpu_milli) AS m)) AS gpus
	FROM preemptions p JOIN allocations a ON a.id = p.allocation_id
	WHERE p.state <> 'observed' AND p.started_at >= $1 AND p.started_at < $2
		AND (cardinality($3::text[]) = 0 OR a.pool = ANY($3))
), done AS (
	SELECT * FROM pr WHERE finished_at < $2
), alive AS (
	SELECT id, queue, state, submit_time, ended_at, coalesce(request->>'pool', '') AS req_pool
	FROM jobs WHERE report_job_span(submit_time, ended_at) && tstzrange($1, $2, '[)')
), rs AS (
	SELECT r.started_at, r.ended_at, al.queue,
		coalesce(r.outcome = 'failed' AND r.detail LIKE $5 || '%' AND r.ended_at < $2, false) AS node_failed,
		(SELECT coalesce(sum(m), 0) FROM unnest(a.gpu_milli) AS m) AS milli
	FROM runs r JOIN alive al ON al.id = r.job_id JOIN allocations a ON a.id = r.allocation_id
	WHERE (cardinality($3::text[]) = 0 OR a.pool = ANY($3))
), unrun AS (
	SELECT a.id FROM allocations a JOIN alive al ON al.id = a.job_id
	WHERE a.run_id IS NULL AND a.granted_at >= $1 AND a.granted_at < $2 AND a.released_at < $2
		AND (cardinality($3::text[]) = 0 OR a.pool = ANY($3))
		AND NOT EXISTS (SELECT 1 FROM preemptions p WHERE p.allocation_id = a.id AND p.state <> 'observed')
		AND NOT EXISTS (SELECT 1 FROM reclaims rc WHERE rc.allocation_id = a.id)
		AND NOT (al.state = 'cancelled' AND al.ended_at <= a.released_at)
), delivered AS (
	SELECT queue, milli / 1000.0 * greatest(0, extract(epoch FROM
		least(coalesce(ended_at, $2), $2) - greatest(started_at, $1)))::float8 AS gpu_s
	FROM rs WHERE started_at < $2 AND (ended_at IS NULL OR ended_at > $1) AND NOT node_failed
), submitted AS (
	SELECT al.state, al.ended_at FROM alive al
	WHERE al.submit_time >= $1 AND al.submit_time < $2
		AND (cardinality($3::text[]) = 0 OR al.req_pool = ANY($3)
			OR EXISTS (SELECT 1 FROM allocations a WHERE a.job_id = al.id AND a.pool = ANY($3)))
)
SELECT
	(SELECT count(*) FROM pr)::int8,
	(SELECT coalesce(sum(effective_loss_gpu_s), 0) FROM done)::float8,
	(SELECT coalesce(sum(gpus * recompute_s), 0) FROM done WHERE recompute_s IS NOT NULL)::float8,
	(SELECT count(*) FROM done WHERE resume_verified)::int8,
	(SELECT count(*) FROM done WHERE NOT resume_verified OR (resume_verified IS NULL AND NOT resumed_correctly))::int8,
	(SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM released_at - notified_at)::float8)
		FROM pr WHERE notified_at IS NOT NULL AND released_at < $2),
	(SELECT count(*) FROM reclaims WHERE state = 'released' AND released_at >= $1 AND released_at < $2
		AND (cardinality($3::text[]) = 0 OR pool = ANY($3)))::int8,
	(SELECT count(*) FROM reclaims WHERE ` + falseReclaimInWindow + `
		AND (cardinality($3::text[]) = 0 OR pool = ANY($3)))::int8,
	(SELECT count(*) FROM rs WHERE started_at >= $1 AND started_at < $2)::int8,
	(SELECT count(*) FROM rs WHERE started_at >= $1 AND started_at < $2 AND node_failed)::int8,
	(SELECT count(*) FROM unrun)::int8,
	(SELECT coalesce(sum(gpu_s), 0) FROM delivered)::float8,
	(SELECT coalesce(sum(gpu_s), 0) FROM delivered WHERE cardinality($4::text[]) = 0 OR queue = ANY($4))::float8,
	(SELECT count(*) FROM submitted)::int8,
	(SELECT count(*) FROM submitted WHERE state = 'cancelled' AND ended_at < $2)::int8`

// GovernanceMetrics measures experiment.Governance over window for jobs of
// scope.Pools (all pools when empty) and, for ServiceShareDelivered, the
// watched scope.Queues (every queue when empty, which makes the share 1),
// as the records stood at now. Only what happened before end = min(window.To,
// now) counts, so a window reads the same whenever it is measured after it
// ended. What each field counts (docs/design.md §4, "Governance metrics"):
//
//   - Preemptions: preemptions carried out (in progress, released or aborted;
//     not an observe-stage pool's "would preempt" records) started in the
//     window on an allocation of the pools.
//   - EffectiveRunLossGPUSeconds: the stored effective_loss_gpu_s
//     (accounting.EffectiveRunLoss, written by FinishPreemption) of those
//     preemptions finished before end; RecomputeGPUSeconds its recompute
//     part, the victim's GPUs × recompute_s, where recompute was measured.
//   - ResumesVerified / ResumesFailed: those finished preemptions whose
//     victim's next run was verified (resume_verified: started at the saved
//     step and seen past it) / was not (another step, or no progress after
//     a correct start); a resume not observed — no next run, one cancelled
//     or preempted before it progressed (resume_verified NULL), or a
//     correct start recorded before resume_verified existed — is neither;
//     ResumeSuccessRate verified ÷ (verified + failed), nil when both are 0.
//   - Reclaims: reclaims released (state released) in the window in the
//     pools. FalseReclaims: reclaims the owner disputed — kept before the
//     release, or disputed after it within the dispute window — with the
//     dispute in the window and not rejected by an operator, as
//     Store.FalseReclaims counts them.
//   - Starts: runs started in the window on an allocation of the pools,
//     except those that no node agent took (outcome failed with a detail
//     beginning NodeFailureDetailPrefix, ended before end). StartFailures:
//     those runs, plus allocations granted in the window and released
//     before end without a run that were not released by a preemption, a
//     reclaim, or their job's cancellation (the job cancelled no later than
//     the release). StartSuccessRate 1 − failures ÷ (starts + failures), nil
//     when both are 0.
//   - GPUReleaseTimeSeconds: the median of released_at − notified_at over
//     the window's preemptions released before end; nil when none.
//   - CancelRate: of the jobs submitted in the window of the pools, those
//     cancelled before end ÷ all of them; nil when none was submitted.
//   - ServiceShareDelivered: GPU-seconds of runs of the watched queues'
//     jobs in the window (clipped to [window.From, end), the allocation's
//     granted milli-GPU; a node failure delivered nothing) ÷ GPU-seconds of
//     every such run in the pools; nil when no GPU-second was delivered.
//
// Measured is GovernanceMeasured. Errors: the window rules of
// LoadReportInput (empty or inverted, longer than MaxReportWindow, now
// before window.From; ErrInvalid naming the field), or database errors,
// wrapped with "governance metrics".
func (s *Store) GovernanceMetrics(ctx context.Context, w queuereport.Window, scope experiment.Scope, now time.Time) (experiment.Governance, error) {
	var g experiment.Governance
	if err := checkReportWindow(w, now); err != nil {
		return g, fmt.Errorf("store: governance metrics: %w", err)
	}
	pools, queues := scope.Pools, scope.Queues
	if pools == nil {
		pools = []string{} // nil encodes as SQL NULL, and cardinality(NULL) is NULL, not 0
	}
	if queues == nil {
		queues = []string{}
	}
	var preemptions, verified, failed, reclaims, falseReclaims, runStarts, nodeFailed, unrun, submitted, cancelled int64
	var delivered, watched float64
	var releaseMedian *float64
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, governanceSQL, w.From, reportEnd(w, now), pools, queues, NodeFailureDetailPrefix).Scan(
				&preemptions, &g.EffectiveRunLossGPUSeconds, &g.RecomputeGPUSeconds, &verified, &failed, &releaseMedian,
				&reclaims, &falseReclaims, &runStarts, &nodeFailed, &unrun, &delivered, &watched, &submitted, &cancelled)
		})
	if err != nil {
		return experiment.Governance{}, fmt.Errorf("store: governance metrics: %w", err)
	}
	g.Preemptions, g.ResumesVerified, g.ResumesFailed = int(preemptions), int(verified), int(failed)
	g.Reclaims, g.FalseReclaims = int(reclaims), int(falseReclaims)
	g.Starts, g.StartFailures = int(runStarts-nodeFailed), int(nodeFailed+unrun)
	g.GPUReleaseTimeSeconds = releaseMedian
	if n := g.ResumesVerified + g.ResumesFailed; n > 0 {
		g.ResumeSuccessRate = ratio(float64(g.ResumesVerified), float64(n))
	}
	if n := g.Starts + g.StartFailures; n > 0 {
		g.StartSuccessRate = ratio(float64(g.Starts), float64(n))
	}
	if submitted > 0 {
		g.CancelRate = ratio(float64(cancelled), float64(submitted))
	}
	if delivered > 0 {
		g.ServiceShareDelivered = ratio(watched, delivered)
	}
	g.Measured = append([]string(nil), GovernanceMeasured...)
	return g, nil
}

// ratio returns a pointer to a ÷ b.
func ratio(a, b float64) *float64 {
	r := a / b
	return &r
}
