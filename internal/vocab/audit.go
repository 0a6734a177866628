package vocab

import "slices"

// AuditActions lists every audit_log action gpugov writes (docs/design.md §3
// "The audit" gives each one's subject, actor and evidence keys): the one list
// that `GET /v1/audit?action=` and `gpugov audit --action` check a filter
// against, so that a mistyped action is refused naming the field instead of
// answering an empty page. store's TestGovernanceActionsAudited holds what the
// store writes to it, TestAuditActionsInDesign the design's table.
var AuditActions = []string{
	"access_denied",
	"activate_policy",
	"amend_resources",
	"approve_quota_request",
	"cancel", "cancel_requested",
	"complete_job",
	"create_experiment",
	"deny_quota_request",
	"drill",
	"experiment_abort", "experiment_promote", "experiment_revert", "experiment_rollback", "experiment_switch",
	"hold", "release_hold",
	"inventory_change",
	"override_one_variable",
	"override_readiness",
	"place",
	"preempt", "would_preempt",
	"preempt_abort", "preempt_finish", "preempt_notice", "preempt_release", "preempt_requeue",
	"reclaim_close", "reclaim_confirm", "reclaim_dispute", "reclaim_dispute_reject", "reclaim_notice", "reclaim_open", "reclaim_release",
	"recovery_downgrade",
	"refuse_pool_stage",
	"request_quota",
	"set_pool_stage",
	"set_prerequisite",
	"set_queue_low_risk",
	"set_quota",
	"submit",
	"token_create", "token_revoke",
}

// ValidAuditAction reports whether a is one of AuditActions.
func ValidAuditAction(a string) bool { return slices.Contains(AuditActions, a) }
