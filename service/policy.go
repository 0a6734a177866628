package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// PolicyActor is the audit actor of what the service does with the policy
// it loads: the policy version switch (activate_policy), pool stages
// (set_pool_stage) and low-risk queues.
const PolicyActor = "serve"

// loadPolicy loads Config.PolicyFile into a watcher when one is configured
// (a file that does not load fails the start with Load's error, which names
// the file and the line and field of each problem), or takes Config.Policy.
func (s *Service) loadPolicy() error {
	if s.cfg.PolicyFile == "" {
		s.static = s.cfg.Policy
		if s.static == nil {
			s.static = policy.Default()
		}
		return nil
	}
	if s.cfg.Policy != nil {
		return errors.New("service: both a policy file and a policy are configured")
	}
	w, err := policy.NewWatcher(s.cfg.PolicyFile)
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	w.OnChange = func(ctx context.Context, ch policy.Change) error {
		return s.applyPolicy(ctx, ch.New, "loaded from "+ch.Path, StageSourceReload)
	}
	w.OnError = func(err error) { s.cfg.Logger.Warn("policy file", "file", w.Path, "err", err) }
	s.policy = w
	return nil
}

// currentPolicy returns the policy in force: the active stored policy
// version (docs/design.md §4) once the start policy is applied — kept by
// applyPolicy and refreshPolicy — and before that the watcher's or the
// static one.
func (s *Service) currentPolicy() *policy.Policy {
	if f := s.inForce.Load(); f != nil {
		return f.p
	}
	return s.filePolicy()
}

// policyInForce is the policy in force with what every cycle reads of it,
// computed once when it becomes current rather than per cycle: its hash
// (policy.Hash: canonical JSON and SHA-256) and its scheduling view
// (policy.Scheduling, whose Version is that hash).
type policyInForce struct {
	p          *policy.Policy
	hash       string
	sched      *scheduling.Policy
	poolShards map[string]string // policy.Policy.PoolShards
}

// newPolicyInForce computes p's hash and scheduling view once.
func newPolicyInForce(p *policy.Policy) *policyInForce {
	sp := p.Scheduling()
	return &policyInForce{p: p, hash: sp.Version, sched: sp, poolShards: p.PoolShards()}
}

// filePolicy is the policy the file (or Config.Policy, or the default)
// gives: what a decoded version takes its unhashed fields from.
func (s *Service) filePolicy() *policy.Policy {
	if s.policy != nil {
		return s.policy.Current()
	}
	return s.static
}

// schedulingPolicy is the scheduler's policy source: the policy in force
// after refreshPolicy, its Version the policy's hash, which every cycle
// records. A store error fails the cycle (its activity retries).
func (s *Service) schedulingPolicy(ctx context.Context) (*scheduling.Policy, error) {
	if err := s.refreshPolicy(ctx); err != nil {
		return nil, fmt.Errorf("service: policy in force: %w", err)
	}
	if f := s.inForce.Load(); f != nil {
		sp := *f.sched // the caller's own copy of the top-level fields
		return &sp, nil
	}
	return s.currentPolicy().Scheduling(), nil
}

// refreshPolicy makes the active stored policy version the policy in force
// when it changed, with everything it sets applied (applyEffectsLocked:
// queues and low-risk flags, stored quotas, usage half-life, project
// weights, pool stages, gated on readiness): a version activated through the store — a quota
// change (store.SetQuota), a version applied through the API or switched
// by an experiment (store.ActivatePolicy), a rollback — is thus a complete
// switch at the next cycle, which plans and records with it, without a
// restart. The version's activation is audited by whoever activated it;
// the effects are audited with PolicyActor and a reason naming the hash.
// It reads only the active hash unless that differs from the policy in
// force. It holds policyMu, as applyPolicy does, so it never applies a
// version a concurrent reload superseded, and, when the hash changed, the
// store's policy lock (store.LockPolicy) while it reads and applies the
// version, so that replicas seeing the same switch write its effects one
// after the other. An error (a store error, an
// active body that does not decode to its hash) leaves the policy in force
// as it was, so the next cycle tries again.
func (s *Service) refreshPolicy(ctx context.Context) error {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	hash, err := s.store.ActivePolicyHash(ctx)
	if err != nil {
		return err
	}
	if cur := s.inForce.Load(); cur != nil && cur.hash == hash {
		return nil
	}
	// The effects are written under the policy lock, as every replica
	// whose cycle or loop sees the switch applies them (docs/design.md §10
	// "Several replicas"); the version is read again under it.
	return s.store.WithLock(ctx, store.LockPolicy, s.refreshLocked)
}

// refreshLocked is refreshPolicy's switch, under policyMu and the policy
// lock: it loads the active version and, when it is not the policy in
// force, applies it.
func (s *Service) refreshLocked(ctx context.Context) error {
	cur := s.inForce.Load()
	v, err := s.store.ActivePolicyVersion(ctx)
	if err != nil {
		return err
	}
	if cur != nil && cur.hash == v.Hash {
		return nil
	}
	p, err := policy.FromCanonical(v.Body)
	if err != nil {
		return err
	}
	if p.Hash() != v.Hash {
		return fmt.Errorf("active policy version %s decodes to %s", v.Hash, p.Hash())
	}
	p.KeepUnhashed(s.filePolicy())
	if s.refreshLoaded != nil {
		s.refreshLoaded()
	}
	reason := "policy version " + v.Hash + " became active"
	if cur != nil {
		reason += " (was " + cur.hash + ")"
	}
	if err := s.applyEffectsLocked(ctx, p, reason, StageSourceRefresh); err != nil {
		return err
	}
	s.cfg.Logger.Info("policy in force changed", "hash", v.Hash, "derived_from", v.DerivedFrom, "base_hash", v.BaseHash)
	return nil
}

// applyStartPolicy stores and applies the policy in force at start. It runs
// after the inventory is imported, because UpsertInventory rewrites
// pools.stage. When the active stored version was derived through the
// store — by quota changes (store.SetQuota), or applied through the API
// (store.ActivatePolicy) — from this same file's (or default) policy, that
// version is kept and applied: the file was not edited since, and a
// restart must not undo the changes; a file that differs from the version
// they were derived from supersedes them (docs/design.md §4). It holds
// policyMu and the store's policy lock (store.LockPolicy) throughout, so
// that replicas starting together apply their start policy one after the
// other, each deciding on what the previous one left.
func (s *Service) applyStartPolicy(ctx context.Context) error {
	reason := "default policy (no policy file)"
	switch {
	case s.policy != nil:
		reason = "loaded from " + s.policy.Path
	case s.cfg.Policy != nil:
		reason = "policy of the service's configuration (no policy file)"
	}
	p := s.filePolicy()
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	// Replicas starting together apply one after the other, each reading
	// the active version its predecessor left (docs/design.md §10
	// "Several replicas").
	err := s.store.WithLock(ctx, store.LockPolicy, func(ctx context.Context) error {
		active, err := s.store.ActivePolicyVersion(ctx)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		case active.Hash != p.Hash() && active.BaseHash == p.Hash():
			derived, err := policy.FromCanonical(active.Body)
			if err != nil || derived.Hash() != active.Hash {
				return fmt.Errorf("active policy version %s cannot be decoded: %v", active.Hash, err)
			}
			derived.KeepUnhashed(p)
			// Already active, with its lineage: only its effects are applied.
			return s.applyEffectsLocked(ctx, derived, reason+"; kept the version "+active.Hash+" derived from it through the API", StageSourceStart)
		}
		return s.applyPolicyLocked(ctx, p, reason, StageSourceStart)
	})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	return nil
}

// applyPolicy makes p, the policy file's (or default) policy, the stored
// active policy version — store.SavePolicyVersion of Hash and Canonical,
// then ActivatePolicyVersion, which audits the switch and makes it a file
// version (its own base) — and applies what it sets (applyEffectsLocked),
// auditing each real change with PolicyActor and reason. It holds policyMu
// (see refreshPolicy) and the store's policy lock (store.LockPolicy: a
// replica's reload never interleaves with another replica's writes of a
// policy). It returns the first store error.
func (s *Service) applyPolicy(ctx context.Context, p *policy.Policy, reason, source string) error {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	return s.store.WithLock(ctx, store.LockPolicy, func(ctx context.Context) error {
		return s.applyPolicyLocked(ctx, p, reason, source)
	})
}

// applyPolicyLocked is applyPolicy under policyMu and the policy lock.
func (s *Service) applyPolicyLocked(ctx context.Context, p *policy.Policy, reason, source string) error {
	hash := p.Hash()
	if err := s.store.SavePolicyVersion(ctx, hash, p.Canonical()); err != nil {
		return fmt.Errorf("policy version: %w", err)
	}
	if err := s.store.ActivatePolicyVersion(ctx, hash, PolicyActor, reason); err != nil {
		return fmt.Errorf("policy version: %w", err)
	}
	return s.applyEffectsLocked(ctx, p, reason, source)
}

// applyEffectsLocked writes to the store what the active version p sets,
// auditing each real change with PolicyActor and reason: the low-risk
// flags and the queues (when p names queues; at start, without any, the
// default queues are created in an empty store), the quotas
// (store.SyncQuotas: the stored quotas become the active version's — p's,
// unless a quota change derived a version from it since — each change
// audited), the usage half-life and project weights the store reads, and
// the pool stages; p is then the policy in force. What p leaves out is
// kept as the store has it, as for a file reload (a stored queue p does
// not list, a pool p gives no stage). The caller holds policyMu. It
// returns the first store error, leaving the policy in force as it was.
func (s *Service) applyEffectsLocked(ctx context.Context, p *policy.Policy, reason, source string) error {
	atStart := source == StageSourceStart
	var lowRisk []string
	if len(p.Queues) > 0 {
		queues, err := policy.SchedulingQueues(p.Queues)
		if err != nil {
			return err
		}
		// The flags first, so that each flip is audited; the upsert then
		// creates missing queues with their flags.
		if lowRisk, err = s.store.SetLowRiskQueues(ctx, p.LowRiskQueues(), PolicyActor, reason); err != nil {
			return fmt.Errorf("low-risk queues: %w", err)
		}
		if err := s.store.UpsertQueues(ctx, queues); err != nil {
			return err
		}
	} else if atStart {
		created, err := EnsureDefaultQueues(ctx, s.store)
		if err != nil {
			return err
		}
		if created {
			s.cfg.Logger.Info("no queue configured: created the default queue of each tier")
		}
	}
	// The stored quotas (what the snapshot reads) are the active version's,
	// exactly: p's, or the one a quota change derived from it meanwhile.
	if _, err := s.store.SyncQuotas(ctx, PolicyActor, reason); err != nil {
		return fmt.Errorf("quotas: %w", err)
	}
	// Usage decays as the policy's fair share says, in the store's charges
	// and snapshot as in the planner (docs/design.md §5).
	s.store.SetUsageHalfLife(time.Duration(p.FairShare.HalfLifeSeconds * float64(time.Second)))
	// The recovery profiles' records the preemption gate reads cover the
	// policy's evidence window (docs/design.md §5 "The evidence rule").
	s.store.SetEvidenceWindow(p.Preemption.EvidenceWindow())
	// The queue report measures projects against the same weights (§6).
	s.store.SetProjectWeights(p.FairShare.ProjectWeights)
	pools, err := s.changeStages(ctx, p, reason, source)
	if err != nil {
		return fmt.Errorf("pool stages: %w", err)
	}
	// Each pool's scheduler shard (docs/design.md §4 "Scheduler shards"):
	// committed before the new shard's scheduler starts, and waiting for
	// the cycles applying on the moved pools, so no cycle of the old shard
	// touches a moved pool after this.
	moved, err := s.store.SetPoolShards(ctx, p.PoolShards())
	if err != nil {
		return fmt.Errorf("pool shards: %w", err)
	}
	f := newPolicyInForce(p)
	s.inForce.Store(f)
	s.cfg.Logger.Info("policy applied", "hash", f.hash, "reason", reason, "pools_changed", pools, "low_risk_changed", lowRisk,
		"pool_shards_changed", moved)
	if s.temporal != nil {
		// A shard the policy adds gets its scheduler now (the reconcile
		// pass retries a failed start).
		if err := s.startSchedulers(ctx, p); err != nil {
			s.cfg.Logger.Warn("start shard schedulers", "err", err)
		}
	}
	return nil
}

// Sources of a stage change through the service (pool_stage_changes.source).
const (
	StageSourceStart   = "start"   // the policy file (or Config.Policy) applied at start
	StageSourceReload  = "reload"  // the policy file re-read after an edit
	StageSourceRefresh = "refresh" // a version activated through the store put in force (an experiment, a rollback, a quota change)
)

// changeStages applies the pool stages p asks for, gated on readiness
// (store.ChangePoolStages under p's thresholds; docs/design.md §4 "Pool
// readiness"): a narrowing is applied; a widening only when the pool's
// readiness passes, except a pool's first stage at start (a pool without
// stage history); otherwise the stored stage is kept and the refusal is in
// the pool's history, the audit log (refuse_pool_stage) and this log. A
// version applied through the API arrives with its stages already written
// (store.ActivatePolicyStaged), so nothing is left to change here. It
// returns the pools whose stage changed.
func (s *Service) changeStages(ctx context.Context, p *policy.Policy, reason, source string) ([]string, error) {
	plan, err := s.store.ChangePoolStages(ctx, store.StageChangeRequest{Stages: p.Stages(), Actor: PolicyActor, Reason: reason,
		Source: source, PolicyHash: p.Hash(), Policy: p, Initial: source == StageSourceStart})
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, c := range plan {
		if c.Outcome == vocab.StageChangeRefused {
			s.cfg.Logger.Warn("pool stage widening refused: readiness failed; the stored stage is kept", "pool", c.Pool,
				"stage", c.From, "asked", c.To, "failed_checks", c.Readiness.Failed, "policy", p.Hash(), "source", source)
			continue
		}
		changed = append(changed, c.Pool)
	}
	return changed, nil
}
