package policy

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/yamlnode"
)

// Error lists every problem found in a policy file, ordered by line.
type Error struct {
	File     string
	Problems []Problem
}

// Problem is one invalid field: its line in the file (1-based), its dotted
// path (e.g. "reclaim.rules[1].mode"; "" for a YAML syntax error) and what
// is wrong.
type Problem = yamlnode.Problem

// Error renders "file:line: field: message", one problem a line.
func (e *Error) Error() string {
	return yamlnode.Render(e.File, e.Problems)
}

// Load reads the policy file at path and resolves it over Default. A file
// that cannot be read is an error wrapping the os error; an invalid one is
// an *Error naming the line and field of every problem: a YAML syntax
// error, a missing or unknown `version:`, an unknown field, a value of the
// wrong type, an unknown tier, stage, class or mode, a negative duration or
// count, an empty required name, an out-of-range value or inconsistent
// fields (an aging interval of 0 with aging on, a window ending before it
// starts, a repeated queue name or quota).
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load on data already read; name stands for the file in errors.
func Parse(name string, data []byte) (*Policy, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		se := yamlnode.Syntax(err)
		return nil, &Error{File: name, Problems: []Problem{{Line: se.Line, Message: se.Msg}}}
	}
	d := &decoder{at: map[string]*yaml.Node{}}
	p := Default()
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = yamlnode.Deref(root.Content[0])
	}
	switch {
	case root.Kind == yaml.DocumentNode || root.Kind == 0:
		d.fail(&yaml.Node{Line: 1}, "version", "is required: want %q (the file is empty)", FormatV1)
	case root.Kind != yaml.MappingNode:
		d.fail(root, "", "want a mapping of policy sections, got %s", yamlnode.Describe(root))
	default:
		if d.version(root) {
			d.decodeRoot(root, p)
		}
	}
	if len(d.probs) > 0 {
		slices.SortStableFunc(d.probs, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
		return nil, &Error{File: name, Problems: d.probs}
	}
	return p, nil
}

// decoder walks the YAML node tree, decoding known fields into the policy
// and collecting a Problem, with the node's line, for each bad one.
type decoder struct {
	probs []Problem
	at    map[string]*yaml.Node // the value node of each decoded field, by path
}

// fieldFunc decodes the value node n of the field at path.
type fieldFunc func(n *yaml.Node, path string)

// fields are a mapping's known keys.
type fields map[string]fieldFunc

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.report(n, path, fmt.Sprintf(format, args...))
}

// report is fail as a yamlnode.Report.
func (d *decoder) report(n *yaml.Node, path, msg string) {
	d.probs = append(d.probs, Problem{Line: n.Line, Field: path, Message: msg})
}

// has reports whether the field at path was in the file.
func (d *decoder) has(path string) bool { _, ok := d.at[path]; return ok }

// lineNode returns the value node of path, or fallback when it was not in the file.
func (d *decoder) lineNode(path string, fallback *yaml.Node) *yaml.Node {
	if n, ok := d.at[path]; ok {
		return n
	}
	return fallback
}

// version checks the required `version:` field; decoding goes on only for
// a known format.
func (d *decoder) version(root *yaml.Node) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "version" {
			continue
		}
		v := yamlnode.Deref(root.Content[i+1])
		if v.Kind != yaml.ScalarNode || v.Value != FormatV1 {
			d.fail(v, "version", "%s is not a known policy format: want %q", yamlnode.Describe(v), FormatV1)
			return false
		}
		return true
	}
	d.fail(root, "version", "is required: want %q", FormatV1)
	return false
}

// mapping decodes a mapping node with the known keys fs; an unknown or
// repeated key is a problem at the key's line.
func (d *decoder) mapping(n *yaml.Node, path string, fs fields) bool {
	return yamlnode.Fields(n, path, fs, d.report, func(_, v *yaml.Node, at string, f fieldFunc) {
		d.at[at] = v
		f(v, at)
	})
}

// entries decodes a mapping of names to values (pools, tier bases, project
// weights) in file order; a repeated name is a problem.
func (d *decoder) entries(n *yaml.Node, path string, each func(key *yaml.Node, v *yaml.Node, path string)) {
	yamlnode.Entries(n, path, d.report, func(k, v *yaml.Node, at string) {
		d.at[at] = v
		each(k, v, at)
	})
}

// list decodes each item of a sequence node.
func (d *decoder) list(n *yaml.Node, path string, item fieldFunc) {
	yamlnode.List(n, path, "a list", d.report, func(c *yaml.Node, at string) {
		d.at[at] = c
		item(c, at)
	})
}

// scalar decodes a scalar node into dst; want names the expected kind.
func (d *decoder) scalar(n *yaml.Node, path, want string, dst any) bool {
	return yamlnode.Scalar(n, path, want, dst, d.report)
}

func (d *decoder) boolean(dst *bool) fieldFunc {
	return func(n *yaml.Node, path string) { d.scalar(n, path, "true or false", dst) }
}

// name decodes a non-empty string.
func (d *decoder) name(dst *string) fieldFunc {
	return func(n *yaml.Node, path string) {
		if d.scalar(n, path, "a name", dst) && *dst == "" {
			d.fail(n, path, "is empty")
		}
	}
}

// check is a value rule: it returns what is wrong with v, or "".
type check[T int | int64 | uint64 | float64] func(v T) string

func nonNegative[T int | int64 | uint64 | float64](v T) string {
	if v < 0 {
		return fmt.Sprintf("%v is negative", v)
	}
	return ""
}

func positive[T int | int64 | uint64 | float64](v T) string {
	if !(v > 0) {
		return fmt.Sprintf("%v, want > 0", v)
	}
	return ""
}

func atLeastOne[T int | int64 | uint64 | float64](v T) string {
	if v < 1 {
		return fmt.Sprintf("%v, want at least 1", v)
	}
	return ""
}

// between accepts lo..hi; below a bound of 0 or 1 (other than a fraction's
// 0..1) it says so as nonNegative and atLeastOne do, beyond hi it names
// the range.
func between[T int | int64 | uint64 | float64](lo, hi T) check[T] {
	return func(v T) string {
		switch {
		case v < lo && lo == 0 && hi != 1:
			return nonNegative(v)
		case v < lo && lo == 1:
			return atLeastOne(v)
		case v < lo || v > hi:
			return fmt.Sprintf("%v is outside %v..%v", v, lo, hi)
		}
		return ""
	}
}

// upTo accepts a value in 0..hi (vocab's bounds).
func upTo[T int | int64 | uint64 | float64](hi T) check[T] { return between(0, hi) }

// positiveUpTo accepts a value above 0, at most hi (vocab's bounds).
func positiveUpTo[T int | int64 | uint64 | float64](hi T) check[T] {
	return func(v T) string {
		if msg := positive(v); msg != "" {
			return msg
		}
		if v > hi {
			return fmt.Sprintf("%v is more than %v", v, hi)
		}
		return ""
	}
}

// Rules of vocab's bounds (docs/design.md "Bounds of outside input").
var (
	seconds         = upTo[float64](vocab.MaxDurationSeconds)
	positiveSeconds = positiveUpTo[float64](vocab.MaxDurationSeconds)
	points          = upTo[float64](vocab.MaxPriorityPoints)
)

// count is the rule of a policy count: lo (0 or 1)..vocab.MaxPolicyCount.
func count[T int | int64](lo T) check[T] { return between(lo, T(vocab.MaxPolicyCount)) }

// anyValue accepts every finite value.
func anyValue[T int | int64 | uint64 | float64](T) string { return "" }

// number decodes a finite number checked by rule.
func number(d *decoder, dst *float64, rule check[float64]) fieldFunc {
	return func(n *yaml.Node, path string) {
		v, ok := yamlnode.Number(n, path, d.report)
		if !ok {
			return
		}
		if msg := rule(v); msg != "" {
			d.fail(n, path, "%s", msg)
			return
		}
		*dst = v
	}
}

// integer decodes a whole number checked by rule.
func integer[T int | int64 | uint64](d *decoder, dst *T, rule check[T]) fieldFunc {
	return func(n *yaml.Node, path string) {
		v, ok := yamlnode.Integer[T](n, path, d.report)
		if !ok {
			return
		}
		if msg := rule(v); msg != "" {
			d.fail(n, path, "%s", msg)
			return
		}
		*dst = v
	}
}

// enum decodes a string that must be one of allowed; what names the kind
// ("a tier") in type errors.
func enum[T ~string](d *decoder, dst *T, what string, allowed []T) fieldFunc {
	return func(n *yaml.Node, path string) {
		var s string
		if !d.scalar(n, path, what, &s) {
			return
		}
		if !slices.Contains(allowed, T(s)) {
			d.fail(n, path, "%q is not %s", s, orList(allowed))
			return
		}
		*dst = T(s)
	}
}

// orList renders values for messages: "a, b or c".
func orList[T ~string](values []T) string {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = string(v)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// tierNames are the tiers' names, highest first.
func tierNames() []string {
	names := make([]string, len(vocab.Tiers))
	for i, t := range vocab.Tiers {
		names[i] = t.String()
	}
	return names
}

func (d *decoder) tier(dst *string) fieldFunc { return enum(d, dst, "a tier", tierNames()) }

func (d *decoder) stage(dst *vocab.AutomationStage) fieldFunc {
	return enum(d, dst, "a stage", vocab.AutomationStages)
}

func (d *decoder) mode(dst *vocab.ReclaimMode) fieldFunc {
	return enum(d, dst, "a mode", vocab.ReclaimModes)
}

func (d *decoder) class(dst *vocab.ReclaimClass) fieldFunc {
	return enum(d, dst, "a class", vocab.ReclaimClasses)
}

// instant decodes an RFC 3339 time.
func (d *decoder) instant(dst *time.Time) fieldFunc {
	return func(n *yaml.Node, path string) {
		t, ok := yamlnode.Time(n, path, d.report)
		if !ok {
			return
		}
		// The canonical body writes times in UTC as JSON, which carries
		// years 0..9999 only: an offset must not push a time out of them.
		if y := t.UTC().Year(); y < vocab.MinPolicyYear || y > vocab.MaxPolicyYear {
			d.fail(n, path, "%s is year %d in UTC, want a time in %d..%d", t.Format(time.RFC3339), y, vocab.MinPolicyYear, vocab.MaxPolicyYear)
			return
		}
		*dst = t
	}
}

// names decodes a list of non-empty names.
func (d *decoder) names(dst *[]string) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := []string{}
		d.list(n, path, func(c *yaml.Node, at string) {
			var s string
			d.name(&s)(c, at)
			out = append(out, s)
		})
		*dst = out
	}
}

// decodeRoot decodes every top-level section over p.
func (d *decoder) decodeRoot(root *yaml.Node, p *Policy) {
	d.mapping(root, "", fields{
		"version":            func(*yaml.Node, string) {}, // checked by version
		"tier_base":          d.numbers(p.TierBase, tierName, between(-vocab.MaxPriorityPoints, vocab.MaxPriorityPoints)),
		"aging":              d.aging(root, &p.Aging),
		"fair_share":         d.fairShare(&p.FairShare),
		"reservation":        d.reservation(&p.Reservation),
		"preemption":         d.preemption(&p.Preemption),
		"placement":          enum(d, &p.Placement, "a placement rule", scheduling.PlacementRules),
		"queues":             d.queues(&p.Queues),
		"quotas":             d.quotas(&p.Quotas),
		"pools":              d.pools(&p.Pools),
		"shards":             d.shards(&p.Shards),
		"protection_windows": d.windows(&p.ProtectionWindows),
		"reclaim":            d.reclaim(&p.Reclaim),
		"notifications":      d.notifications(&p.Notifications),
		"drills":             d.drills(p.Drills),
		"automation":         d.automation(p.Automation),
		"simulation":         d.simulation(&p.Simulation),
	})
}

// numbers decodes a mapping of names to numbers checked by rule into dst
// (keys already there keep their value unless the file names them); a name
// that key refuses is a problem at the key.
func (d *decoder) numbers(dst map[string]float64, key func(string) string, rule check[float64]) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.entries(n, path, func(k, v *yaml.Node, at string) {
			if msg := key(k.Value); msg != "" {
				d.fail(k, at, "%s", msg)
				return
			}
			x := math.NaN()
			number(d, &x, rule)(v, at)
			if !math.IsNaN(x) {
				dst[k.Value] = x
			}
		})
	}
}

// tierName refuses a name that is not a tier's.
func tierName(name string) string {
	if !slices.Contains(tierNames(), name) {
		return fmt.Sprintf("%q is not %s", name, orList(tierNames()))
	}
	return ""
}

// anyName accepts every name.
func anyName(string) string { return "" }

func (d *decoder) aging(root *yaml.Node, a *Aging) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"enabled":     d.boolean(&a.Enabled),
			"step_points": number(d, &a.StepPoints, points),
			"interval_s":  number(d, &a.IntervalSeconds, seconds),
			"cap_points":  number(d, &a.CapPoints, points),
		})
		if a.Enabled && a.IntervalSeconds == 0 {
			d.fail(d.lineNode(path+".interval_s", n), path+".interval_s", "is 0 with aging enabled, want > 0")
		}
	}
}

func (d *decoder) fairShare(f *FairShare) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"enabled":     d.boolean(&f.Enabled),
			"weight":      number(d, &f.Weight, points),
			"half_life_s": number(d, &f.HalfLifeSeconds, seconds),
			"project_weights": func(n *yaml.Node, path string) {
				f.ProjectWeights = map[string]float64{}
				d.numbers(f.ProjectWeights, anyName, positiveUpTo[float64](vocab.MaxProjectWeight))(n, path)
			},
		})
	}
}

func (d *decoder) reservation(r *Reservation) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"enabled": d.boolean(&r.Enabled),
			"depth":   integer(d, &r.Depth, count(0)),
		})
	}
}

func (d *decoder) preemption(p *Preemption) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"enabled":                    d.boolean(&p.Enabled),
			"min_runtime_s":              number(d, &p.MinRuntimeSeconds, seconds),
			"max_preemptions":            integer(d, &p.MaxPreemptions, count(0)),
			"window_s":                   number(d, &p.WindowSeconds, seconds),
			"save_restore_s":             number(d, &p.SaveRestoreSeconds, seconds),
			"grace_s":                    number(d, &p.GraceSeconds, seconds),
			"require_verified_resume":    d.boolean(&p.RequireVerifiedResume),
			"release_without_checkpoint": d.boolean(&p.ReleaseWithoutCheckpoint),
			"verify_resume_timeout_s":    number(d, &p.VerifyResumeTimeoutSeconds, positiveSeconds),
			"recompute_timeout_s":        number(d, &p.RecomputeTimeoutSeconds, positiveSeconds),
			"min_verified_resumes":       integer(d, &p.MinVerifiedResumes, count(1)),
			"max_resume_failure_rate":    number(d, &p.MaxResumeFailureRate, between(0.0, 1.0)),
			"evidence_window_s":          number(d, &p.EvidenceWindowSeconds, positiveSeconds),
		})
	}
}

// required reports a problem for each key of item not in the file.
func (d *decoder) required(item *yaml.Node, path string, keys ...string) {
	for _, k := range keys {
		if !d.has(yamlnode.Join(path, k)) {
			d.fail(item, yamlnode.Join(path, k), "is required")
		}
	}
}

func (d *decoder) queues(dst *[]Queue) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := []Queue{}
		first := map[string]string{}
		var minSum float64
		var minAt []string // the queues with a min_share, for the sum's message
		d.list(n, path, func(c *yaml.Node, at string) {
			var q Queue
			if !d.mapping(c, at, fields{
				"name":               d.name(&q.Name),
				"tier":               d.tier(&q.Tier),
				"share":              number(d, &q.Share, upTo[float64](vocab.MaxProjectWeight)),
				"max_wait_s":         integer(d, &q.MaxWaitSeconds, upTo[int64](vocab.MaxDurationSeconds)),
				"protected":          d.boolean(&q.Protected),
				"low_risk":           d.boolean(&q.LowRisk),
				"aging_ceiling_tier": d.tier(&q.AgingCeilingTier),
				"aging_cap_points": func(n *yaml.Node, path string) {
					var v float64
					number(d, &v, points)(n, path)
					q.AgingCapPoints = &v
				},
				"min_share": number(d, &q.MinShare, between(0.0, 1.0)),
				"max_share": number(d, &q.MaxShare, maxShare),
			}) {
				return
			}
			d.required(c, at, "name", "tier")
			q.ProtectionExplicit = d.has(at+".protected") || d.has(at+".low_risk")
			d.agingCeiling(c, at, &q)
			if prev, ok := first[q.Name]; ok && q.Name != "" {
				d.fail(d.lineNode(at+".name", c), at+".name", "%q repeats %s", q.Name, prev)
			} else {
				first[q.Name] = at
			}
			if q.MaxShare > 0 && q.MinShare > q.MaxShare {
				d.fail(d.lineNode(at+".max_share", c), at+".max_share", "%v is below min_share %v, want min_share ≤ max_share", q.MaxShare, q.MinShare)
			}
			if q.MinShare > 0 {
				minSum += q.MinShare
				minAt = append(minAt, fmt.Sprintf("%s %v", q.Name, q.MinShare))
				// A sum past 1 promises more than a pool holds; the queue
				// that passes it is named (every queue's share applies in
				// every pool). The small tolerance absorbs decimal rounding.
				if minSum > 1+1e-9 {
					d.fail(d.lineNode(at+".min_share", c), at+".min_share", "the queues' min_share add up to %v (%s), want at most 1: each is a fraction of every pool's GPUs",
						math.Round(minSum*1e6)/1e6, strings.Join(minAt, " + "))
				}
			}
			out = append(out, q)
		})
		*dst = out
	}
}

// agingCeiling checks a queue's aging ceiling tier: never production, and
// not below the queue's own tier (docs/design.md §4).
func (d *decoder) agingCeiling(c *yaml.Node, at string, q *Queue) {
	if q.AgingCeilingTier == "" || q.Tier == "" {
		return
	}
	path := at + ".aging_ceiling_tier"
	ceiling, err1 := vocab.ParseTier(q.AgingCeilingTier)
	own, err2 := vocab.ParseTier(q.Tier)
	switch {
	case err1 != nil || err2 != nil:
	case ceiling == vocab.TierProduction:
		d.fail(d.lineNode(path, c), path, "production is not allowed: aging never lifts a job into production (docs/design.md invariant 5)")
	case ceiling < own:
		d.fail(d.lineNode(path, c), path, "%s is below the queue's tier %s", q.AgingCeilingTier, q.Tier)
	}
}

// maxShare accepts a queue cap: a fraction above 0, at most 1.
func maxShare(v float64) string {
	if v <= 0 || v > 1 {
		return fmt.Sprintf("%v is outside (0, 1]: a cap is a fraction of the pool above 0 (leave max_share out for no cap)", v)
	}
	return ""
}

func (d *decoder) quotas(dst *[]Quota) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := []Quota{}
		first := map[[2]string]string{}
		d.list(n, path, func(c *yaml.Node, at string) {
			var q Quota
			if !d.mapping(c, at, fields{
				"project":               d.name(&q.Project),
				"pool":                  d.name(&q.Pool),
				"nominal_milli":         integer(d, &q.NominalMilli, quotaMilli),
				"borrowing_limit_milli": integer(d, &q.BorrowingLimitMilli, quotaMilli),
			}) {
				return
			}
			d.required(c, at, "project", "pool")
			key := [2]string{q.Project, q.Pool}
			if prev, ok := first[key]; ok {
				d.fail(c, at, "project %q in pool %q repeats %s", q.Project, q.Pool, prev)
			} else {
				first[key] = at
			}
			out = append(out, q)
		})
		*dst = out
	}
}

func (d *decoder) pools(dst *map[string]Pool) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := map[string]Pool{}
		d.entries(n, path, func(k, v *yaml.Node, at string) {
			var pl Pool
			if d.mapping(v, at, fields{"stage": d.stage(&pl.Stage)}) {
				d.required(v, at, "stage")
			}
			out[k.Value] = pl
		})
		*dst = out
	}
}

var shardName = regexp.MustCompile(ShardNamePattern)

// shards decodes `shards:`, shard name → its pools: a name that is not a
// shard name (ShardNamePattern) is a problem at the shard, a pool listed
// twice (in one shard or two) at its second mention, naming the first.
func (d *decoder) shards(dst *map[string][]string) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := map[string][]string{}
		seen := map[string]string{} // pool → the field that first listed it
		d.entries(n, path, func(k, v *yaml.Node, at string) {
			if !shardName.MatchString(k.Value) {
				d.fail(k, at, "%q is not a shard name: want lower-case letters, digits, '-' or '_' (%s)", k.Value, ShardNamePattern)
			}
			var pools []string
			d.list(v, at, func(c *yaml.Node, cat string) {
				var pool string
				d.name(&pool)(c, cat)
				if pool == "" {
					return
				}
				if first, ok := seen[pool]; ok {
					d.fail(c, cat, "pool %q is already in a shard (%s): a pool is in one shard only", pool, first)
					return
				}
				seen[pool] = cat
				pools = append(pools, pool)
			})
			out[k.Value] = pools
		})
		*dst = out
	}
}

func (d *decoder) windows(dst *[]Window) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := []Window{}
		d.list(n, path, func(c *yaml.Node, at string) {
			var w Window
			if !d.mapping(c, at, fields{
				"name":   d.name(&w.Name),
				"start":  d.instant(&w.Start),
				"end":    d.instant(&w.End),
				"queues": d.names(&w.Queues),
			}) {
				return
			}
			d.required(c, at, "name", "start", "end")
			if !w.Start.IsZero() && !w.End.IsZero() && !w.End.After(w.Start) {
				d.fail(d.lineNode(at+".end", c), at+".end", "must be after start (%s)", w.Start.Format(time.RFC3339))
			}
			out = append(out, w)
		})
		*dst = out
	}
}

func (d *decoder) reclaim(r *Reclaim) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"enabled":              d.boolean(&r.Enabled),
			"scan_interval_s":      number(d, &r.ScanIntervalSeconds, positiveSeconds),
			"observation_window_s": number(d, &r.ObservationWindowSeconds, positiveSeconds),
			"idle_gpu_percent":     integer(d, &r.IdleGPUPercent, between(0, vocab.MaxPercent)),
			"idle_max_bursts":      integer(d, &r.IdleMaxBursts, count(0)),
			"idle_memory_mib":      integer(d, &r.IdleMemoryMiB, upTo[int64](vocab.MaxGPUMemoryMiB)),
			"dispute_window_s":     number(d, &r.DisputeWindowSeconds, positiveSeconds),
			"notify_window_s":      number(d, &r.NotifyWindowSeconds, positiveSeconds),
			"confirm_window_s":     number(d, &r.ConfirmWindowSeconds, positiveSeconds),
			"default_mode":         d.mode(&r.DefaultMode),
			"rules": func(n *yaml.Node, path string) {
				rules := []ModeRule{}
				d.list(n, path, func(c *yaml.Node, at string) {
					var m ModeRule
					if d.mapping(c, at, fields{
						"pool":  d.name(&m.Pool),
						"queue": d.name(&m.Queue),
						"class": d.class(&m.Class),
						"mode":  d.mode(&m.Mode),
					}) {
						d.required(c, at, "mode")
					}
					rules = append(rules, m)
				})
				r.Rules = rules
			},
		})
	}
}

func (d *decoder) simulation(s *Simulation) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"pool":                d.name(&s.Pool),
			"projects":            integer(d, &s.Projects, count(1)),
			"seed":                integer(d, &s.Seed, anyValue),
			"cycle_interval_s":    integer(d, &s.CycleIntervalSeconds, between[int64](1, vocab.MaxDurationSeconds)),
			"starvation_factor":   number(d, &s.StarvationFactor, positiveUpTo[float64](vocab.MaxGrowthFactor)),
			"trace_quotas":        d.boolean(&s.TraceQuotas),
			"background_step_s":   integer(d, &s.BackgroundStepS, between[int64](0, vocab.MaxDurationSeconds)),
			"cycle_period_s":      integer(d, &s.CyclePeriodSeconds, between[int64](0, vocab.MaxDurationSeconds)),
			"locality_relax_s":    integer(d, &s.LocalityRelaxSeconds, between[int64](0, vocab.MaxDurationSeconds)),
			"background_by_quota": d.boolean(&s.BackgroundByQuota),
			"background_placement": func(n *yaml.Node, path string) {
				d.name(&s.BackgroundPlacement)(n, path)
				if s.BackgroundPlacement != "pack" && s.BackgroundPlacement != "random" {
					d.fail(n, path, "%q, want pack or random", s.BackgroundPlacement)
				}
			},
			"recovery": func(n *yaml.Node, path string) {
				r := &s.Recovery
				d.mapping(n, path, fields{
					"tiers": func(n *yaml.Node, path string) {
						tiers := []string{}
						d.list(n, path, func(c *yaml.Node, at string) {
							var t string
							d.tier(&t)(c, at)
							tiers = append(tiers, t)
						})
						r.Tiers = tiers
					},
					"probability":           number(d, &r.Probability, between(0.0, 1.0)),
					"checkpoint_interval_s": integer(d, &r.CheckpointIntervalSeconds, between[int64](1, vocab.MaxDurationSeconds)),
					"verified_resumes":      integer(d, &r.VerifiedResumes, count(0)),
				})
			},
		})
	}
}

// drills decodes the resume drill rule over dst (Default's).
func (d *decoder) drills(dst *Drills) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"auto_in_trial":       d.boolean(&dst.AutoInTrial),
			"per_profile_per_day": integer(d, &dst.PerProfilePerDay, count(1)),
		})
	}
}

// automation decodes the readiness rule over dst (Default's).
func (d *decoder) automation(dst *Automation) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, fields{
			"recovery_loss_budget_gpu_s_per_day": number(d, &dst.RecoveryLossBudgetGPUSecondsPerDay, upTo[float64](vocab.MaxGPUs*86400)),
			"readiness": func(n *yaml.Node, path string) {
				r := &dst.Readiness
				d.mapping(n, path, fields{
					"window_s": number(d, &r.WindowSeconds, func(v float64) string {
						if m := positive(v); m != "" {
							return m
						}
						if v > MaxReadinessWindowSeconds {
							return fmt.Sprintf("%s s is longer than %d s (45 days: readiness reads two windows, a queue report at most 90 days)",
								strconv.FormatFloat(v, 'f', -1, 64), MaxReadinessWindowSeconds)
						}
						return ""
					}),
					"min_reason_share":            number(d, &r.MinReasonShare, between(0.0, 1.0)),
					"max_not_yet_evaluated_share": number(d, &r.MaxNotYetEvaluatedShare, between(0.0, 1.0)),
					"min_observed_share":          number(d, &r.MinObservedShare, between(0.0, 1.0)),
					"freshness_s":                 number(d, &r.FreshnessSeconds, positiveSeconds),
					"longest_wait_floor_s":        number(d, &r.LongestWaitFloorSeconds, seconds),
					"max_longest_wait_growth":     number(d, &r.MaxLongestWaitGrowth, upTo[float64](vocab.MaxGrowthFactor)),
					"max_starving_jobs":           integer(d, &r.MaxStarvingJobs, count(0)),
					"max_key_jobs_over_objective": integer(d, &r.MaxKeyJobsOverObjective, count(0)),
				})
			},
		})
	}
}
