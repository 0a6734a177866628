package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// AuditEntry is one governance action (docs/design.md invariant 6): who (Actor:
// "scheduler", a project, an operator), what (Action, e.g. "place", "hold",
// "preempt"), on what (Subject: a job, allocation, pool or policy ID), why
// (Reason) and the evidence (Evidence, stored as jsonb).
type AuditEntry struct {
	ID       int64          `db:"id"` // assigned by the database
	At       time.Time      `db:"at"`
	Actor    string         `db:"actor"`
	Action   string         `db:"action"`
	Subject  string         `db:"subject"`
	Reason   string         `db:"reason"`
	Evidence map[string]any `db:"evidence"`
}

// AppendAudit appends one entry; a zero At means now. Actor, Action and
// Subject are required (an error matching ErrInvalid names the first missing). It is not idempotent by itself: a workflow that may
// retry it should fold the append into the transaction of the action it
// records, or name its workflow step in Evidence so duplicates can be told
// apart. Errors are wrapped with "append audit".
func (s *Store) AppendAudit(ctx context.Context, e AuditEntry) error {
	if err := required("actor", e.Actor, "action", e.Action, "subject", e.Subject); err != nil {
		return fmt.Errorf("store: append audit: %w", err)
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if _, err := s.pool.Exec(ctx, insertAuditSQL, e.At, e.Actor, e.Action, e.Subject, e.Reason, evidenceJSON(e.Evidence)); err != nil {
		return fmt.Errorf("store: append audit: %w", err)
	}
	return nil
}

// AuditAccessDenied is the action of a 401 or 403 answer of the API
// (api/denials.go, coalesced): subject the request path; evidence method,
// route, status, role, project, node, suppressed.
const AuditAccessDenied = "access_denied"

// AuditTokenCreate and AuditTokenRevoke are `gpugov token create` and
// `revoke`: subject the token's ID; evidence name, role, project, node
// (never the token or its digest).
const (
	AuditTokenCreate = "token_create"
	AuditTokenRevoke = "token_revoke"
)

const insertAuditSQL = `INSERT INTO audit_log (at, actor, action, subject, reason, evidence) VALUES ($1, $2, $3, $4, $5, $6)`

func appendAuditTx(ctx context.Context, tx pgx.Tx, e AuditEntry) error {
	if _, err := tx.Exec(ctx, insertAuditSQL, e.At, e.Actor, e.Action, e.Subject, e.Reason, evidenceJSON(e.Evidence)); err != nil {
		return fmt.Errorf("audit %s %s: %w", e.Action, e.Subject, err)
	}
	return nil
}

func evidenceJSON(ev map[string]any) []byte {
	if ev == nil {
		return []byte("{}")
	}
	b, err := json.Marshal(ev)
	if err != nil {
		// Evidence comes from callers; keep the entry and say what was lost
		// rather than dropping a governance record.
		b = mustJSON(map[string]string{"unencodable_evidence": err.Error()})
	}
	return b
}

// AuditFor returns the audit entries about subject, oldest first, at most
// limit of them (all when limit ≤ 0). Errors are wrapped with "audit for".
func (s *Store) AuditFor(ctx context.Context, subject string, limit int) ([]AuditEntry, error) {
	sql := `SELECT id, at, actor, action, subject, reason, evidence FROM audit_log WHERE subject = $1 ORDER BY id`
	args := []any{subject}
	if limit > 0 {
		sql += ` LIMIT $2`
		args = append(args, limit)
	}
	out, err := queryAll[AuditEntry](ctx, s.pool, sql, args...) // evidence (jsonb) decodes into the map
	if err != nil {
		return nil, fmt.Errorf("store: audit for %s: %w", subject, err)
	}
	for i := range out {
		out[i].At = out[i].At.UTC()
	}
	return out, nil
}

// AuditFilter selects audit entries for ListAudit; empty fields match all.
// Since is inclusive and Until exclusive (zero: unbounded). Limit 0 means
// DefaultListLimit, capped at MaxListLimit. BeforeID (a NextCursor) starts
// the page after that entry: entries with a smaller ID.
type AuditFilter struct {
	Subject  string
	Action   string
	Actor    string
	Since    time.Time
	Until    time.Time
	Limit    int
	BeforeID int64
}

// ListAudit returns the audit entries matching f, newest first (by ID, the
// order of their commits' inserts), one page of them, and the cursor of the
// next page ("" when this is the last: the ID of the page's last entry, in
// decimal). Errors are wrapped with "list audit".
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, string, error) {
	limit := pageLimit(f.Limit)
	var q conditions
	if f.Subject != "" {
		q.add("subject = $%d", f.Subject)
	}
	if f.Action != "" {
		q.add("action = $%d", f.Action)
	}
	if f.Actor != "" {
		q.add("actor = $%d", f.Actor)
	}
	if !f.Since.IsZero() {
		q.add("at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		q.add("at < $%d", f.Until)
	}
	if f.BeforeID > 0 {
		q.add("id < $%d", f.BeforeID)
	}
	sql, args := q.query(`SELECT id, at, actor, action, subject, reason, evidence FROM audit_log`, "id DESC", limit+1)
	out, err := queryAll[AuditEntry](ctx, s.pool, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list audit: %w", err)
	}
	for i := range out {
		out[i].At = out[i].At.UTC()
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = strconv.FormatInt(out[limit-1].ID, 10)
	}
	return out, next, nil
}
