package service

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/telemetry"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// GovernanceActor is the audit actor of what the governance file sets: pool
// stages, low-risk queues and the governance_config_change entries.
const GovernanceActor = "governance-config"

// ActionGovernanceConfigChange is the audit action of a governance file
// change the service applied; its subject is the file's path.
const ActionGovernanceConfigChange = "governance_config_change"

// reportWindow is the span of history behind the queue gauges: the queue
// service report over the last 24 hours.
const reportWindow = 24 * time.Hour

// watchGovernance loads the governance file into a watcher when one is
// configured; a file that does not load fails the start with Load's error,
// which names the file (and the line of each invalid field).
func (s *Service) watchGovernance() error {
	if s.cfg.GovernanceFile == "" {
		return nil
	}
	w, err := governance.NewWatcher(s.cfg.GovernanceFile)
	if err != nil {
		return fmt.Errorf("service: governance file: %w", err)
	}
	w.OnChange = s.onGovernanceChange
	w.OnError = func(err error) {
		s.cfg.Logger.Warn("governance file", "file", w.Path, "err", err)
	}
	s.governance = w
	return nil
}

// governanceConfig is the activities' source of the configuration in force:
// the watcher's, or nil (governance.Default) without a governance file.
func (s *Service) governanceConfig() func() *governance.Config {
	if s.governance == nil {
		return nil
	}
	return s.governance.Current
}

// applyGovernance writes the governance file's pool stages and low-risk
// queues to the store. It runs after seed, because UpsertInventory rewrites
// pools.stage. Without a file nothing is written: governance.Default sets no
// stage, and applying its empty low-risk list would clear the low-risk flag
// the seeded queues carry.
func (s *Service) applyGovernance(ctx context.Context) error {
	if s.governance == nil {
		return nil
	}
	_, _, err := s.applyGovernanceConfig(ctx, s.governance.Current(), "governance file "+s.governance.Path+" loaded at start")
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	return nil
}

// applyGovernanceConfig applies c through governance.Apply and logs what changed.
func (s *Service) applyGovernanceConfig(ctx context.Context, c *governance.Config, reason string) (pools, queues []string, err error) {
	pools, queues, err = governance.Apply(ctx, s.store, c, GovernanceActor, reason)
	if err != nil {
		return nil, nil, err
	}
	if len(pools)+len(queues) > 0 {
		s.cfg.Logger.Info("governance configuration applied", "pools_changed", pools, "low_risk_changed", queues)
	}
	return pools, queues, nil
}

// onGovernanceChange applies a changed governance file and audits the change
// with what it set and what it changed. The watcher passes its error to
// OnError (logged); the new configuration stays in force for the activities.
func (s *Service) onGovernanceChange(ctx context.Context, ch governance.Change) error {
	reason := "governance file " + ch.Path + " changed"
	pools, queues, err := s.applyGovernanceConfig(ctx, ch.New, reason)
	if err != nil {
		return err
	}
	return s.store.AppendAudit(ctx, store.AuditEntry{At: ch.At, Actor: GovernanceActor,
		Action: ActionGovernanceConfigChange, Subject: ch.Path, Reason: reason,
		Evidence: map[string]any{
			"pool_stages": ch.New.Stages(), "low_risk_queues": ch.New.LowRiskQueues,
			"reclaim_enabled": ch.New.Reclaim.Enabled, "pools_changed": pools, "low_risk_changed": queues,
		}})
}

// startReclaimScan starts the ReclaimScanWorkflow (ID
// temporalx.ReclaimScanWorkflowID), or keeps the one already running. Each
// scan reads the governance configuration in force, so it runs even when
// the reclaim scan is disabled (its scans then record nothing).
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

// reportLoop updates the queue gauges at once and then every ReportInterval
// until ctx ends; failures are logged and retried at the next pass.
func (s *Service) reportLoop(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.ReportInterval)
	defer t.Stop()
	for {
		if err := s.updateQueueGauges(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("queue gauges not updated", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// updateQueueGauges sets gpugov_queue_longest_wait_seconds and
// gpugov_queue_starving_jobs from the pending jobs now and the queue service
// report of the last reportWindow (store.QueueReport), grouped by queue and listing every
// starving job (telemetry.QueueGauges counts those still waiting). It reads
// the plain store, not the instrumented one, so that the scheduling cycle
// metrics see only the scheduler's snapshots.
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
	return nil
}
