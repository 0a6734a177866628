package policy

import "github.com/gpugov/gpugov/internal/vocab"

// GroupDiff is what differs between two policies in one variable group
// (vocab.PolicyGroup).
type GroupDiff struct {
	Group   vocab.PolicyGroup `json:"group"`
	Changes []FieldChange     `json:"changes"`
}

// FieldChange is one differing field: its path in the policy file's terms
// (`aging.cap_points`, `queues[experiment].max_share`, `quotas[team-a/a100].nominal_milli`),
// and its value on each side as canonical JSON ("" where absent on that side).
type FieldChange struct {
	Field  string `json:"field"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// Diff lists what differs from a to b, by variable group in
// vocab.PolicyGroups order, each group's changes sorted by field; a group
// without differences is left out, so two policies with the same Hash have
// an empty diff. Fields outside the hash (Simulation) are not compared.
// INTERFACE STUB: implemented by the policy-versions work.
func Diff(a, b *Policy) []GroupDiff { panic("policy.Diff: not implemented yet") }

// Groups returns the variable groups of a diff, in order.
func Groups(d []GroupDiff) []vocab.PolicyGroup {
	out := make([]vocab.PolicyGroup, 0, len(d))
	for _, g := range d {
		out = append(out, g.Group)
	}
	return out
}
