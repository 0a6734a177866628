package service

import (
	"context"
	"fmt"
	"time"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// The governance loop's drill pass (docs/design.md §5 "Resume drills"):
// every Config.DrillInterval it starts again the drills whose workflow
// never started (a start that failed after the drill was recorded), and,
// when the policy in force lets pools in the trial stage drill
// automatically (drills.auto_in_trial), starts the drills
// governance.ChooseDrills picks.

// unstartedDrillAge is how long a recorded drill may wait for its
// workflow's first step before the drill pass starts the workflow again.
const unstartedDrillAge = time.Minute

// drillLoop runs lockedDrillPass every DrillInterval until ctx ends,
// after putting the active policy version in force (refreshPolicy: a
// replica whose worker runs no scheduling cycle for a while still follows
// a switch within a pass, for the drill choice and its other readers of
// the policy in force); failures are logged and retried at the next pass.
func (s *Service) drillLoop(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.DrillInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.refreshPolicy(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("policy in force not refreshed", "err", err)
		}
		if _, err := s.lockedDrillPass(ctx, time.Now()); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("drill pass failed", "err", err)
		}
	}
}

// lockedDrillPass runs drillPass under the store's drill-pass lock
// (store.LockDrillPass), which one replica holds at a time: the choice
// reads the drills and preemptions in progress and the drills of the day,
// then records its own, and two replicas choosing at once would each
// drill a pool (or a job) the other was drilling (docs/design.md §10
// "Several replicas"). ran is false when another replica's pass held the
// lock: this pass is skipped, the other one does its work.
func (s *Service) lockedDrillPass(ctx context.Context, now time.Time) (ran bool, err error) {
	return s.store.TryWithLock(ctx, store.LockDrillPass, func(ctx context.Context) error {
		return s.drillPass(ctx, now)
	})
}

// startDrillWorkflow starts drill d's workflow: s.startDrill when set
// (tests), else workflows.Client.StartDrill.
func (s *Service) startDrillWorkflow(ctx context.Context, preemptionID, jobID, allocationID, runID string) error {
	if s.startDrill != nil {
		return s.startDrill(ctx, preemptionID, jobID, allocationID, runID)
	}
	return s.workflows.StartDrill(ctx, preemptionID, jobID, allocationID, runID)
}

// drillPass restarts unstarted drills and starts the automatic ones due
// at now. It returns the first error. Callers hold the drill-pass lock
// (lockedDrillPass).
func (s *Service) drillPass(ctx context.Context, now time.Time) error {
	late, err := s.store.UnstartedDrills(ctx, now.Add(-unstartedDrillAge))
	if err != nil {
		return err
	}
	for _, d := range late {
		if err := s.startDrillWorkflow(ctx, d.PreemptionID, d.JobID, d.AllocationID, d.RunID); err != nil {
			return err
		}
		s.cfg.Logger.Info("drill workflow started again", "drill", d.PreemptionID, "job", d.JobID)
	}
	choices, err := s.chooseDrills(ctx, s.currentPolicy(), now)
	if err != nil {
		return err
	}
	for _, c := range choices {
		d, err := s.store.OpenDrill(ctx, store.NewDrill{JobID: c.JobID, Actor: store.ActorGovernance, Reason: c.Reason, At: now})
		if err != nil {
			// The job moved on since the choice (ended, preempted): skip it.
			s.cfg.Logger.Info("automatic drill not started", "job", c.JobID, "err", err)
			continue
		}
		if err := s.startDrillWorkflow(ctx, d.PreemptionID, d.JobID, d.AllocationID, d.RunID); err != nil {
			return fmt.Errorf("start drill %s: %w", d.PreemptionID, err)
		}
		s.cfg.Logger.Info("automatic drill started", "drill", d.PreemptionID, "job", d.JobID, "pool", d.Pool, "profile", c.Profile)
	}
	return nil
}

// chooseDrills gathers ChooseDrills' input for the pools in the trial
// stage under p: their running jobs, free GPUs, busy pools, the drills per
// profile in the last 24 hours and each candidate profile's record over
// the evidence window.
func (s *Service) chooseDrills(ctx context.Context, p *policy.Policy, now time.Time) ([]governance.DrillChoice, error) {
	if !p.DrillRule().AutoInTrial {
		return nil, nil
	}
	stages, err := s.store.PoolStages(ctx)
	if err != nil {
		return nil, err
	}
	var trial []string
	for name, stage := range stages {
		if stage == vocab.StageTrial {
			trial = append(trial, name)
		}
	}
	if len(trial) == 0 {
		return nil, nil
	}
	in := governance.DrillInput{Now: now, Policy: p, Stages: stages, Profiles: map[string]governance.ProfileStanding{},
		Evidence: governance.EvidenceRule{MinVerified: p.Preemption.MinVerifiedResumes, MaxFailureRate: p.Preemption.MaxResumeFailureRate}}
	if in.Candidates, err = s.store.DrillCandidates(ctx, trial); err != nil {
		return nil, err
	}
	if len(in.Candidates) == 0 {
		return nil, nil
	}
	if in.Free, err = s.store.FreeGPUs(ctx, trial); err != nil {
		return nil, err
	}
	if in.BusyPools, err = s.store.BusyPools(ctx, trial); err != nil {
		return nil, err
	}
	if in.DrillsToday, err = s.store.DrillsSince(ctx, now.Add(-24*time.Hour)); err != nil {
		return nil, err
	}
	window := policy.Seconds(p.Preemption.EvidenceWindowSeconds)
	for _, c := range in.Candidates {
		if _, ok := in.Profiles[c.Profile]; ok {
			continue
		}
		rec, err := s.store.ProfileEvidence(ctx, c.Profile, window, now)
		if err != nil {
			return nil, err
		}
		in.Profiles[c.Profile] = governance.ProfileStanding{Profile: c.Profile, Verified: rec.Verified, Failed: rec.Failed}
	}
	return governance.ChooseDrills(in), nil
}
