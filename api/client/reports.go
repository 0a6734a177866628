package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/queuereport"
)

// ReportOptions selects what a queue service report covers. Zero values
// leave the choice to the server: the 24 hours before now, its default
// grouping (queue, tier, job type, pool) and, for operators, every project.
type ReportOptions struct {
	From, To time.Time // the window [From, To); either may be zero
	// GroupBy lists group-by keys (queue, tier, job_type, pool, project). nil
	// takes the server's default; an empty, non-nil list asks for the total only.
	GroupBy []string
	Project string // operators and admins: one project only
}

// query encodes the options as the report routes' parameters.
func (o ReportOptions) query() url.Values {
	q := url.Values{}
	if !o.From.IsZero() {
		q.Set("from", o.From.UTC().Format(time.RFC3339Nano))
	}
	if !o.To.IsZero() {
		q.Set("to", o.To.UTC().Format(time.RFC3339Nano))
	}
	if o.GroupBy != nil {
		q.Set("group_by", strings.Join(o.GroupBy, ","))
	}
	if o.Project != "" {
		q.Set("project", o.Project)
	}
	return q
}

// QueueReport returns the queue service report (GET /v1/reports/queues).
func (c *Client) QueueReport(ctx context.Context, o ReportOptions) (*queuereport.Report, error) {
	var out queuereport.Report
	_, err := c.do(ctx, http.MethodGet, "/v1/reports/queues", o.query(), nil, nil, &out)
	return &out, err
}

// WaitReasonReport returns the seconds spent in each wait reason (GET
// /v1/reports/wait-reasons).
func (c *Client) WaitReasonReport(ctx context.Context, o ReportOptions) (*api.WaitReasonReport, error) {
	var out api.WaitReasonReport
	_, err := c.do(ctx, http.MethodGet, "/v1/reports/wait-reasons", o.query(), nil, nil, &out)
	return &out, err
}

// StarvationReport returns the starvation signals (GET /v1/reports/starvation).
func (c *Client) StarvationReport(ctx context.Context, o ReportOptions) (*api.StarvationReport, error) {
	var out api.StarvationReport
	_, err := c.do(ctx, http.MethodGet, "/v1/reports/starvation", o.query(), nil, nil, &out)
	return &out, err
}

// CompareReports compares the report of window before with that of window
// after (GET /v1/reports/compare); o's From and To are not used.
func (c *Client) CompareReports(ctx context.Context, before, after queuereport.Window, o ReportOptions) (*queuereport.Comparison, error) {
	o.From, o.To = time.Time{}, time.Time{}
	q := o.query()
	q.Set("before", windowParam(before))
	q.Set("after", windowParam(after))
	var out queuereport.Comparison
	_, err := c.do(ctx, http.MethodGet, "/v1/reports/compare", q, nil, nil, &out)
	return &out, err
}

// windowParam writes a window as the compare route's FROM,TO.
func windowParam(w queuereport.Window) string {
	return w.From.UTC().Format(time.RFC3339Nano) + "," + w.To.UTC().Format(time.RFC3339Nano)
}
