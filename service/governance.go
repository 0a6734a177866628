package service

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/telemetry"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/workflows"
)

// reportWindow is the span of history behind the queue gauges: the queue
// service report over the last 24 hours.
const reportWindow = 24 * time.Hour

// startReclaimScan starts the ReclaimScanWorkflow (ID
// temporalx.ReclaimScanWorkflowID), or keeps the one already running. Each
// scan reads the policy in force, so it runs even when the reclaim scan is
// disabled (its scans then record nothing).
func (s *Service) startReclaimScan(ctx context.Context) error {
	opts := client.StartWorkflowOptions{
		ID: temporalx.ReclaimScanWorkflowID, TaskQueue: temporalx.ServiceTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
	if _, err := s.temporal.ExecuteWorkflow(ctx, opts, workflows.ReclaimScanWorkflowName, &workflows.ReclaimScanInput{}); err != nil {
		return fmt.Errorf("service: start reclaim scan: %w", err)
	}
	return nil
}

// startNotificationDispatch starts the notification dispatcher
// (workflows.NotificationDispatchWorkflow), or keeps the one running.
func (s *Service) startNotificationDispatch(ctx context.Context) error {
	opts := client.StartWorkflowOptions{
		ID: temporalx.NotificationDispatchWorkflowID, TaskQueue: temporalx.ServiceTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
	if _, err := s.temporal.ExecuteWorkflow(ctx, opts, workflows.NotificationDispatchWorkflowName, &workflows.NotificationDispatchInput{}); err != nil {
		return fmt.Errorf("service: start notification dispatch: %w", err)
	}
	return nil
}

// waitingLoop sets the gpugov_waiting_jobs gauge from the database at once,
// after every cycle this process applies, and every WaitingGaugeInterval
// (the cycles other replicas ran) until ctx ends; a failure is logged and
// retried at the next pass.
func (s *Service) waitingLoop(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.WaitingGaugeInterval)
	defer t.Stop()
	for {
		if err := s.instr.refreshWaiting(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("waiting jobs gauge not updated", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.instr.waitingStale:
		}
	}
}

// reportLoop updates the queue gauges and the pool readiness gauges at
// once and then every ReportInterval until ctx ends; failures are logged
// and retried at the next pass.
func (s *Service) reportLoop(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.ReportInterval)
	defer t.Stop()
	for {
		if err := s.updateQueueGauges(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("queue gauges not updated", "err", err)
		}
		if err := s.updateReadinessGauges(ctx, time.Now()); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("pool readiness gauges not updated", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// updateQueueGauges sets gpugov_queue_longest_wait_seconds,
// gpugov_queue_starving_jobs and gpugov_queue_wait_objective_seconds from the
// queues and pending jobs now and the queue service
// report of the last reportWindow (store.QueueReport), grouped by queue and listing every
// starving job (telemetry.QueueGauges counts those still waiting). It reads
// the plain store, not the instrumented one, so that the scheduling cycle
// metrics see only the scheduler's snapshots. It also primes the alerting
// rules' per-pool counters at 0 for every pool
// (telemetry.GovernanceMetrics.PrimePools).
func (s *Service) updateQueueGauges(ctx context.Context) error {
	now := time.Now()
	snap, err := s.store.LoadSnapshot(ctx, now)
	if err != nil {
		return err
	}
	window := queuereport.Window{From: now.Add(-reportWindow), To: now}
	// QueueReport merges the stored hourly summaries (and stores those that
	// are missing), so the gauges cost a fraction of recomputing the window
	// from its records and keep the summaries of recent hours warm for the
	// API's reports.
	rep, err := s.store.QueueReport(ctx, queuereport.Options{Window: window, Now: now,
		GroupBy: []string{queuereport.KeyQueue}, StarvingLimit: queuereport.NoStarvingLimit}, "")
	if err != nil {
		return err
	}
	s.tel.Metrics.SetQueueGauges(telemetry.QueueGauges(snap.Queues, snap.Pending, &rep, now))
	pools := make([]string, len(snap.Pools))
	for i, p := range snap.Pools {
		pools[i] = p.Name
	}
	s.govMetrics.PrimePools(ctx, pools)
	return nil
}

// updateReadinessGauges sets gpugov_pool_ready and
// gpugov_pool_readiness_check (telemetry.GovernanceMetrics.SetPoolReadiness)
// from every pool's readiness at now under the policy in force
// (store.PoolsReadiness, docs/design.md §4 "Pool readiness"), which the
// readiness-lost alert watches.
func (s *Service) updateReadinessGauges(ctx context.Context, now time.Time) error {
	rs, err := s.store.PoolsReadiness(ctx, s.currentPolicy(), now)
	if err != nil {
		return err
	}
	out := make(map[string]telemetry.PoolReadiness, len(rs))
	for pool, r := range rs {
		checks := make(map[string]bool, len(r.Checks))
		for _, c := range r.Checks {
			checks[string(c.Check)] = c.Passed
		}
		out[pool] = telemetry.PoolReadiness{Ready: r.Ready, Checks: checks}
	}
	s.govMetrics.SetPoolReadiness(out)
	return nil
}
