package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Access: which roles may call each route (docs/design.md §2 "Roles and
// tenancy"). routeAccess is the one table of it; authorize enforces it for
// every /v1 route right after authentication, before a handler reads the
// request, and a route missing from it is refused to every role (fail
// closed; TestEveryRouteEveryRole fails for it). What a role may see within
// a route — a submitter its own project's jobs, preemptions, reclaims,
// reports, quota requests and notifications; an agent its own node — the
// handlers check.

// access is a route's rule: public needs no token; otherwise roles lists the
// roles whose tokens may call it.
type access struct {
	public bool
	roles  []vocab.Role
}

// Role sets of routeAccess.
var (
	public    = access{public: true}
	people    = access{roles: []vocab.Role{vocab.RoleSubmitter, vocab.RoleOperator, vocab.RoleAdmin}}
	staff     = access{roles: []vocab.Role{vocab.RoleOperator, vocab.RoleAdmin}}
	adminOnly = access{roles: []vocab.Role{vocab.RoleAdmin}}
	// nodeAgent routes: an agent for its own node (nodes.go), operators and admins.
	nodeAgent = access{roles: []vocab.Role{vocab.RoleAgent, vocab.RoleOperator, vocab.RoleAdmin}}
	// environment: a prerequisite, reported by the job's project, a node
	// agent of the job's pool (a prerequisite is a pending job's environment,
	// before it has a node; the handler checks the pool) or staff.
	environment = access{roles: []vocab.Role{vocab.RoleSubmitter, vocab.RoleAgent, vocab.RoleOperator, vocab.RoleAdmin}}
)

// routeAccess maps "METHOD gin-full-path" to its rule, for every route the
// server registers.
var routeAccess = map[string]access{
	"GET /healthz":                         public,
	"GET /readyz":                          public,
	"GET /metrics":                         public,
	"GET /v1/openapi.json":                 public,
	"POST /v1/jobs":                        people, // a submitter to its own project (spec.go)
	"GET /v1/jobs":                         people, // a submitter's own project's
	"GET /v1/jobs/:id":                     people,
	"PATCH /v1/jobs/:id":                   people,
	"PUT " + routePrerequisite:             environment,
	"GET /v1/jobs/:id/events":              people,
	"POST /v1/jobs/:id/cancel":             people,
	"POST /v1/jobs/:id/hold":               people,
	"POST /v1/jobs/:id/release":            people,
	"POST /v1/jobs/:id/complete":           people,
	"POST /v1/jobs/:id/drill":              staff,
	"GET /v1/queues":                       people,
	"GET /v1/inventory":                    people,
	"POST " + routeNodeInventory:           nodeAgent,
	"POST " + routeNodeSamples:             nodeAgent,
	"GET " + routeNodeRun:                  nodeAgent,
	"POST " + routeRunCheckpoints:          nodeAgent,
	"GET /v1/preemptions":                  people, // a submitter's: those of its project's jobs, either side
	"GET /v1/preemptions/:id":              people,
	"GET /v1/reclaims":                     people, // a submitter's: its project's allocations
	"POST /v1/reclaims/:id/confirm":        staff,
	"POST /v1/reclaims/:id/keep":           people, // the owning project only
	"POST /v1/reclaims/:id/dispute":        people, // the owning project only
	"POST /v1/reclaims/:id/reject-dispute": staff,
	"GET /v1/audit":                        staff,
	"GET /v1/notifications":                people,
	"GET /v1/quotas":                       people,
	"PUT /v1/quotas/:pool/:project":        adminOnly,
	"POST /v1/quota-requests":              people, // for its own project
	"GET /v1/quota-requests":               people,
	"POST /v1/quota-requests/:id/approve":  adminOnly,
	"POST /v1/quota-requests/:id/deny":     adminOnly,
	"POST /v1/policies":                    adminOnly,
	"GET /v1/policies":                     staff,
	"GET /v1/policies/:hash":               staff,
	"GET /v1/policies/:hash/diff/:other":   staff,
	"GET /v1/pools/:pool/readiness":        people,
	"GET " + routeReportQueues:             people, // scoped to a submitter's project
	"GET " + routeReportWaitReasons:        people,
	"GET " + routeReportStarvation:         people,
	"GET " + routeReportCompare:            people,
	"POST /v1/experiments":                 adminOnly,
	"GET /v1/experiments":                  people, // read-only for submitters
	"GET /v1/experiments/:id":              people,
	"POST /v1/experiments/:id/promote":     adminOnly,
	"POST /v1/experiments/:id/abort":       adminOnly,
}

// routeKey is routeAccess's key of a request.
func routeKey(c *gin.Context) string { return c.Request.Method + " " + c.FullPath() }

// authorize answers 403 unless routeAccess lets the caller's role call the
// route; an agent calling a node's route must be that node's agent.
func (s *Server) authorize(c *gin.Context) {
	p := principal(c)
	a, ok := routeAccess[routeKey(c)]
	if !ok {
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "", "%s %s has no access rule: refused to every token", c.Request.Method, c.FullPath()))
		return
	}
	if !slices.Contains(a.roles, p.Role) {
		// The request's own path, not the route's pattern
		// ("PUT /v1/quotas/:pool/:project" spoke gin).
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "", "only %s may call %s %s (this token is %s)",
			rolesText(a.roles), c.Request.Method, clip(c.Request.URL.Path, maxEchoedMessage), aRole(p.Role)))
		return
	}
	if node := c.Param("name"); p.Role == vocab.RoleAgent && strings.HasPrefix(c.FullPath(), "/v1/nodes/") && node != p.Node {
		writeError(c, forbiddenNode(p, node))
		return
	}
	c.Next()
}

// forbiddenNode is the 403 for an agent token acting for another node.
func forbiddenNode(p Principal, node string) *Error {
	return newError(http.StatusForbidden, CodeForbidden, "", "the agent token of node %q may not act for node %q", p.Node, node)
}

// rolesText names roles for a 403: "an operator or an admin".
func rolesText(roles []vocab.Role) string {
	parts := make([]string, len(roles))
	for i, r := range roles {
		parts[i] = aRole(r)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}
