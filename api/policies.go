package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// The live policy versions (docs/design.md §4, "Live policy versions"):
//
//	POST /v1/policies                 admin: store a policy file's version and make it the active one
//	GET  /v1/policies                 operator, admin: the stored versions, newest first
//	GET  /v1/policies/{hash}          operator, admin: one version's body and lineage
//	GET  /v1/policies/{a}/diff/{b}    operator, admin: what differs from a to b, by variable group
//
// A version applied here is in force at the scheduler's next cycle, without
// a restart (the service applies everything it sets); the activation is
// audited (activate_policy) with the token's name and the reason.

// PolicyStore is the part of *store.Store the policy routes use. The Store
// given to New must implement it for those routes to work (StoreFrom's
// value does); otherwise they answer 500.
type PolicyStore interface {
	ActivePolicyVersion(ctx context.Context) (*store.PolicyVersion, error)
	ActivatePolicy(ctx context.Context, hash string, body json.RawMessage, actor, reason string, evidence map[string]any) (bool, error)
	ListPolicyVersions(ctx context.Context, limit int) ([]store.PolicyVersion, error)
	GetPolicyVersion(ctx context.Context, hashOrPrefix string) (*store.PolicyVersion, error)
}

// PolicyApply is the body of POST /v1/policies: the text of a
// gpugov.policy/v1 file (YAML, as `serve --policy` reads it) and why it is
// applied, both required. File names the file in error messages
// ("policy.yaml" when empty). The file's `simulation:` section is not part
// of a version and is ignored. OverrideReason lets the change through while
// a policy experiment holds a pool (audited with the activation; the
// experiment ends aborted, policy_changed, as soon as the version is
// active); without it such a change is a 409 naming the experiment.
type PolicyApply struct {
	Policy         string `json:"policy"`
	Reason         string `json:"reason"`
	File           string `json:"file,omitempty"`
	OverrideReason string `json:"override_reason,omitempty"`
	// OverrideReadiness applies the stage widenings the file asks for even
	// where the pool's readiness fails (docs/design.md §4 "Pool
	// readiness"): the admin's override, audited (override_readiness) with
	// Reason and the failed checks.
	OverrideReadiness bool `json:"override_readiness,omitempty"`
}

// PolicyApplied answers POST /v1/policies: the applied version's hash, the
// version active before (as the request read it; "" for none), whether
// anything changed (false: the policy was already the active version), and
// what differs from the previous version, by variable group, with the
// groups listed.
type PolicyApplied struct {
	Hash     string              `json:"hash"`
	Previous string              `json:"previous"`
	Changed  bool                `json:"changed"`
	Groups   []vocab.PolicyGroup `json:"groups"`
	Diff     []policy.GroupDiff  `json:"diff"`
	// Stages are the stage changes the version made (store.StageChange:
	// pool, from, to, outcome applied, overridden or initial — or "" for a
	// stored stage restored — and the readiness a widening was judged on).
	Stages []store.StageChange `json:"stages"`
}

// PolicyVersionInfo is one stored policy version without its body (which
// is immutable): DerivedFrom is the version active when it was last
// activated through the store (a quota change, POST /v1/policies, an
// experiment's switch or rollback: the lineage of its latest activation);
// BaseHash the policy-file version
// that chain started from ("" for a file version: a restart on the file
// with that hash keeps the version).
type PolicyVersionInfo struct {
	Hash        string    `json:"hash"`
	CreatedAt   time.Time `json:"created_at"`
	Active      bool      `json:"active"`
	DerivedFrom string    `json:"derived_from"`
	BaseHash    string    `json:"base_hash"`
}

// PolicyVersionList answers GET /v1/policies, newest first.
type PolicyVersionList struct {
	Versions []PolicyVersionInfo `json:"versions"`
}

// PolicyVersionDetail answers GET /v1/policies/{hash}: the version's
// metadata and its body, the resolved policy as canonical JSON (field
// names as in the policy file).
type PolicyVersionDetail struct {
	PolicyVersionInfo
	Policy json.RawMessage `json:"policy"`
}

// PolicyDiff answers GET /v1/policies/{a}/diff/{b}: the two versions'
// whole hashes and what differs from From to To, by variable group.
type PolicyDiff struct {
	From   string              `json:"from"`
	To     string              `json:"to"`
	Groups []vocab.PolicyGroup `json:"groups"`
	Diff   []policy.GroupDiff  `json:"diff"`
}

// policyRoutes adds the policy routes to the /v1 group.
func (s *Server) policyRoutes(v1 *gin.RouterGroup) {
	v1.POST("/policies", s.applyPolicy)
	v1.GET("/policies", s.listPolicies)
	v1.GET("/policies/:hash", s.getPolicy)
	v1.GET("/policies/:hash/diff/:other", s.diffPolicies)
}

// policyStore returns the store as a PolicyStore with the request's store
// context (the caller defers cancel), or answers 500.
func (s *Server) policyStore(c *gin.Context) (ps PolicyStore, ctx context.Context, cancel context.CancelFunc, ok bool) {
	if ps, ok = implements[PolicyStore](c, s.store); !ok {
		return nil, nil, func() {}, false
	}
	ctx, cancel = s.storeCtx(c)
	return ps, ctx, cancel, true
}

// applyPolicy handles POST /v1/policies (admin). It parses the file with
// the policy loader, judges each pool stage it widens on the pool's
// readiness (store.PlanStageChanges under the file's own thresholds),
// stores its version and activates it with its stage changes in one
// transaction (store.ActivatePolicyStaged: derived from the active
// version, audited with the token's name, the reason and the changed
// groups; each stage change in the pool's history), wakes the scheduler
// when it changed anything, and answers 200 with the diff against the
// version active before and the stage changes. 400: a malformed body,
// policy or reason missing, a YAML syntax error (field policy); 422: a
// file the loader refuses (each problem in details, field
// "policy.<field>", message "file:line: field: what is wrong"), a reason
// over 1024 bytes, or (code not_ready) a stage widening whose readiness
// failed without override_readiness (each failed check in details, field
// "policy.pools.<pool>.stage"); 409: a policy experiment holds a pool and
// no override_reason is given (heldByExperiment, which names it); nothing
// is stored then.
func (s *Server) applyPolicy(c *gin.Context) {
	var body PolicyApply
	if err := decodeStrict(c.Request.Body, &body, false); err != nil {
		writeError(c, err)
		return
	}
	switch {
	case body.Policy == "":
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "policy", "required: the text of a %s policy file", policy.FormatV1))
		return
	case body.Reason == "":
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "reason", "required: why, for the audit log"))
		return
	}
	name := body.File
	if name == "" {
		name = "policy.yaml"
	}
	p, err := policy.Parse(name, []byte(body.Policy))
	if err != nil {
		writeError(c, policyFileError([]byte(body.Policy), err))
		return
	}
	ps, _, cancel, ok := s.policyStore(c)
	cancel()
	if !ok {
		return
	}
	rs, ok := s.readinessStore(c)
	if !ok {
		return
	}
	// Judging a widening reads two readiness windows of records.
	ctx, cancel := context.WithTimeout(c.Request.Context(), 4*s.storeTimeout)
	defer cancel()
	out := PolicyApplied{Hash: p.Hash(), Groups: []vocab.PolicyGroup{}, Diff: []policy.GroupDiff{}, Stages: []store.StageChange{}}
	prev, err := ps.ActivePolicyVersion(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		writeError(c, err)
		return
	default:
		out.Previous = prev.Hash
		before, derr := policy.FromCanonical(prev.Body)
		if derr != nil {
			writeError(c, fmt.Errorf("api: active policy version %s: %w", prev.Hash, derr))
			return
		}
		out.Diff = orEmpty(policy.Diff(before, p))
		out.Groups = policy.Groups(out.Diff)
	}
	groups := make([]string, len(out.Groups))
	for i, g := range out.Groups {
		groups[i] = string(g)
	}
	evidence := map[string]any{"source": "api", "groups": groups, "override_readiness": body.OverrideReadiness}
	overridden := false
	if out.Hash != out.Previous {
		holder, ok := s.heldByExperiment(ctx, c, body.OverrideReason)
		if !ok {
			return
		}
		if holder != nil {
			evidence["override_experiment"], evidence["override_reason"] = holder.ID, body.OverrideReason
			overridden = true
		}
	}
	// Every stage the version widens is judged on its pool's readiness
	// under the version's own thresholds; a refusal is a 422 listing the
	// failed checks, unless the admin overrides it.
	req := store.StageChangeRequest{Stages: p.Stages(), Actor: principal(c).Name, Reason: body.Reason, Source: "api",
		PolicyHash: out.Hash, Policy: p, Override: body.OverrideReadiness, At: s.now()}
	plan, err := rs.PlanStageChanges(ctx, req)
	if err != nil {
		writeError(c, err)
		return
	}
	if store.Refused(plan) {
		writeError(c, stageRefusal(plan))
		return
	}
	out.Changed, err = rs.ActivatePolicyStaged(ctx, out.Hash, p.Canonical(), principal(c).Name, body.Reason, evidence, req, plan)
	if err != nil {
		writeError(c, policyStoreError(err, out.Hash))
		return
	}
	if plan != nil {
		out.Stages = plan
	}
	if overridden && out.Changed {
		s.endOverriddenExperiments(ctx, c, "policy "+out.Hash+" applied by "+principal(c).Name+": "+body.OverrideReason)
	}
	if out.Changed || len(plan) > 0 {
		wctx, wcancel := s.workflowCtx(c)
		defer wcancel()
		s.notifyScheduler(wctx, "policy "+out.Hash)
	}
	c.JSON(http.StatusOK, out)
}

// policyFileError turns the loader's error on data into the API's: a
// YAML syntax error is a 400 naming field policy; other problems a 422
// listing each one (field "policy.<its field>", or "policy" for the
// document as a whole; message the loader's "file:line: field: what"),
// the first repeated in field and message.
func policyFileError(data []byte, err error) *Error {
	var pe *policy.Error
	if !errors.As(err, &pe) || len(pe.Problems) == 0 {
		return newError(http.StatusUnprocessableEntity, CodeInvalid, "policy", "%v", err)
	}
	errs := make([]FieldError, len(pe.Problems))
	for i, pr := range pe.Problems {
		field := "policy"
		if pr.Field != "" {
			field += "." + pr.Field
		}
		errs[i] = FieldError{Field: field, Message: (&policy.Error{File: pe.File, Problems: []policy.Problem{pr}}).Error()}
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return newError(http.StatusBadRequest, CodeMalformed, "policy", "%s", errs[0].Message)
	}
	return invalid(errs)
}

// policyStoreError names the policy in the store's not-found answer.
func policyStoreError(err error, what string) error {
	if errors.Is(err, store.ErrNotFound) {
		return newError(http.StatusNotFound, CodeNotFound, "hash", "policy version %s not found", what)
	}
	return err
}

// orEmpty is d, or an empty list for nil (JSON [] rather than null).
func orEmpty(d []policy.GroupDiff) []policy.GroupDiff {
	if d == nil {
		return []policy.GroupDiff{}
	}
	return d
}

// policyInfoOf converts a stored version's metadata.
func policyInfoOf(v *store.PolicyVersion) PolicyVersionInfo {
	return PolicyVersionInfo{Hash: v.Hash, CreatedAt: v.CreatedAt, Active: v.Active, DerivedFrom: v.DerivedFrom, BaseHash: v.BaseHash}
}

// listPolicies handles GET /v1/policies[?limit=] (operator, admin): the
// stored versions, newest first, without their bodies.
func (s *Server) listPolicies(c *gin.Context) {
	limit, ok := listLimit(c)
	if !ok {
		return
	}
	ps, ctx, cancel, ok := s.policyStore(c)
	defer cancel()
	if !ok {
		return
	}
	vs, err := ps.ListPolicyVersions(ctx, limit)
	if err != nil {
		writeError(c, err)
		return
	}
	out := PolicyVersionList{Versions: make([]PolicyVersionInfo, 0, len(vs))}
	for i := range vs {
		out.Versions = append(out.Versions, policyInfoOf(&vs[i]))
	}
	c.JSON(http.StatusOK, out)
}

// getPolicy handles GET /v1/policies/:hash (operator, admin): the hash or a
// unique prefix of at least 8 hex digits. 404 unknown; 422 not a hash
// prefix, or an ambiguous one (field hash).
func (s *Server) getPolicy(c *gin.Context) {
	ps, ctx, cancel, ok := s.policyStore(c)
	defer cancel()
	if !ok {
		return
	}
	v, err := ps.GetPolicyVersion(ctx, c.Param("hash"))
	if err != nil {
		writeError(c, policyStoreError(err, c.Param("hash")))
		return
	}
	c.JSON(http.StatusOK, PolicyVersionDetail{PolicyVersionInfo: policyInfoOf(v), Policy: v.Body})
}

// diffPolicies handles GET /v1/policies/:hash/diff/:other (operator,
// admin): what differs from the first version to the second (policy.Diff),
// by variable group. Each is a hash or a unique prefix (as getPolicy).
func (s *Server) diffPolicies(c *gin.Context) {
	ps, ctx, cancel, ok := s.policyStore(c)
	defer cancel()
	if !ok {
		return
	}
	var sides [2]*policy.Policy
	var hashes [2]string
	for i, param := range []string{"hash", "other"} {
		v, err := ps.GetPolicyVersion(ctx, c.Param(param))
		if err != nil {
			var ve *store.ValidationError
			if errors.As(err, &ve) {
				writeError(c, invalid([]FieldError{{Field: param, Message: ve.Message}}))
				return
			}
			writeError(c, policyStoreError(err, c.Param(param)))
			return
		}
		p, err := policy.FromCanonical(v.Body)
		if err != nil {
			writeError(c, fmt.Errorf("api: policy version %s: %w", v.Hash, err))
			return
		}
		sides[i], hashes[i] = p, v.Hash
	}
	d := orEmpty(policy.Diff(sides[0], sides[1]))
	c.JSON(http.StatusOK, PolicyDiff{From: hashes[0], To: hashes[1], Groups: policy.Groups(d), Diff: d})
}
