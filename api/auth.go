package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// principalKey is the gin context key of the authenticated Principal.
const principalKey = "gpugov.principal"

// WithTokenLookup adds a shared token store (store.Store's api_tokens, which
// `gpugov token create/revoke` write): a token not in the token file is
// looked up there by its digest, on every request, so that a revocation
// takes effect at once on every replica.
func WithTokenLookup(l TokenLookup) Option { return func(s *Server) { s.tokenLookup = l } }

// authenticate resolves "Authorization: Bearer <token>" to a Principal, or
// answers 401 with a WWW-Authenticate challenge (RFC 6750). The token file's
// tokens are looked up first, then WithTokenLookup's store. The token itself
// is never logged, audited or put in a span: only its principal's name is.
func (s *Server) authenticate(c *gin.Context) {
	scheme, token, ok := strings.Cut(c.GetHeader("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		c.Header("WWW-Authenticate", `Bearer realm="gpugov"`)
		writeError(c, newError(http.StatusUnauthorized, CodeUnauthorized, "", "a bearer token is required (Authorization: Bearer <token>)"))
		return
	}
	d := DigestToken(strings.TrimSpace(token))
	p, known := s.tokens.lookupDigest(d)
	ip := c.RemoteIP()
	if !known && s.guesses.exhausted(c, ip) {
		// This address spent its unknown-token guesses: 429 before the
		// store is asked (guessLimiter).
		return
	}
	if !known && s.tokenLookup != nil {
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.storeTimeout)
		var err error
		p, known, err = s.tokenLookup.LookupToken(ctx, d[:])
		cancel()
		if err != nil {
			writeError(c, err)
			return
		}
	}
	if !known {
		// A guess: charged to its address (checked above, before the store
		// lookup), and to the one limiter all unknown tokens share.
		s.guesses.charge(ip)
		if !s.limiter.allow(c, unknownTokenKey) {
			return
		}
		c.Header("WWW-Authenticate", `Bearer realm="gpugov", error="invalid_token"`)
		writeError(c, newError(http.StatusUnauthorized, CodeUnauthorized, "", "unknown bearer token"))
		return
	}
	c.Set(principalKey, p)
	if !s.limiter.allow(c, d) {
		return
	}
	c.Next()
}

// principal returns the caller set by authenticate.
func principal(c *gin.Context) Principal {
	return c.MustGet(principalKey).(Principal)
}

// callerPrincipal returns the caller set by authenticate, if any.
func callerPrincipal(c *gin.Context) (Principal, bool) {
	v, ok := c.Get(principalKey)
	if !ok {
		return Principal{}, false
	}
	p, ok := v.(Principal)
	return p, ok
}

// forbiddenProject is the 403 for a submitter touching another project's job.
func forbiddenProject(p Principal, project string) *Error {
	return newError(http.StatusForbidden, CodeForbidden, "",
		"a %s token of project %q may not access jobs of project %q", p.Role, p.Project, project)
}
