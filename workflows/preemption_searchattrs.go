package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// governanceAttrsChange is the workflow.GetVersion change ID under which
// PreemptionWorkflow and ReclaimWorkflow upsert their search attributes after
// their first activity. Runs recorded before it (version
// workflow.DefaultVersion) replay without the upsert.
const governanceAttrsChange = "governance-search-attributes"

// governanceAttrsVersion is the version that upserts the attributes.
const governanceAttrsVersion workflow.Version = 1

// upsertGovernanceAttrs sets the GpugovQueue, GpugovTier and GpugovPool
// search attributes of a preemption (the victim's queue and tier, the
// preempted allocation's pool) or a reclaim (the allocation's job's queue
// and tier, its pool), so that the Temporal UI finds them as it finds jobs.
// Empty values are left unset. A failed upsert is logged, not fatal: the
// attributes only help finding the workflow.
func upsertGovernanceAttrs(ctx workflow.Context, queue, tier, pool string) {
	if workflow.GetVersion(ctx, governanceAttrsChange, workflow.DefaultVersion, governanceAttrsVersion) == workflow.DefaultVersion {
		return
	}
	var u []temporal.SearchAttributeUpdate
	for _, kv := range []struct {
		key temporal.SearchAttributeKeyKeyword
		val string
	}{{temporalx.QueueKey, queue}, {temporalx.TierKey, tier}, {temporalx.PoolKey, pool}} {
		if kv.val != "" {
			u = append(u, kv.key.ValueSet(kv.val))
		}
	}
	if len(u) == 0 {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, u...); err != nil {
		workflow.GetLogger(ctx).Warn("search attributes not set", "error", err)
	}
}
