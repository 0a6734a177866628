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
	d, internal := c.Request.Context().Value(internalCallKey{}).(TokenDigest)
	if !internal {
		scheme, token, ok := strings.Cut(c.GetHeader("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			c.Header("WWW-Authenticate", `Bearer realm="gpugov"`)
			writeError(c, newError(http.StatusUnauthorized, CodeUnauthorized, "", "a bearer token is required (Authorization: Bearer <token>)"))
			return
		}
		d = DigestToken(strings.TrimSpace(token))
	}
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

// internalCallKey is the context key of ServeAs's token digest. Only
// in-process callers can set a context value, so no HTTP request can claim
// one.
type internalCallKey struct{}

// ServeAs serves r through the API's own router and middleware (limits,
// authentication, routeAccess, the handlers' tenancy checks, audit) as the
// token whose SHA-256 is d, exactly as if r carried that token as its
// bearer token; r's Authorization header is ignored. The web console
// (api/console) reads and acts through it as the signed-in token, so the
// API stays the one home of access rules (docs/design.md §2 "Web
// console"). An unknown or revoked digest answers 401 and counts against
// r's client address like a guessed token.
func (s *Server) ServeAs(d TokenDigest, w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), internalCallKey{}, d))
	r.Header.Del("Authorization")
	s.engine.ServeHTTP(w, r)
}

// LookupPrincipal returns the principal of the token whose SHA-256 is d:
// the token file's first, then WithTokenLookup's store (live tokens only).
// found is false for an unknown or revoked token; err is a store failure.
// It charges no limiter: callers pass digests they already authenticated
// through ServeAs.
func (s *Server) LookupPrincipal(ctx context.Context, d TokenDigest) (p Principal, found bool, err error) {
	if p, ok := s.tokens.lookupDigest(d); ok {
		return p, true, nil
	}
	if s.tokenLookup == nil {
		return Principal{}, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.storeTimeout)
	defer cancel()
	return s.tokenLookup.LookupToken(ctx, d[:])
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
