package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Notification is one row of the submitter-notification outbox
// (docs/design.md §3, notifications): written in the transaction of the
// transition it tells of, then delivered to the project's webhook.
type Notification struct {
	// Seq orders a project's notifications: delivery follows it.
	Seq int64 `db:"seq"`
	// ID is the event ID a receiver deduplicates by ("n-…"; the same on every attempt).
	ID string `db:"id"`
	// Project is the recipient: the job's project, or
	// policy.AdminsRecipient for the admins' notifications.
	Project string `db:"project"`
	// JobID is the job the notification tells of; "" for the admins'.
	JobID     string                  `db:"job_id"`
	Kind      vocab.NotificationKind  `db:"kind"`
	Data      map[string]any          `db:"data"` // the kind's fields (docs/design.md §3)
	CreatedAt time.Time               `db:"created_at"`
	State     vocab.NotificationState `db:"state"`
	// Attempts counts the delivery attempts made; LastStatus is the last
	// answer's HTTP status (nil when none came) and LastError what was wrong
	// with it ("" after a success).
	Attempts      int        `db:"attempts"`
	LastStatus    *int       `db:"last_status"`
	LastError     string     `db:"last_error"`
	LastAttemptAt *time.Time `db:"last_attempt_at"`
	// FinishedAt is when it became delivered, dead or unrouted.
	FinishedAt *time.Time `db:"finished_at"`
}

const notificationColumns = `seq, id, project, coalesce(job_id, '') AS job_id, kind, data, created_at, state, attempts, last_status,
	coalesce(last_error, '') AS last_error, last_attempt_at, finished_at`

func (n *Notification) utc() {
	n.CreatedAt = n.CreatedAt.UTC()
	n.LastAttemptAt, n.FinishedAt = utcPtr(n.LastAttemptAt), utcPtr(n.FinishedAt)
}

// noteRow is a notification to write with its transition.
type noteRow struct {
	jobID string
	kind  vocab.NotificationKind
	data  map[string]any
}

// insertNotifications writes ns, in order, in tx at at; each row's project
// is its job's. It first takes, in project order, a transaction-scoped
// advisory lock per project involved, so that two transactions writing one
// project's notifications commit in the order of their seq values: a row
// delivered never has an earlier one of its project commit after it. The
// callers call it last in their transactions (after every row lock), which
// keeps the locks deadlock-free.
func insertNotifications(ctx context.Context, tx pgx.Tx, ns []noteRow, at time.Time) error {
	if len(ns) == 0 {
		return nil
	}
	ids := make([]string, len(ns))
	jobs := make([]string, len(ns))
	kinds := make([]string, len(ns))
	datas := make([]string, len(ns))
	for i, n := range ns {
		ids[i], jobs[i], kinds[i] = newID("n-"), n.jobID, string(n.kind)
		datas[i] = string(evidenceJSON(n.data))
	}
	if _, err := tx.Exec(ctx, `
		SELECT pg_advisory_xact_lock(hashtext('gpugov.notifications'), hashtext(p.project))
		FROM (SELECT DISTINCT project FROM jobs WHERE id = ANY($1) ORDER BY project) AS p`, jobs); err != nil {
		return fmt.Errorf("lock notification order: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO notifications (id, project, job_id, kind, data, created_at)
		SELECT u.id, j.project, u.j, u.k, u.d::jsonb, $5
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(id, j, k, d, o)
		JOIN jobs j ON j.id = u.j
		ORDER BY u.o`, ids, jobs, kinds, datas, at); err != nil {
		return fmt.Errorf("write notifications: %w", err)
	}
	return nil
}

// insertAdminNotification writes one notification for the admins
// (recipient policy.AdminsRecipient, no job) in tx at at, after the
// recipient's advisory lock, as insertNotifications does for a project.
// Callers call it last in their transactions.
func insertAdminNotification(ctx context.Context, tx pgx.Tx, kind vocab.NotificationKind, data map[string]any, at time.Time) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('gpugov.notifications'), hashtext($1))`,
		policy.AdminsRecipient); err != nil {
		return fmt.Errorf("lock notification order: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO notifications (id, project, job_id, kind, data, created_at)
		VALUES ($1, $2, NULL, $3, $4, $5)`, newID("n-"), policy.AdminsRecipient, kind, evidenceJSON(data), at); err != nil {
		return fmt.Errorf("write admins notification: %w", err)
	}
	return nil
}

// NotificationFilter selects notifications; empty fields match all.
type NotificationFilter struct {
	Project string
	JobID   string
	State   vocab.NotificationState
	Limit   int // 0 means DefaultListLimit; at most MaxListLimit
}

// ListNotifications returns the notifications matching f, newest first. A
// state outside vocab.NotificationStates is an error matching ErrInvalid
// naming "state". Other errors are wrapped with "list notifications".
func (s *Store) ListNotifications(ctx context.Context, f NotificationFilter) ([]Notification, error) {
	if f.State != "" && !f.State.Valid() {
		return nil, fmt.Errorf("store: list notifications: %w", invalidf("state", "%q is not a notification state", f.State))
	}
	out, err := queryAll[Notification](ctx, s.pool, `SELECT `+notificationColumns+` FROM notifications
		WHERE ($1 = '' OR project = $1) AND ($2 = '' OR job_id = $2) AND ($3 = '' OR state = $3)
		ORDER BY seq DESC LIMIT $4`, f.Project, f.JobID, f.State, pageLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("store: list notifications: %w", err)
	}
	for i := range out {
		out[i].utc()
	}
	return out, nil
}

// GetNotification returns notification id; errors wrap ErrNotFound.
func (s *Store) GetNotification(ctx context.Context, id string) (*Notification, error) {
	n, err := queryOne[Notification](ctx, s.pool, `SELECT `+notificationColumns+` FROM notifications WHERE id = $1`, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("store: notification %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: notification %s: %w", id, err)
	}
	n.utc()
	return &n, nil
}

// PendingNotifications returns up to limit of project's pending
// notifications in delivery (seq) order.
func (s *Store) PendingNotifications(ctx context.Context, project string, limit int) ([]Notification, error) {
	out, err := queryAll[Notification](ctx, s.pool, `SELECT `+notificationColumns+` FROM notifications
		WHERE project = $1 AND state = 'pending' ORDER BY seq LIMIT $2`, project, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: pending notifications of %s: %w", project, err)
	}
	for i := range out {
		out[i].utc()
	}
	return out, nil
}

// NotificationSweep is what SweepNotifications did.
type NotificationSweep struct {
	// Projects are the projects of routed that have pending notifications, by name.
	Projects []string
	// Unrouted counts the pending notifications just marked unrouted.
	Unrouted int64
	// Pruned counts the final notifications deleted by retention.
	Pruned int64
}

// SweepNotifications is the dispatcher's pass, in one transaction: the
// pending notifications of projects not in routed (no webhook) become
// unrouted (final at at, nothing sent); final notifications that became
// final before prunedBefore are deleted; and it returns the routed projects
// that have pending notifications. Errors are wrapped with "sweep notifications".
func (s *Store) SweepNotifications(ctx context.Context, routed []string, prunedBefore, at time.Time) (*NotificationSweep, error) {
	if routed == nil {
		routed = []string{}
	}
	out := &NotificationSweep{Projects: []string{}}
	err := s.inTx(ctx, "sweep notifications", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE notifications SET state = 'unrouted', finished_at = $2,
				last_error = 'no webhook for project ' || project || ' in the policy'
			WHERE state = 'pending' AND NOT (project = ANY($1))`, routed, at)
		if err != nil {
			return err
		}
		out.Unrouted = tag.RowsAffected()
		if tag, err = tx.Exec(ctx, `DELETE FROM notifications WHERE finished_at < $1`, prunedBefore); err != nil {
			return err
		}
		out.Pruned = tag.RowsAffected()
		return forEachRow(ctx, tx, `
			SELECT DISTINCT project FROM notifications WHERE state = 'pending' AND project = ANY($1) ORDER BY project`,
			[]any{routed}, func(rows pgx.Rows) error {
				var p string
				err := rows.Scan(&p)
				out.Projects = append(out.Projects, p)
				return err
			})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// NotificationAttempt is one delivery attempt's result.
type NotificationAttempt struct {
	At        time.Time
	Status    int    // the HTTP status; 0 when no answer came
	Error     string // what was wrong; "" with a 2xx answer
	Delivered bool   // the receiver answered 2xx: the notification is final
}

// RecordNotificationAttempt counts an attempt of pending notification id
// and keeps its status and error; a delivered attempt makes it delivered.
// It returns the state after the call: a notification no longer pending
// (delivered by an earlier attempt, dead, unrouted) is left as it is.
// Errors wrap ErrNotFound or database errors.
func (s *Store) RecordNotificationAttempt(ctx context.Context, id string, a NotificationAttempt) (vocab.NotificationState, error) {
	var status *int
	if a.Status != 0 {
		status = &a.Status
	}
	var state vocab.NotificationState
	err := s.pool.QueryRow(ctx, `
		WITH u AS (
			UPDATE notifications SET attempts = attempts + 1, last_status = $2, last_error = nullif($3, ''),
				last_attempt_at = $4,
				state = CASE WHEN $5 THEN 'delivered' ELSE state END,
				finished_at = CASE WHEN $5 THEN $4 ELSE finished_at END
			WHERE id = $1 AND state = 'pending' RETURNING state)
		SELECT state FROM u UNION ALL
		SELECT state FROM notifications WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM u)`,
		id, status, a.Error, a.At, a.Delivered).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store: notification %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: record attempt of notification %s: %w", id, err)
	}
	return state, nil
}

// FinishNotification makes pending notification id final in state (dead:
// the dead-letter record, keeping lastError when given, else the last
// attempt's; or unrouted) at at. A final notification is left as it is, so
// retries are safe; it returns the state after the call. A state that is
// not final is an error matching ErrInvalid; others wrap ErrNotFound or
// database errors.
func (s *Store) FinishNotification(ctx context.Context, id string, state vocab.NotificationState, lastError string, at time.Time) (vocab.NotificationState, error) {
	if state != vocab.NotificationDead && state != vocab.NotificationUnrouted {
		return "", fmt.Errorf("store: finish notification %s: %w", id, invalidf("state", "%q is not dead or unrouted", state))
	}
	var got vocab.NotificationState
	err := s.pool.QueryRow(ctx, `
		WITH u AS (
			UPDATE notifications SET state = $2, finished_at = $4, last_error = coalesce(nullif($3, ''), last_error)
			WHERE id = $1 AND state = 'pending' RETURNING state)
		SELECT state FROM u UNION ALL
		SELECT state FROM notifications WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM u)`,
		id, state, lastError, at).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("store: notification %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: finish notification %s: %w", id, err)
	}
	return got, nil
}

// notificationBody is the JSON document a webhook receives.
type notificationBody struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"created_at"`
	Project   string          `json:"project"`
	JobID     string          `json:"job_id"`
	Data      json.RawMessage `json:"data"`
}

// Body returns the JSON document delivered for n (docs/design.md §3):
// {"id", "type" (the kind), "created_at", "project", "job_id", "data"}. It is
// the same on every attempt.
func (n *Notification) Body() []byte {
	return mustJSON(notificationBody{ID: n.ID, Type: string(n.Kind), CreatedAt: n.CreatedAt.UTC(), Project: n.Project,
		JobID: n.JobID, Data: evidenceJSON(n.Data)})
}
