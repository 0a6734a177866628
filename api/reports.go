package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Queue service report routes (docs/design.md §6). Every one asks the store for
// the report of a window (store.QueueReport: stored summaries of past hours
// and days merged with the rest computed from the records, or
// queuereport.Compute over every record), so the numbers are those `gpugov
// simulate` and the queuereport package define:
//
//	GET /v1/reports/queues?from=&to=&group_by=&project=&wait_histogram=
//	                                                           the full report (queuereport.Report); wait_histogram=true
//	                                                           adds each group's histogram of initial waits
//	GET /v1/reports/wait-reasons?from=&to=&group_by=&project=  seconds per wait reason, reason shares and verdict per pool (WaitReasonReport)
//	GET /v1/reports/starvation?from=&to=&group_by=&project=    starvation signals (StarvationReport)
//	GET /v1/reports/compare?before=FROM,TO&after=FROM,TO&group_by=&project=
//	                                                           two windows side by side (queuereport.Comparison)
//
// from and to are RFC 3339 times; the window is [from, to), by default the 24
// hours before now (to defaults to now, from to 24 h before to), at most
// MaxReportWindow long. group_by is a comma-separated subset of queue, tier,
// job_type, pool and project (default queue,tier,job_type,pool; empty: the
// total only). Bad parameters answer 400 malformed naming the parameter.
//
// Any valid token may read reports. A submitter's report covers only its own
// project's jobs: the records are filtered before computing, so every count,
// percentile and share is over that project's jobs (service shares are of the
// project's GPU-seconds, and overtaking and higher-tier arrivals count its own
// jobs only), while GPU releases, which name no job, stay pool-wide. Operators
// and admins see every project, or one with project=.
const (
	routeReportQueues      = "/v1/reports/queues"
	routeReportWaitReasons = "/v1/reports/wait-reasons"
	routeReportStarvation  = "/v1/reports/starvation"
	routeReportCompare     = "/v1/reports/compare"
)

// DefaultReportWindow is the window a report covers when from and to are
// not given: the last 24 hours.
const DefaultReportWindow = 24 * time.Hour

// MaxReportWindow is the longest window a report may cover (store.MaxReportWindow).
const MaxReportWindow = store.MaxReportWindow

// ReportTimeout bounds the PostgreSQL work of one report request. The first
// long-window report after a start computes the summaries of every past day
// it covers (seconds per day of history), and a report grouped by project
// reads every record of its window, so reports get more than the store
// timeout of other requests.
const ReportTimeout = 5 * time.Minute

// ReportStore is the part of *store.Store the report routes use. The Store
// given to New must implement it for them to work (StoreFrom's value does);
// otherwise they answer 500.
type ReportStore interface {
	QueueReport(ctx context.Context, opts queuereport.Options, project string) (queuereport.Report, error)
}

// WaitReasonReport answers GET /v1/reports/wait-reasons: the seconds waiting
// jobs spent in each wait reason over the window (wait events clipped to it),
// in total and per group, and per pool the reasons' and reason groups'
// shares with the verdict naming the pool's main problem.
type WaitReasonReport struct {
	Window  queuereport.Window `json:"window"`
	End     time.Time          `json:"end"` // min(to, now): the end of the observed part of the window
	GroupBy []string           `json:"group_by"`
	Total   WaitReasonGroup    `json:"total"`
	Groups  []WaitReasonGroup  `json:"groups"`
	// ReasonShares is the report's queuereport.Report.ReasonShares: per pool
	// whatever group_by (docs/design.md §6).
	ReasonShares []queuereport.PoolReasons `json:"reason_shares"`
}

// WaitReasonGroup is one group's time per wait reason.
type WaitReasonGroup struct {
	Key               map[string]string  `json:"key"`
	WaitReasonSeconds map[string]float64 `json:"wait_reason_seconds"` // reasons with no time are left out
	TotalSeconds      float64            `json:"total_seconds"`       // the sum over reasons
	StillWaiting      int                `json:"still_waiting"`       // jobs still waiting at the end
}

// StarvationReport answers GET /v1/reports/starvation: the starvation
// signals of docs/design.md §6 with the thresholds used, per group, and the
// starving jobs with the longest waits.
type StarvationReport struct {
	Window               queuereport.Window `json:"window"`
	End                  time.Time          `json:"end"`
	GroupBy              []string           `json:"group_by"`
	OvertakenThreshold   int                `json:"overtaken_threshold"`
	StarvationReleases   int                `json:"starvation_releases"`
	TierArrivalThreshold int                `json:"tier_arrival_threshold"`
	// StarvationMinWaitS is the floor below which a wait carries no signal:
	// a wait counts once it has lasted max(its queue's objective, this).
	StarvationMinWaitS float64                   `json:"starvation_min_wait_s"`
	Total              StarvationGroup           `json:"total"`
	Groups             []StarvationGroup         `json:"groups"`
	Starving           []queuereport.StarvingJob `json:"starving"` // longest waits first, at most queuereport.DefaultStarvingLimit
	// Stuck lists the jobs stuck, needing action, at the end
	// (queuereport.StuckJob): they carry no signal. Longest waits first, at
	// most queuereport.DefaultStarvingLimit.
	Stuck []queuereport.StuckJob `json:"stuck"`
}

// StarvationGroup is one group's starvation counts.
type StarvationGroup struct {
	Key                map[string]string `json:"key"`
	Jobs               int               `json:"jobs"`
	StillWaiting       int               `json:"still_waiting"`
	LongestWaitS       *float64          `json:"longest_wait_s"`
	LongestWaitJobID   string            `json:"longest_wait_job_id,omitempty"`
	StarvingJobs       int               `json:"starving_jobs"`
	OvertakenJobs      int               `json:"overtaken_jobs"`
	ReleaseStarvedJobs int               `json:"release_starved_jobs"`
	TierStarvedJobs    int               `json:"tier_starved_jobs"`
	StuckJobs          int               `json:"stuck_jobs"` // jobs stuck, needing action, at the end (queuereport.Group.StuckJobs)
}

// reportRoutes adds the report routes to the authenticated /v1 group.
func (s *Server) reportRoutes(v1 *gin.RouterGroup) {
	v1.GET(strings.TrimPrefix(routeReportQueues, "/v1"), s.queueReport)
	v1.GET(strings.TrimPrefix(routeReportWaitReasons, "/v1"), s.waitReasonReport)
	v1.GET(strings.TrimPrefix(routeReportStarvation, "/v1"), s.starvationReport)
	v1.GET(strings.TrimPrefix(routeReportCompare, "/v1"), s.compareReports)
}

// queueReport handles GET /v1/reports/queues.
func (s *Server) queueReport(c *gin.Context) {
	if r, ok := s.windowReport(c); ok {
		c.JSON(http.StatusOK, r)
	}
}

// waitReasonReport handles GET /v1/reports/wait-reasons.
func (s *Server) waitReasonReport(c *gin.Context) {
	r, ok := s.windowReport(c)
	if !ok {
		return
	}
	out := WaitReasonReport{Window: r.Options.Window, End: r.End, GroupBy: r.Options.GroupBy,
		Total: waitReasonGroup(&r.Total), Groups: make([]WaitReasonGroup, 0, len(r.Groups)), ReasonShares: r.ReasonShares}
	for i := range r.Groups {
		out.Groups = append(out.Groups, waitReasonGroup(&r.Groups[i]))
	}
	c.JSON(http.StatusOK, out)
}

func waitReasonGroup(g *queuereport.Group) WaitReasonGroup {
	out := WaitReasonGroup{Key: g.Key, WaitReasonSeconds: g.WaitReasonSeconds, StillWaiting: g.StillWaiting}
	for _, v := range g.WaitReasonSeconds {
		out.TotalSeconds += v
	}
	return out
}

// starvationReport handles GET /v1/reports/starvation.
func (s *Server) starvationReport(c *gin.Context) {
	r, ok := s.windowReport(c)
	if !ok {
		return
	}
	o := r.Options
	out := StarvationReport{Window: o.Window, End: r.End, GroupBy: o.GroupBy, OvertakenThreshold: o.OvertakenThreshold,
		StarvationReleases: o.StarvationReleases, TierArrivalThreshold: o.TierArrivalThreshold,
		StarvationMinWaitS: o.StarvationMinWaitS, Total: starvationGroup(&r.Total), Groups: make([]StarvationGroup, 0, len(r.Groups)), Starving: r.Starving,
		Stuck: r.Stuck}
	for i := range r.Groups {
		out.Groups = append(out.Groups, starvationGroup(&r.Groups[i]))
	}
	c.JSON(http.StatusOK, out)
}

func starvationGroup(g *queuereport.Group) StarvationGroup {
	return StarvationGroup{Key: g.Key, Jobs: g.Jobs, StillWaiting: g.StillWaiting, LongestWaitS: g.LongestWaitS,
		LongestWaitJobID: g.LongestWaitJobID, StarvingJobs: g.StarvingJobs, OvertakenJobs: g.OvertakenJobs,
		ReleaseStarvedJobs: g.ReleaseStarvedJobs, TierStarvedJobs: g.TierStarvedJobs, StuckJobs: g.StuckJobs}
}

// compareReports handles GET /v1/reports/compare: the same report over two
// windows, compared group by group (queuereport.Compare).
func (s *Server) compareReports(c *gin.Context) {
	now := s.now()
	before, apiErr := windowPairParam(c, "before", now)
	var after queuereport.Window
	if apiErr == nil {
		after, apiErr = windowPairParam(c, "after", now)
	}
	groupBy, project, apiErr := scopeParams(c, apiErr)
	if apiErr != nil {
		writeError(c, apiErr)
		return
	}
	var reports [2]queuereport.Report
	for i, w := range []queuereport.Window{before, after} {
		r, ok := s.computeReport(c, w, groupBy, project, now)
		if !ok {
			return
		}
		reports[i] = r
	}
	c.JSON(http.StatusOK, queuereport.Compare(reports[0], reports[1]))
}

// windowReport reads from, to, group_by and project, and computes the report;
// on failure it has answered and returns false.
func (s *Server) windowReport(c *gin.Context) (queuereport.Report, bool) {
	now := s.now()
	w, apiErr := windowParams(c, now)
	groupBy, project, apiErr := scopeParams(c, apiErr)
	if apiErr != nil {
		writeError(c, apiErr)
		return queuereport.Report{}, false
	}
	return s.computeReport(c, w, groupBy, project, now)
}

// scopeParams reads group_by and the project scope unless an earlier
// parameter already failed (prior), whose error it then returns.
func scopeParams(c *gin.Context, prior *Error) ([]string, string, *Error) {
	if prior != nil {
		return nil, "", prior
	}
	groupBy, apiErr := groupByParam(c)
	if apiErr != nil {
		return nil, "", apiErr
	}
	project, apiErr := reportProject(c)
	return groupBy, project, apiErr
}

// computeReport asks the store for the report over window w, limited to
// project's jobs when project is set; on failure it has answered and
// returns false.
func (s *Server) computeReport(c *gin.Context, w queuereport.Window, groupBy []string, project string, now time.Time) (queuereport.Report, bool) {
	histogram, apiErr := boolParam(c, "wait_histogram")
	if apiErr != nil {
		writeError(c, apiErr)
		return queuereport.Report{}, false
	}
	rs, ok := implements[ReportStore](c, s.store)
	if !ok {
		return queuereport.Report{}, false
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), max(s.storeTimeout, ReportTimeout))
	defer cancel()
	r, err := rs.QueueReport(ctx, queuereport.Options{Window: w, Now: now, GroupBy: groupBy, WaitHistogram: histogram}, project)
	if errors.Is(err, store.ErrReportRecords) { // the stored records contradict each other: a bug, not the caller's fault
		writeError(c, newError(http.StatusInternalServerError, CodeInternal, "", "internal error"))
		_ = c.Error(fmt.Errorf("api: compute report over %s..%s: %w", w.From, w.To, err))
		return queuereport.Report{}, false
	}
	if err != nil {
		writeError(c, err)
		return queuereport.Report{}, false
	}
	return r, true
}

// boolParam reads an optional boolean parameter: absent or "false" is
// false, "true" true; anything else is 400 malformed naming it.
func boolParam(c *gin.Context, name string) (bool, *Error) {
	switch v := c.Query(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, newError(http.StatusBadRequest, CodeMalformed, name, "want true or false, got %q", v)
	}
}

// reportProject returns the project a report is limited to: a submitter's
// own (403 when it asks for another), or the project parameter of an
// operator or admin ("" for all).
func reportProject(c *gin.Context) (string, *Error) {
	p, asked := principal(c), c.Query("project")
	switch {
	case p.Role.SeesAllProjects():
		return asked, nil
	case asked != "" && asked != p.Project:
		return "", forbiddenProject(p, asked)
	}
	return p.Project, nil
}

// windowParams reads from and to (RFC 3339). to defaults to now and from to
// DefaultReportWindow before to.
func windowParams(c *gin.Context, now time.Time) (queuereport.Window, *Error) {
	w := queuereport.Window{To: now}
	var apiErr *Error
	if v, ok := c.GetQuery("to"); ok {
		if w.To, apiErr = timeParam("to", v); apiErr != nil {
			return w, apiErr
		}
	}
	w.From = w.To.Add(-DefaultReportWindow)
	if v, ok := c.GetQuery("from"); ok {
		if w.From, apiErr = timeParam("from", v); apiErr != nil {
			return w, apiErr
		}
	}
	return w, checkWindow("from", "to", w, now)
}

// windowPairParam reads a FROM,TO window from parameter name.
func windowPairParam(c *gin.Context, name string, now time.Time) (queuereport.Window, *Error) {
	v := c.Query(name)
	from, to, ok := strings.Cut(v, ",")
	if !ok {
		return queuereport.Window{}, newError(http.StatusBadRequest, CodeMalformed, name,
			"want FROM,TO with two RFC 3339 times, got %q", v)
	}
	var w queuereport.Window
	var apiErr *Error
	if w.From, apiErr = timeParam(name, from); apiErr != nil {
		return w, apiErr
	}
	if w.To, apiErr = timeParam(name, to); apiErr != nil {
		return w, apiErr
	}
	return w, checkWindow(name, name, w, now)
}

// timeParam parses an RFC 3339 time of parameter name: the one parse of a
// query parameter's time, whose failure is a 400 (code malformed) naming
// it on every route (reports' from/to, the audit's since/until).
func timeParam(name, v string) (time.Time, *Error) {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
	if err != nil {
		return time.Time{}, newError(http.StatusBadRequest, CodeMalformed, name,
			"not an RFC 3339 time (e.g. 2026-01-05T00:00:00Z): %q", v)
	}
	return t.UTC(), nil
}

// minReportTime is the earliest start of a report window
// (vocab.MinReportUnixSeconds, 1970-01-01T00:00:00Z).
var minReportTime = time.Unix(vocab.MinReportUnixSeconds, 0).UTC()

// checkWindow rejects an inverted, too long, too early or future window; fromName and
// toName are the parameters the problem is reported on.
func checkWindow(fromName, toName string, w queuereport.Window, now time.Time) *Error {
	switch {
	case !w.To.After(w.From):
		return newError(http.StatusBadRequest, CodeMalformed, toName, "the window ends (%s) at or before it starts (%s)",
			w.To.Format(time.RFC3339), w.From.Format(time.RFC3339))
	case w.To.After(w.From.Add(MaxReportWindow)):
		// Compared by adding, not by w.To.Sub(w.From), which saturates at
		// 292 years and read "2562047h47m16.854775807s" for a year-1 from.
		days := int(MaxReportWindow.Hours() / 24)
		return newError(http.StatusBadRequest, CodeMalformed, fromName, "the window from %s to %s is longer than %d days (at most %d days may be read at once)",
			w.From.Format(time.RFC3339), w.To.Format(time.RFC3339), days, days)
	case w.From.Before(minReportTime):
		return newError(http.StatusBadRequest, CodeMalformed, fromName, "the window starts at %s, before %s: the report counts in Unix nanoseconds and nothing is recorded before",
			w.From.Format(time.RFC3339), minReportTime.Format(time.RFC3339))
	case w.From.After(now):
		return newError(http.StatusBadRequest, CodeMalformed, fromName, "the window starts in the future (%s; now is %s)",
			w.From.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// groupByParam reads group_by: absent gives the default grouping, present
// and empty the total only.
func groupByParam(c *gin.Context) ([]string, *Error) {
	v, ok := c.GetQuery("group_by")
	if !ok {
		return nil, nil
	}
	keys := []string{}
	for _, k := range strings.Split(v, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	out, err := queuereport.ParseGroupBy(keys)
	if err != nil {
		return nil, newError(http.StatusBadRequest, CodeMalformed, "group_by", "%s", strings.TrimPrefix(err.Error(), "group_by: "))
	}
	return out, nil
}
