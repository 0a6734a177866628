package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/gpugov/gpugov/internal/vocab"
)

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
//
// It compares the two Canonical documents generically, so every field of
// the body is covered: maps by key (`pools.a100.stage`,
// `fair_share.project_weights.vision`; an empty map is no keys), lists by
// identity where entries have one — queues by name, quotas by
// project/pool, notifications.webhooks by project, protection_windows by
// name (by position when a name repeats) — and other lists (reclaim.rules,
// whose order matters) by position; an entry on one side only is one
// change naming the whole entry. Each change's group is its top-level
// key's (TopLevelGroups), except queues[].aging_cap_points and
// aging_ceiling_tier (aging) and queues[].protected and low_risk
// (protection). The format `version` belongs to no group and is not
// compared. a and b must not be nil. A top-level key of the body that
// TopLevelGroups does not list is a bug of this package (its tests refuse
// one) and panics, so no policy field is ever left out of a diff.
func Diff(a, b *Policy) []GroupDiff {
	da, db := canonicalTree(a), canonicalTree(b)
	byGroup := map[vocab.PolicyGroup][]FieldChange{}
	keys := unionKeys(da, db)
	for _, k := range keys {
		g, known := TopLevelGroups[k]
		if !known {
			panic(fmt.Sprintf("policy.Diff: top-level field %q has no variable group (policy.TopLevelGroups)", k))
		}
		if g == "" {
			continue
		}
		va, okA := da[k]
		vb, okB := db[k]
		walkDiff(k, k, va, okA, vb, okB, func(spath, field, before, after string) {
			fg := fieldGroup(spath, g)
			byGroup[fg] = append(byGroup[fg], FieldChange{Field: field, Before: before, After: after})
		})
	}
	var out []GroupDiff
	for _, g := range vocab.PolicyGroups {
		if ch := byGroup[g]; len(ch) > 0 {
			slices.SortFunc(ch, func(x, y FieldChange) int { return strings.Compare(x.Field, y.Field) })
			out = append(out, GroupDiff{Group: g, Changes: ch})
		}
	}
	return out
}

// TopLevelGroups maps each top-level key of a policy version's body
// (Canonical) to the variable group its fields belong to; "" (version, the
// file format) is no group. Diff refines queues: see queueFieldGroups.
var TopLevelGroups = map[string]vocab.PolicyGroup{
	"version":     "",
	"tier_base":   vocab.PolicyOrdering,
	"reservation": vocab.PolicyOrdering,
	"placement":   vocab.PolicyOrdering,
	// Shards split the cycle (docs/design.md §4 "Scheduler shards"): which
	// pools are planned together, so the order jobs are served in.
	"shards":             vocab.PolicyOrdering,
	"aging":              vocab.PolicyAging,
	"fair_share":         vocab.PolicyFairShare,
	"preemption":         vocab.PolicyPreemption,
	"reclaim":            vocab.PolicyReclaim,
	"pools":              vocab.PolicyAutomationStage,
	"protection_windows": vocab.PolicyProtection,
	"notifications":      vocab.PolicyNotifications,
	"drills":             vocab.PolicyPreemption,
	"automation":         vocab.PolicyAutomationStage,
	"quotas":             vocab.PolicyQuota,
	"queues":             vocab.PolicyQueueService,
}

// queueFieldGroups are the queue fields outside the queue-service group.
var queueFieldGroups = map[string]vocab.PolicyGroup{
	"aging_cap_points":    vocab.PolicyAging,
	"aging_ceiling_tier":  vocab.PolicyAging,
	"protected":           vocab.PolicyProtection,
	"low_risk":            vocab.PolicyProtection,
	"protection_explicit": vocab.PolicyProtection,
}

// listIdentity names the entries of the lists compared by identity, keyed
// by the list's structural path (keys joined by dots, no positions).
var listIdentity = map[string]func(map[string]any) string{
	"queues":                 func(e map[string]any) string { return text(e["name"]) },
	"quotas":                 func(e map[string]any) string { return text(e["project"]) + "/" + text(e["pool"]) },
	"notifications.webhooks": func(e map[string]any) string { return text(e["project"]) },
	"protection_windows":     func(e map[string]any) string { return text(e["name"]) },
}

// fieldGroup is the group of a change at structural path spath whose
// top-level key has group g.
func fieldGroup(spath string, g vocab.PolicyGroup) vocab.PolicyGroup {
	if rest, ok := strings.CutPrefix(spath, "queues."); ok {
		field, _, _ := strings.Cut(rest, ".")
		if qg, ok := queueFieldGroups[field]; ok {
			return qg
		}
	}
	return g
}

// canonicalTree decodes p's Canonical body into a generic tree, numbers
// kept as written.
func canonicalTree(p *Policy) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(p.Canonical()))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		panic(fmt.Sprintf("policy.Diff: canonical JSON does not decode: %v", err))
	}
	return m
}

// walkDiff reports through emit every difference between a and b at
// structural path spath (display path field); okA and okB say whether each
// side has the value at all.
func walkDiff(spath, field string, a any, okA bool, b any, okB bool, emit func(spath, field, before, after string)) {
	if okA && okB && reflect.DeepEqual(a, b) {
		return
	}
	if !okA || !okB {
		emit(spath, field, encodeSide(a, okA), encodeSide(b, okB))
		return
	}
	ma, mapA := asMap(a)
	mb, mapB := asMap(b)
	if mapA && mapB {
		for _, k := range unionKeys(ma, mb) {
			va, inA := ma[k]
			vb, inB := mb[k]
			walkDiff(spath+"."+k, field+"."+k, va, inA, vb, inB, emit)
		}
		return
	}
	la, listA := asList(a)
	lb, listB := asList(b)
	if listA && listB {
		ka, kb := entryKeys(spath, la), entryKeys(spath, lb)
		ia, ib := indexOf(ka), indexOf(kb)
		for _, k := range unionOrdered(ka, kb) {
			xa, inA := ia[k]
			xb, inB := ib[k]
			var va, vb any
			if inA {
				va = la[xa]
			}
			if inB {
				vb = lb[xb]
			}
			walkDiff(spath, field+"["+k+"]", va, inA, vb, inB, emit)
		}
		return
	}
	emit(spath, field, encodeSide(a, true), encodeSide(b, true))
}

// asMap reads v as an object; null is the empty object (Canonical writes
// an empty map as null).
func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case nil:
		return map[string]any{}, true
	}
	return nil, false
}

// asList reads v as a list; null is the empty list.
func asList(v any) ([]any, bool) {
	switch l := v.(type) {
	case []any:
		return l, true
	case nil:
		return []any{}, true
	}
	return nil, false
}

// entryKeys names the entries of the list at spath: by identity where the
// list has one and every entry's identity is distinct, else by position.
func entryKeys(spath string, l []any) []string {
	keys := make([]string, len(l))
	if id, ok := listIdentity[spath]; ok {
		seen := map[string]bool{}
		unique := true
		for i, e := range l {
			m, isMap := e.(map[string]any)
			if !isMap {
				unique = false
				break
			}
			keys[i] = id(m)
			if seen[keys[i]] {
				unique = false
				break
			}
			seen[keys[i]] = true
		}
		if unique {
			return keys
		}
	}
	for i := range l {
		keys[i] = strconv.Itoa(i)
	}
	return keys
}

// indexOf maps each key to its position.
func indexOf(keys []string) map[string]int {
	m := make(map[string]int, len(keys))
	for i, k := range keys {
		m[k] = i
	}
	return m
}

// unionOrdered is a's keys in order, then b's not in a.
func unionOrdered(a, b []string) []string {
	out := slices.Clone(a)
	for _, k := range b {
		if !slices.Contains(a, k) {
			out = append(out, k)
		}
	}
	return out
}

// unionKeys is the sorted union of two maps' keys.
func unionKeys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// encodeSide is v as compact JSON, "" when the side has no value.
func encodeSide(v any, ok bool) string {
	if !ok {
		return ""
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("policy.Diff: encode: %v", err))
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// text is a string value of an entry's identity field, or its JSON.
func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return encodeSide(v, true)
}

// Groups returns the variable groups of a diff, in order.
func Groups(d []GroupDiff) []vocab.PolicyGroup {
	out := make([]vocab.PolicyGroup, 0, len(d))
	for _, g := range d {
		out = append(out, g.Group)
	}
	return out
}
