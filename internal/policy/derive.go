package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"

	"github.com/gpugov/gpugov/internal/vocab"
)

// MaxQuotaMilli bounds a quota's nominal and borrowing limit, in milli-GPU
// (one million GPUs): well above any pool, and small enough that the quota
// accounting's products of two milli-GPU amounts cannot overflow
// (scheduling.QuotaLedger).
const MaxQuotaMilli = vocab.MaxQuotaMilli

// quotaMilli is the value rule of a quota's nominal and borrowing limit.
func quotaMilli(v int64) string {
	if msg := nonNegative(v); msg != "" {
		return msg
	}
	if v > MaxQuotaMilli {
		return fmt.Sprintf("%d is more than %d milli-GPU", v, MaxQuotaMilli)
	}
	return ""
}

// ValidateQuota checks one quota as Load checks a `quotas:` entry: project
// and pool named, nominal and borrowing limit in 0..MaxQuotaMilli. It
// returns the first problem's field (its JSON name: project, pool,
// nominal_milli, borrowing_limit_milli) and message, or "", "".
func ValidateQuota(q Quota) (field, message string) {
	switch {
	case q.Project == "":
		return "project", "is empty"
	case q.Pool == "":
		return "pool", "is empty"
	}
	if msg := quotaMilli(q.NominalMilli); msg != "" {
		return "nominal_milli", msg
	}
	if msg := quotaMilli(q.BorrowingLimitMilli); msg != "" {
		return "borrowing_limit_milli", msg
	}
	return "", ""
}

// FromCanonical decodes a stored policy version's body (Canonical, possibly
// re-encoded by PostgreSQL's jsonb, which reorders keys) back into the
// policy it was made from, with the default Simulation section (which the
// body leaves out; KeepUnhashed takes such fields from the file's policy).
// Serve's policy in force is the decoded active version (docs/design.md §4),
// so a field serve reads must be in the body: only top-level fields tagged
// json:"-" are restored by KeepUnhashed; a nested one would be lost. It returns an error for a body
// that is not such a document (unknown fields included). The decoded policy
// has the body's Hash when the body was made by Canonical; callers that must
// know (deriving a version) compare.
func FromCanonical(body []byte) (*Policy, error) {
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("policy version body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("policy version body: data after the document")
	}
	if p.Version != FormatV1 {
		return nil, fmt.Errorf("policy version body: version %q, want %q", p.Version, FormatV1)
	}
	p.Simulation = Default().Simulation
	return &p, nil
}

// WithQuota returns a copy of p in which q is the quota of (q.Project,
// q.Pool) — replacing that pair's entry in place, or appended when p has
// none — and the entry it replaced (nil when appended). Nothing else
// differs, so the copy's Hash differs from p's exactly when the quota
// does; p is not changed. It is how a quota change through the API makes
// a policy version derived from the active one (docs/design.md §4).
func (p *Policy) WithQuota(q Quota) (*Policy, *Quota) {
	c := *p
	c.Quotas = slices.Clone(p.Quotas)
	for i := range c.Quotas {
		if c.Quotas[i].Project == q.Project && c.Quotas[i].Pool == q.Pool {
			before := c.Quotas[i]
			c.Quotas[i] = q
			return &c, &before
		}
	}
	c.Quotas = append(c.Quotas, q)
	return &c, nil
}

// WithoutQuota returns a copy of p without the quota of (project, pool) —
// every entry of that pair, so the project is unlimited in the pool — and
// the first entry it removed (nil when p has none; the copy then has p's
// Hash). The other entries keep their order and nothing else differs; p
// is not changed. It is how an experiment's restore re-applies the removal
// of a quota made during its window (docs/design.md §4, "Experiments").
func (p *Policy) WithoutQuota(project, pool string) (*Policy, *Quota) {
	c := *p
	c.Quotas = make([]Quota, 0, len(p.Quotas))
	var removed *Quota
	for _, q := range p.Quotas {
		if q.Project == project && q.Pool == pool {
			if removed == nil {
				r := q
				removed = &r
			}
			continue
		}
		c.Quotas = append(c.Quotas, q)
	}
	return &c, removed
}

// KeepUnhashed sets every top-level field of p that Canonical leaves out
// (tagged json:"-", e.g. Simulation) to from's value: those fields are not
// part of the version, so a decoded version takes them from the policy file
// that is loaded. A nil from changes nothing.
func (p *Policy) KeepUnhashed(from *Policy) {
	if from == nil {
		return
	}
	dst, src := reflect.ValueOf(p).Elem(), reflect.ValueOf(from).Elem()
	for i := range dst.NumField() {
		if dst.Type().Field(i).Tag.Get("json") == "-" {
			dst.Field(i).Set(src.Field(i))
		}
	}
}
