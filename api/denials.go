package api

import (
	"context"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"

	"github.com/gpugov/gpugov/store"
)

// Denial auditing: every 401 and 403 of a /v1 route is an access_denied
// audit entry (store.AuditAccessDenied) — actor the token's name, or
// "anonymous" (no token) or "unknown-token" (never the token itself);
// subject the request path; evidence method, route, status, role, project,
// node, the message, and suppressed: the denials of the same actor, route
// and status coalesced since that key's previous entry; reason the message,
// cut to DenialReasonBytes (it can echo request input, such as a project
// name). Bounds (docs/design.md §2 "Roles and tenancy"): one entry per key
// per DenialWindow. The denials of callers without a valid token
// ("anonymous", "unknown-token") also share a budget of DenialBurst entries
// at once refilled at DenialRate per second, so a flood of them writes at
// most DenialRate rows a second whatever it varies. Authenticated denials
// (a real token refused a route or another project's data) are not charged
// to that budget — an anonymous flood cannot keep them out of the log — and
// always get their coalesced entry: their keys are bounded by the token
// names × routes × two statuses. Keys expire after DenialWindow.
const (
	// DenialWindow is how long further denials of one key are coalesced.
	DenialWindow = time.Minute
	// DenialRate is the most access_denied entries written per second, sustained.
	DenialRate = 1.0
	// DenialBurst is how many access_denied entries may be written at once.
	DenialBurst = 60
	// DenialReasonBytes caps an access_denied entry's reason (the denial
	// message, which can echo request input); a longer one is cut at a
	// UTF-8 boundary and ends with "…".
	DenialReasonBytes = 512
)

// AuditAppender is the part of *store.Store denial auditing uses.
type AuditAppender interface {
	AppendAudit(ctx context.Context, e store.AuditEntry) error
}

// denialKey identifies denials coalesced together.
type denialKey struct {
	actor, route string
	status       int
}

// denialSlot is a key's window: when its last entry was written and how
// many denials were suppressed since.
type denialSlot struct {
	written    time.Time
	suppressed int
}

// denialAuditor decides which denials are written.
type denialAuditor struct {
	mu     sync.Mutex
	slots  map[denialKey]*denialSlot
	global *rate.Limiter
}

func newDenialAuditor() *denialAuditor {
	return &denialAuditor{slots: map[denialKey]*denialSlot{}, global: rate.NewLimiter(DenialRate, DenialBurst)}
}

// admit reports whether the denial of k at now is written, and how many of
// k's denials were suppressed before it (reset when admitted). Only
// unauthenticated denials are charged to the shared budget.
func (d *denialAuditor) admit(k denialKey, authenticated bool, now time.Time) (bool, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, s := range d.slots { // expire: bounded by the keys, cheap
		if now.Sub(s.written) >= DenialWindow && s.suppressed == 0 {
			delete(d.slots, key)
		}
	}
	s, ok := d.slots[k]
	if ok && now.Sub(s.written) < DenialWindow {
		s.suppressed++
		return false, 0
	}
	if !authenticated && !d.global.AllowN(now, 1) {
		if !ok {
			s = &denialSlot{written: now}
			d.slots[k] = s
		}
		s.suppressed++
		return false, 0
	}
	suppressed := 0
	if ok {
		suppressed = s.suppressed
	}
	d.slots[k] = &denialSlot{written: now}
	return true, suppressed
}

// auditDenials runs the rest of the chain and audits a 401 or 403 answer.
func (s *Server) auditDenials(c *gin.Context) {
	c.Next()
	status := c.Writer.Status()
	if status != http.StatusUnauthorized && status != http.StatusForbidden {
		return
	}
	aa, ok := s.store.(AuditAppender)
	if !ok {
		return
	}
	actor := "anonymous"
	if c.GetHeader("Authorization") != "" {
		actor = "unknown-token"
	}
	p, known := callerPrincipal(c)
	if known {
		actor = p.Name
	}
	now := s.now()
	write, suppressed := s.denials.admit(denialKey{actor: actor, route: routeKey(c), status: status}, known, now)
	if !write {
		return
	}
	msg := capReason(deniedMessage(c), DenialReasonBytes)
	ev := map[string]any{"method": c.Request.Method, "route": c.FullPath(), "status": status, "suppressed": suppressed}
	if known {
		ev["role"], ev["project"] = string(p.Role), p.Project
		if p.Node != "" {
			ev["node"] = p.Node
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), s.storeTimeout)
	defer cancel()
	path := c.Request.URL.Path
	if len(path) > 256 {
		path = path[:256]
	}
	if err := aa.AppendAudit(ctx, store.AuditEntry{At: now, Actor: actor, Action: store.AuditAccessDenied, Subject: path,
		Reason: msg, Evidence: ev}); err != nil {
		s.log.Warn("api: auditing a denial failed", "route", c.FullPath(), "status", status, "err", err)
	}
}

// deniedKey is the gin context key of the message of a 401 or 403.
const deniedKey = "gpugov.denied"

// deniedMessage returns the message writeError recorded for a denial.
func deniedMessage(c *gin.Context) string { return c.GetString(deniedKey) }

// capReason cuts s to at most n bytes at a UTF-8 boundary, ending it with
// "…" (counted in n) when cut.
func capReason(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
