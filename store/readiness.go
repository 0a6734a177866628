package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Pool readiness and stage history (docs/design.md §4 "Pool readiness"):
// PoolReadiness gathers what governance.EvaluateReadiness reads from the
// stored records; PlanStageChanges, ApplyStageChanges and ChangePoolStages
// gate every stage change through the policy on it, writing each decision
// to pool_stage_changes; PoolStageHistory reads them back.

// Audit actions of stage changes (subject: the pool). AuditSetPoolStage is
// a stage written (its evidence: from, to, outcome, source, policy hash and
// the failed checks); AuditRefusePoolStage a widening refused;
// AuditOverrideReadiness an admin's override of failed readiness (its
// reason is the admin's).
const (
	AuditSetPoolStage      = "set_pool_stage"
	AuditRefusePoolStage   = "refuse_pool_stage"
	AuditOverrideReadiness = "override_readiness"
)

// ErrNoPool marks an unknown pool (it wraps ErrNotFound).
var ErrNoPool = fmt.Errorf("no such pool: %w", ErrNotFound)

// PoolStageChange is one row of a pool's stage history.
type PoolStageChange struct {
	ID         int64                    `json:"id"`
	Pool       string                   `json:"pool"`
	From       vocab.AutomationStage    `json:"from"`
	To         vocab.AutomationStage    `json:"to"`
	Outcome    vocab.StageChangeOutcome `json:"outcome"`
	At         time.Time                `json:"at"`
	Actor      string                   `json:"actor"`
	Reason     string                   `json:"reason"`
	Source     string                   `json:"source"`
	PolicyHash string                   `json:"policy_hash"`
	// Readiness is the readiness the decision read (nil for a narrowing,
	// an initial stage or a row the migration wrote).
	Readiness *governance.Readiness `json:"readiness,omitempty"`
}

// PoolStageHistory returns pool's latest limit stage history rows, newest
// first (limit ≤ 0: DefaultListLimit, capped at MaxListLimit). Errors are
// database errors.
func (s *Store) PoolStageHistory(ctx context.Context, pool string, limit int) ([]PoolStageChange, error) {
	limit = pageLimit(limit)
	var out []PoolStageChange
	err := forEachRow(ctx, s.pool, `
		SELECT id, pool, from_stage, to_stage, outcome, at, actor, reason, source, policy_hash, readiness
		FROM pool_stage_changes WHERE pool = $1 ORDER BY id DESC LIMIT $2`, []any{pool, limit}, func(rows pgx.Rows) error {
		var c PoolStageChange
		var doc []byte
		if err := rows.Scan(&c.ID, &c.Pool, &c.From, &c.To, &c.Outcome, &c.At, &c.Actor, &c.Reason, &c.Source, &c.PolicyHash, &doc); err != nil {
			return err
		}
		if doc != nil {
			c.Readiness = &governance.Readiness{}
			if err := json.Unmarshal(doc, c.Readiness); err != nil {
				return fmt.Errorf("readiness of stage change %d: %w", c.ID, err)
			}
		}
		c.At = c.At.UTC()
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: stage history of pool %s: %w", pool, err)
	}
	return out, nil
}

// poolStages is what a stage decision reads of one pool: its stored stage
// (pools.stage, what the scheduler reads) and its governed stage (the
// to_stage of its latest stage history row that was not refused; the
// stored stage when it has none).
type poolStages struct {
	Name       string                `db:"name"`
	Stored     vocab.AutomationStage `db:"stored"`
	Governed   vocab.AutomationStage `db:"governed"`
	HasHistory bool                  `db:"has_history"`
}

// readPoolStages reads the stages of the named pools that exist, by name.
func readPoolStages(ctx context.Context, q querier, names []string) (map[string]poolStages, error) {
	rows, err := queryAll[poolStages](ctx, q, `
		SELECT p.name, p.stage AS stored, coalesce(h.to_stage, p.stage) AS governed, h.to_stage IS NOT NULL AS has_history
		FROM pools p LEFT JOIN LATERAL (
			SELECT to_stage FROM pool_stage_changes c WHERE c.pool = p.name AND c.outcome <> 'refused'
			ORDER BY c.id DESC LIMIT 1) h ON true
		WHERE p.name = ANY($1)`, names)
	if err != nil {
		return nil, err
	}
	out := make(map[string]poolStages, len(rows))
	for _, r := range rows {
		out[r.Name] = r
	}
	return out, nil
}

// GovernedStage returns pool's governed stage: what its stage history last
// granted (the stored stage for a pool without history). Errors wrap
// ErrNoPool for an unknown pool, or database errors.
func (s *Store) GovernedStage(ctx context.Context, pool string) (vocab.AutomationStage, error) {
	st, err := readPoolStages(ctx, s.pool, []string{pool})
	if err != nil {
		return "", fmt.Errorf("store: stage of pool %s: %w", pool, err)
	}
	ps, ok := st[pool]
	if !ok {
		return "", fmt.Errorf("store: pool %s: %w", pool, ErrNoPool)
	}
	return ps.Governed, nil
}

// PoolReadiness evaluates pool's readiness at now under policy p
// (governance.EvaluateReadiness with p's automation rule and evidence
// rule): the last p.automation.readiness.window_s ending at now against
// the window before, measured with experiment.Measure on LoadReportInput's
// records of the pool (the queue report's definitions), the waiting of
// the last window from the jobs' timelines, the pool's running
// allocations now with a utilisation sample (gpu_samples) or a checkpoint
// no older than freshness_s, the queues of p and those the pool's jobs
// used, the recovery profiles of the pool's checkpointable jobs in the
// last window with their records (ProfileEvidence over
// preemption.evidence_window_s), and the effective run loss of the pool's
// preemptions and drills finished in each window. Errors: an unknown pool
// (ErrNoPool), LoadReportInput's (a window over MaxReportWindow),
// database errors; wrapped with "readiness of pool".
func (s *Store) PoolReadiness(ctx context.Context, pool string, p *policy.Policy, now time.Time) (*governance.Readiness, error) {
	in, err := s.readinessInput(ctx, pool, p, now)
	if err != nil {
		return nil, fmt.Errorf("store: readiness of pool %s: %w", pool, err)
	}
	return governance.EvaluateReadiness(in), nil
}

// readinessWindows returns the last readiness window of p ending at now
// and the one before it.
func readinessWindows(p *policy.Policy, now time.Time) (last, before queuereport.Window) {
	w := p.AutomationRule().Readiness.Window()
	last = queuereport.Window{From: now.Add(-w), To: now}
	return last, queuereport.Window{From: now.Add(-2 * w), To: last.From}
}

// readinessInput gathers PoolReadiness's input.
func (s *Store) readinessInput(ctx context.Context, pool string, p *policy.Policy, now time.Time) (*governance.ReadinessInput, error) {
	stages, err := readPoolStages(ctx, s.pool, []string{pool})
	if err != nil {
		return nil, err
	}
	ps, ok := stages[pool]
	if !ok {
		return nil, ErrNoPool
	}
	_, before := readinessWindows(p, now)
	records, err := s.LoadReportInput(ctx, queuereport.Window{From: before.From, To: now}, now)
	if err != nil {
		return nil, err
	}
	return s.readinessInputFrom(ctx, ps, records, p, now)
}

// PoolsReadiness evaluates the readiness of every stored pool at now under
// policy p, as PoolReadiness does for one, reading the report records of
// the two windows once: what serve exports as gpugov_pool_ready and
// gpugov_pool_readiness_check. Errors are PoolReadiness's, wrapped with
// "readiness of pools".
func (s *Store) PoolsReadiness(ctx context.Context, p *policy.Policy, now time.Time) (map[string]*governance.Readiness, error) {
	names, err := collectStrings(s.pool.Query(ctx, `SELECT name FROM pools ORDER BY name`))
	if err != nil {
		return nil, fmt.Errorf("store: readiness of pools: %w", err)
	}
	stages, err := readPoolStages(ctx, s.pool, names)
	if err != nil {
		return nil, fmt.Errorf("store: readiness of pools: %w", err)
	}
	_, before := readinessWindows(p, now)
	records, err := s.LoadReportInput(ctx, queuereport.Window{From: before.From, To: now}, now)
	if err != nil {
		return nil, fmt.Errorf("store: readiness of pools: %w", err)
	}
	out := make(map[string]*governance.Readiness, len(names))
	for _, n := range names {
		in, err := s.readinessInputFrom(ctx, stages[n], records, p, now)
		if err != nil {
			return nil, fmt.Errorf("store: readiness of pools: pool %s: %w", n, err)
		}
		out[n] = governance.EvaluateReadiness(in)
	}
	return out, nil
}

// readinessInputFrom gathers the readiness input of pool ps from records
// (LoadReportInput of both windows) and its own queries.
func (s *Store) readinessInputFrom(ctx context.Context, ps poolStages, records *queuereport.Input, p *policy.Policy,
	now time.Time) (*governance.ReadinessInput, error) {
	pool := ps.Name
	rule := p.AutomationRule().Readiness
	last, before := readinessWindows(p, now)
	var err error
	in := &governance.ReadinessInput{Pool: pool, Stage: ps.Governed, Now: now, Policy: p,
		Evidence: governance.EvidenceRule{MinVerified: p.Preemption.MinVerifiedResumes, MaxFailureRate: p.Preemption.MaxResumeFailureRate}}
	if in.LossLast, err = s.recoveryLoss(ctx, pool, last); err != nil {
		return nil, err
	}
	if in.LossBefore, err = s.recoveryLoss(ctx, pool, before); err != nil {
		return nil, err
	}
	scope := experiment.Scope{Pools: []string{pool}}
	gov := func(l governance.Loss) experiment.Governance {
		return experiment.Governance{EffectiveRunLossGPUSeconds: l.GPUSeconds, RecomputeGPUSeconds: l.RecomputeGPUSeconds,
			Measured: []string{"effective_run_loss_gpu_s", "recompute_gpu_s"}}
	}
	if in.Last, err = experiment.Measure(*records, scope, last, now, gov(in.LossLast)); err != nil {
		return nil, err
	}
	if in.Before, err = experiment.Measure(*records, scope, before, now, gov(in.LossBefore)); err != nil {
		return nil, err
	}
	in.Waits.UnevaluatedSeconds = governance.PoolUnevaluatedSeconds(*records, pool, last, now)
	for reason, secs := range in.Last.Total.WaitReasonSeconds {
		if vocab.WaitReason(reason) == vocab.ReasonNotYetEvaluated {
			in.Waits.LatencySeconds += secs
		} else {
			in.Waits.ReasonSeconds += secs
		}
	}
	if in.Running, err = s.runningObservation(ctx, pool, now.Add(-policy.Seconds(rule.FreshnessSeconds))); err != nil {
		return nil, err
	}
	in.Queues = poolQueues(p, *records, pool, last)
	if in.Profiles, err = s.poolProfiles(ctx, *records, pool, last, p, now); err != nil {
		return nil, err
	}
	return in, nil
}

// recoveryLoss sums the effective run loss of pool's preemptions and
// drills finished in w (would-preempt records cost nothing).
func (s *Store) recoveryLoss(ctx context.Context, pool string, w queuereport.Window) (governance.Loss, error) {
	var l governance.Loss
	err := s.pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE kind = 'drill'), coalesce(sum(effective_loss_gpu_s), 0),
			coalesce(sum(coalesce(gpus, 0) * coalesce(recompute_s, 0)), 0)
		FROM preemptions WHERE pool = $1 AND state <> 'observed' AND finished_at >= $2 AND finished_at < $3`,
		pool, w.From, w.To).Scan(&l.Records, &l.Drills, &l.GPUSeconds, &l.RecomputeGPUSeconds)
	if err != nil {
		return l, fmt.Errorf("recovery loss: %w", err)
	}
	return l, nil
}

// runningObservation counts pool's running allocations and those with a
// utilisation sample of one of their GPUs, a checkpoint of their run, or a
// step advance of their run observed by the reclaim scan (runs.progress_at,
// ObserveRunSteps), at or after since.
func (s *Store) runningObservation(ctx context.Context, pool string, since time.Time) (governance.RunningObservation, error) {
	var o governance.RunningObservation
	err := s.pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE sampled), count(*) FILTER (WHERE progressed),
			count(*) FILTER (WHERE sampled OR progressed)
		FROM (SELECT EXISTS (SELECT 1 FROM gpu_samples g WHERE g.gpu_uuid = ANY(a.gpu_uuids) AND g.at >= $2) AS sampled,
				(coalesce((r.last_checkpoint->>'at')::timestamptz >= $2, false) OR coalesce(r.progress_at >= $2, false)) AS progressed
			FROM allocations a JOIN runs r ON r.id = a.run_id AND r.ended_at IS NULL
			WHERE a.pool = $1 AND a.released_at IS NULL) x`, pool, since).
		Scan(&o.Allocations, &o.Sampled, &o.Progressing, &o.Observed)
	if err != nil {
		return o, fmt.Errorf("running observation: %w", err)
	}
	return o, nil
}

// poolQueues lists p's queues, then the queues the pool's jobs used in w
// that p does not list.
func poolQueues(p *policy.Policy, in queuereport.Input, pool string, w queuereport.Window) []governance.QueueProtection {
	out := []governance.QueueProtection{}
	listed := map[string]bool{}
	for _, q := range p.Queues {
		listed[q.Name] = true
		out = append(out, governance.QueueProtection{Queue: q.Name, Tier: q.Tier, Explicit: q.ProtectionExplicit, InPolicy: true,
			Protected: q.Protected, LowRisk: q.LowRisk})
	}
	extra := map[string]string{}
	for _, j := range in.Jobs {
		if j.Pool == pool && !listed[j.Queue] && inWindow(j, w) {
			extra[j.Queue] = j.Tier.String()
		}
	}
	names := make([]string, 0, len(extra))
	for q := range extra {
		names = append(names, q)
	}
	sort.Strings(names)
	for _, q := range names {
		out = append(out, governance.QueueProtection{Queue: q, Tier: extra[q]})
	}
	return out
}

// inWindow reports whether job j was in the system during w.
func inWindow(j queuereport.Job, w queuereport.Window) bool {
	return j.SubmitTime.Before(w.To) && (j.End == nil || !j.End.Before(w.From))
}

// poolProfiles returns the recovery profiles of pool's checkpointable jobs
// in w, each with its job count and its record over p's evidence window.
func (s *Store) poolProfiles(ctx context.Context, in queuereport.Input, pool string, w queuereport.Window, p *policy.Policy,
	now time.Time) ([]governance.ProfileRecord, error) {
	var ids []string
	for _, j := range in.Jobs {
		if j.Pool == pool && inWindow(j, w) {
			ids = append(ids, j.ID)
		}
	}
	counts := map[string]int{}
	if len(ids) > 0 {
		err := forEachRow(ctx, s.pool, `
			SELECT coalesce(recovery->>'profile', project || '/simulated'), count(*) FROM jobs
			WHERE id = ANY($1) AND coalesce((recovery->>'checkpointable')::boolean, false)
			GROUP BY 1`, []any{ids}, func(rows pgx.Rows) error {
			var profile string
			var n int
			err := rows.Scan(&profile, &n)
			counts[profile] = n
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("profiles: %w", err)
		}
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]governance.ProfileRecord, 0, len(names))
	window := policy.Seconds(p.Preemption.EvidenceWindowSeconds)
	for _, n := range names {
		rec, err := s.ProfileEvidence(ctx, n, window, now)
		if err != nil {
			return nil, err
		}
		out = append(out, governance.ProfileRecord{Jobs: counts[n],
			ProfileStanding: governance.ProfileStanding{Profile: n, Verified: rec.Verified, Failed: rec.Failed}})
	}
	return out, nil
}

// StageChangeRequest asks for the automation stage of each pool named in
// Stages, on behalf of the policy version PolicyHash (Policy, whose
// readiness thresholds judge a widening): Actor and Reason are who asks and
// why, Source where the request comes from (api, start, reload, refresh).
// Initial (at serve's start) lets a pool without stage history take its
// stage as its first one (outcome initial: a new pool has no history to
// measure). Override (an admin through the API) applies a widening whose
// readiness fails, as outcome overridden. At zero means now.
type StageChangeRequest struct {
	Stages     map[string]vocab.AutomationStage
	Actor      string
	Reason     string
	Source     string
	PolicyHash string
	Policy     *policy.Policy
	Initial    bool
	Override   bool
	At         time.Time
}

// StageChange is the decision on one pool of a StageChangeRequest: the
// governed stage it starts from, the stage asked for, and the outcome
// (applied, overridden, refused or initial; "" for a restore: the governed
// stage was asked for and only the stored stage differed, e.g. after an
// inventory import wrote it). Readiness is what a widening was judged on
// (nil otherwise).
type StageChange struct {
	Pool      string                   `json:"pool"`
	From      vocab.AutomationStage    `json:"from"`
	To        vocab.AutomationStage    `json:"to"`
	Outcome   vocab.StageChangeOutcome `json:"outcome"`
	Readiness *governance.Readiness    `json:"readiness,omitempty"`
	stored    vocab.AutomationStage
}

// Refused reports whether any decision of plan is a refusal.
func Refused(plan []StageChange) bool {
	return slices.ContainsFunc(plan, func(c StageChange) bool { return c.Outcome == vocab.StageChangeRefused })
}

// PlanStageChanges decides, without writing anything, what req does to
// each pool it names that exists (unknown pools are skipped: they get
// their stage when configuration is applied after they appear), by pool
// name: the governed stage asked for again is nothing (or a restore of
// the stored stage); a narrowing is applied; a widening of a pool without
// history at start (req.Initial) is initial; any other widening is
// applied when the pool's readiness under req.Policy passes
// (PoolReadiness at req.At), overridden when it fails and req.Override,
// refused otherwise. Errors: a missing policy, PoolReadiness's, database
// errors; wrapped with "plan stage changes".
func (s *Store) PlanStageChanges(ctx context.Context, req StageChangeRequest) ([]StageChange, error) {
	if len(req.Stages) == 0 {
		return nil, nil
	}
	if req.Policy == nil {
		return nil, fmt.Errorf("store: plan stage changes: %w", invalidf("policy", "policy is required"))
	}
	at := req.At
	if at.IsZero() {
		at = time.Now()
	}
	names := make([]string, 0, len(req.Stages))
	for n := range req.Stages {
		names = append(names, n)
	}
	slices.Sort(names)
	stages, err := readPoolStages(ctx, s.pool, names)
	if err != nil {
		return nil, fmt.Errorf("store: plan stage changes: %w", err)
	}
	var plan []StageChange
	for _, n := range names {
		ps, ok := stages[n]
		to := req.Stages[n]
		if !ok || !to.Valid() {
			continue
		}
		c := StageChange{Pool: n, From: ps.Governed, To: to, stored: ps.Stored}
		switch {
		case to == ps.Governed:
			if ps.Stored == to {
				continue
			}
		case !vocab.Widens(ps.Governed, to):
			c.Outcome = vocab.StageChangeApplied
		case req.Initial && !ps.HasHistory:
			c.Outcome = vocab.StageChangeInitial
		default:
			r, err := s.PoolReadiness(ctx, n, req.Policy, at)
			if err != nil {
				return nil, fmt.Errorf("store: plan stage changes: %w", err)
			}
			c.Readiness = r
			switch {
			case r.Ready:
				c.Outcome = vocab.StageChangeApplied
			case req.Override:
				c.Outcome = vocab.StageChangeOverridden
			default:
				c.Outcome = vocab.StageChangeRefused
			}
		}
		plan = append(plan, c)
	}
	return plan, nil
}

// ApplyStageChanges writes plan (PlanStageChanges of req) in one
// transaction: see applyStageChangesTx. Errors are database errors,
// wrapped with "apply stage changes".
func (s *Store) ApplyStageChanges(ctx context.Context, req StageChangeRequest, plan []StageChange) error {
	if len(plan) == 0 {
		return nil
	}
	return s.inTx(ctx, "apply stage changes", func(tx pgx.Tx) error { return applyStageChangesTx(ctx, tx, req, plan) })
}

// ChangePoolStages plans req (PlanStageChanges) and applies the plan
// (ApplyStageChanges), returning it: the stage changes through the policy
// all go through here or, for a version applied through the API, through
// ActivatePolicyStaged. Errors are theirs.
func (s *Store) ChangePoolStages(ctx context.Context, req StageChangeRequest) ([]StageChange, error) {
	plan, err := s.PlanStageChanges(ctx, req)
	if err != nil {
		return nil, err
	}
	return plan, s.ApplyStageChanges(ctx, req, plan)
}

// applyStageChangesTx writes each decision of plan in tx, the pools' rows
// locked in name order: a restore sets pools.stage and audits
// AuditSetPoolStage; applied, overridden and initial set pools.stage, add
// a stage history row with the readiness read and audit AuditSetPoolStage
// (an override also AuditOverrideReadiness with req.Reason); a refusal
// keeps the governed stage (restoring pools.stage to it when it differs),
// adds a history row and audits AuditRefusePoolStage with the failed
// checks.
func applyStageChangesTx(ctx context.Context, tx pgx.Tx, req StageChangeRequest, plan []StageChange) error {
	at := req.At
	if at.IsZero() {
		at = time.Now()
	}
	for _, c := range plan {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM pools WHERE name = $1 FOR UPDATE`, c.Pool); err != nil {
			return err
		}
		stage := c.To
		if c.Outcome == vocab.StageChangeRefused {
			stage = c.From
		}
		if _, err := tx.Exec(ctx, `UPDATE pools SET stage = $2, updated_at = now() WHERE name = $1 AND stage <> $2`,
			c.Pool, string(stage)); err != nil {
			return err
		}
		ev := map[string]any{"from": string(c.stored), "to": string(stage), "governed_from": string(c.From),
			"asked": string(c.To), "outcome": string(c.Outcome), "source": req.Source, "policy_hash": req.PolicyHash}
		if c.Outcome == "" {
			if c.stored == stage {
				continue
			}
			ev["restore"] = true
			if err := appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: req.Actor, Action: AuditSetPoolStage, Subject: c.Pool,
				Reason: req.Reason, Evidence: ev}); err != nil {
				return err
			}
			continue
		}
		var doc []byte
		if c.Readiness != nil {
			doc = mustJSON(c.Readiness)
			ev["ready"], ev["failed_checks"], ev["readiness"] = c.Readiness.Ready, c.Readiness.Failed, c.Readiness.Summary()
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO pool_stage_changes (pool, from_stage, to_stage, outcome, at, actor, reason, source, policy_hash, readiness)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			c.Pool, string(c.From), string(c.To), string(c.Outcome), at, req.Actor, req.Reason, req.Source, req.PolicyHash, doc); err != nil {
			return err
		}
		action := AuditSetPoolStage
		if c.Outcome == vocab.StageChangeRefused {
			action = AuditRefusePoolStage
		}
		if err := appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: req.Actor, Action: action, Subject: c.Pool,
			Reason: req.Reason, Evidence: ev}); err != nil {
			return err
		}
		if c.Outcome == vocab.StageChangeOverridden {
			if err := appendAuditTx(ctx, tx, AuditEntry{At: at, Actor: req.Actor, Action: AuditOverrideReadiness, Subject: c.Pool,
				Reason: req.Reason, Evidence: ev}); err != nil {
				return err
			}
		}
	}
	return nil
}

// ActivatePolicyStaged is ActivatePolicy with the stage changes plan
// (PlanStageChanges of req, its refusals already answered by the caller)
// written in the same transaction, so that the version and the stages it
// asks for take effect together and the service's refresh finds nothing
// left to change. It returns whether the active version changed. Errors
// are ActivatePolicy's; a plan with a refusal is refused (ErrInvalid
// naming "stages") before anything is written.
func (s *Store) ActivatePolicyStaged(ctx context.Context, hash string, body json.RawMessage, actor, reason string,
	evidence map[string]any, req StageChangeRequest, plan []StageChange) (changed bool, err error) {
	if Refused(plan) {
		return false, fmt.Errorf("store: activate policy %s: %w", hash, invalidf("stages", "a stage change was refused"))
	}
	if err := validActivation(hash, body, actor, reason); err != nil {
		return false, fmt.Errorf("store: activate policy %s: %w", hash, err)
	}
	err = s.inTx(ctx, "activate policy "+hash, func(tx pgx.Tx) error {
		var err error
		if changed, err = activatePolicyInTx(ctx, tx, hash, body, actor, reason, evidence); err != nil {
			return err
		}
		return applyStageChangesTx(ctx, tx, req, plan)
	})
	if err != nil {
		return false, err
	}
	return changed, nil
}
