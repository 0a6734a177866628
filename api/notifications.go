package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// NotificationStore is the part of *store.Store GET /v1/notifications
// uses. The Store given to New must implement it for that route to work
// (StoreFrom's value does); otherwise it answers 500.
type NotificationStore interface {
	ListNotifications(ctx context.Context, f store.NotificationFilter) ([]store.Notification, error)
}

// Notification is one notification of the outbox (docs/design.md §3,
// notifications): what was (or will be) sent to the project's webhook and
// how its delivery went.
type Notification struct {
	ID      string         `json:"id"` // the event ID receivers deduplicate by
	Seq     int64          `json:"seq"`
	Type    string         `json:"type"`    // job.wait_reason, job.placed, job.preemption_notice, job.reclaim_notice, job.resumed, experiment.rolled_back
	Project string         `json:"project"` // policy.AdminsRecipient for the admins' notifications
	JobID   string         `json:"job_id"`  // "" for the admins' notifications
	Data    map[string]any `json:"data"`
	// CreatedAt is the transition's time (the transaction that wrote it).
	CreatedAt time.Time `json:"created_at"`
	// State is pending, delivered, dead (every attempt failed: the
	// dead-letter record) or unrouted (the project has no webhook).
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    *int       `json:"last_status,omitempty"` // HTTP status of the last answer
	LastError     string     `json:"last_error,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

// NotificationList answers GET /v1/notifications, newest first.
type NotificationList struct {
	Notifications []Notification `json:"notifications"`
}

// notificationStates are the accepted values of the list's state filter.
var notificationStates = enumQuery{"state", names(vocab.NotificationStates)}

// listNotifications handles GET /v1/notifications?project=&job=&state=&limit=.
// A submitter sees only its own project's (another project named is 403).
func (s *Server) listNotifications(c *gin.Context) {
	vals, limit, ok := listQuery(c, notificationStates)
	if !ok {
		return
	}
	f := store.NotificationFilter{Project: c.Query("project"), JobID: c.Query("job"),
		State: vocab.NotificationState(vals["state"]), Limit: limit}
	p := principal(c)
	switch {
	case !p.Role.SeesAllProjects() && f.Project != "" && f.Project != p.Project:
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "project",
			"a %s token of project %q may not read notifications of project %q", p.Role, p.Project, f.Project))
		return
	case !p.Role.SeesAllProjects():
		f.Project = p.Project
	}
	ns, ok := implements[NotificationStore](c, s.store)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	rows, err := ns.ListNotifications(ctx, f)
	if err != nil {
		writeError(c, err)
		return
	}
	out := NotificationList{Notifications: make([]Notification, len(rows))}
	for i := range rows {
		out.Notifications[i] = notificationFromStore(&rows[i])
	}
	c.JSON(http.StatusOK, out)
}

func notificationFromStore(n *store.Notification) Notification {
	data := n.Data
	if data == nil {
		data = map[string]any{}
	}
	return Notification{ID: n.ID, Seq: n.Seq, Type: string(n.Kind), Project: n.Project, JobID: n.JobID, Data: data,
		CreatedAt: n.CreatedAt, State: string(n.State), Attempts: n.Attempts, LastStatus: n.LastStatus,
		LastError: n.LastError, LastAttemptAt: n.LastAttemptAt, FinishedAt: n.FinishedAt}
}
