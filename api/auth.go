package api

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/vocab"
)

// principalKey is the gin context key of the authenticated Principal.
const principalKey = "gpugov.principal"

// authenticate resolves "Authorization: Bearer <token>" to a Principal, or
// answers 401 with a WWW-Authenticate challenge (RFC 6750).
func (s *Server) authenticate(c *gin.Context) {
	scheme, token, ok := strings.Cut(c.GetHeader("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		c.Header("WWW-Authenticate", `Bearer realm="gpugov"`)
		writeError(c, newError(http.StatusUnauthorized, CodeUnauthorized, "", "a bearer token is required (Authorization: Bearer <token>)"))
		return
	}
	p, known := s.tokens.Lookup(strings.TrimSpace(token))
	if !known {
		c.Header("WWW-Authenticate", `Bearer realm="gpugov", error="invalid_token"`)
		writeError(c, newError(http.StatusUnauthorized, CodeUnauthorized, "", "unknown bearer token"))
		return
	}
	if p.Role == vocab.RoleAgent && !agentRoute(c.FullPath()) {
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "", "an agent token may call only the node-agent routes"))
		return
	}
	c.Set(principalKey, p)
	c.Next()
}

// principal returns the caller set by authenticate.
func principal(c *gin.Context) Principal {
	return c.MustGet(principalKey).(Principal)
}

// forbiddenProject is the 403 for a submitter touching another project's job.
func forbiddenProject(p Principal, project string) *Error {
	return newError(http.StatusForbidden, CodeForbidden, "",
		"a %s token of project %q may not access jobs of project %q", p.Role, p.Project, project)
}
