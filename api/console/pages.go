package console

import (
	"cmp"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Window limits of the report pages.
const (
	DefaultOverviewWindow = 24 * time.Hour
	DefaultQueueWindow    = time.Hour
	minWindow             = time.Minute
	// maxListPages bounds the pages of GET /v1/jobs one console page reads
	// (vocab.MaxListLimit jobs each).
	maxListPages = 10
)

// windowParam reads ?window= (a Go duration such as 1h or 30m) or
// ?from=&to= (RFC 3339); it returns the window and an error naming the
// field.
func (c *Console) windowParam(r *http.Request, def time.Duration) (queuereport.Window, string, error) {
	now := c.opts.Now().UTC()
	q := r.URL.Query()
	if f, t := q.Get("from"), q.Get("to"); f != "" || t != "" {
		from, err1 := time.Parse(time.RFC3339, f)
		to, err2 := time.Parse(time.RFC3339, t)
		switch {
		case err1 != nil:
			return queuereport.Window{}, "from", fmt.Errorf("from: not an RFC 3339 time: %q", f)
		case err2 != nil:
			return queuereport.Window{}, "to", fmt.Errorf("to: not an RFC 3339 time: %q", t)
		}
		return queuereport.Window{From: from.UTC(), To: to.UTC()}, "", nil
	}
	d := def
	if v := q.Get("window"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < minWindow || d > api.MaxReportWindow {
			return queuereport.Window{}, "window", fmt.Errorf("window: want a duration from %s to %s such as 1h or 24h, got %q", minWindow, api.MaxReportWindow, v)
		}
	}
	return queuereport.Window{From: now.Add(-d), To: now}, "", nil
}

func windowQuery(w queuereport.Window) url.Values {
	return url.Values{"from": {w.From.Format(time.RFC3339Nano)}, "to": {w.To.Format(time.RFC3339Nano)}}
}

// listJobs reads every page of GET /v1/jobs with q, up to maxListPages.
func (c *Console) listJobs(r *http.Request, s *session, q url.Values) ([]api.Job, bool, error) {
	var out []api.Job
	q.Set("limit", strconv.Itoa(vocab.MaxListLimit))
	for range maxListPages {
		var l api.JobList
		if err := c.call(r, s, http.MethodGet, "/v1/jobs", q, nil, &l); err != nil {
			return nil, false, err
		}
		out = append(out, l.Jobs...)
		if l.NextCursor == "" {
			return out, false, nil
		}
		q.Set("cursor", l.NextCursor)
	}
	return out, true, nil
}

// poolUsage is one pool's GPUs on the overview.
type poolUsage struct {
	Name, Stage          string
	Available            bool
	GPUs                 int // healthy GPUs on schedulable nodes
	Used, Free, Fragment int
	Unusable             int // unhealthy or on unschedulable nodes
	Readiness            *api.PoolReadiness
	ReadinessErr         string
	Reasons              *queuereport.PoolReasons
	Chart                template.HTML
}

// waitRow is one queue and tier on the overview.
type waitRow struct {
	Queue, Tier          string
	Objective            float64 // seconds; 0 none
	G                    queuereport.Group
	P95Over, LongestOver bool
}

type overviewData struct {
	Window      queuereport.Window
	WindowParam string // the window select's value
	Pools       []poolUsage
	Rows        []waitRow
	Starving    []queuereport.StarvingJob
	Stuck       []queuereport.StuckJob
	Scope       string
	Truncated   bool
}

// objectives maps queue name to its wait objective in seconds.
func objectives(qs []api.Queue) map[string]float64 {
	m := make(map[string]float64, len(qs))
	for _, q := range qs {
		m[q.Name] = q.MaxWaitSec
	}
	return m
}

// overview serves GET /ui/overview.
func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	win, field, err := c.windowParam(r, DefaultOverviewWindow)
	if err != nil {
		c.errorPageField(w, r, s, http.StatusBadRequest, err.Error(), field)
		return
	}
	var inv api.Inventory
	var queues api.QueueList
	var rep queuereport.Report
	q := windowQuery(win)
	q.Set("group_by", "queue,tier")
	for _, call := range []struct {
		path string
		q    url.Values
		out  any
	}{{"/v1/inventory", nil, &inv}, {"/v1/queues", nil, &queues}, {"/v1/reports/queues", q, &rep}} {
		if err := c.call(r, s, http.MethodGet, call.path, call.q, nil, call.out); err != nil {
			c.failed(w, r, s, err)
			return
		}
	}
	running, truncated, err := c.listJobs(r, s, url.Values{"state": {string(vocab.JobRunning)}})
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	placed, t2, err := c.listJobs(r, s, url.Values{"state": {string(vocab.JobPlaced)}})
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	d := overviewData{Window: win, Starving: rep.Starving, Stuck: rep.Stuck, Truncated: truncated || t2,
		WindowParam: cmp.Or(r.URL.Query().Get("window"), "24h")}
	if !s.principal.Role.SeesAllProjects() {
		d.Scope = s.principal.Project
	}
	d.Pools = usage(inv, append(running, placed...))
	for i := range d.Pools {
		p := &d.Pools[i]
		for j := range rep.ReasonShares {
			if rep.ReasonShares[j].Pool == p.Name {
				p.Reasons = &rep.ReasonShares[j]
			}
		}
		p.Chart = reasonChart(p.Name, p.Reasons)
		var rd api.PoolReadiness
		err := c.call(r, s, http.MethodGet, "/v1/pools/"+url.PathEscape(p.Name)+"/readiness", url.Values{"history": {"1"}}, nil, &rd)
		var f *apiFailure
		switch {
		case err == nil:
			p.Readiness = &rd
		case errors.As(err, &f):
			p.ReadinessErr = fmt.Sprintf("%d: %s", f.Status, f.Body.Message)
		default:
			c.failed(w, r, s, err)
			return
		}
	}
	obj := objectives(queues.Queues)
	for _, g := range rep.Groups {
		row := waitRow{Queue: g.Key["queue"], Tier: g.Key["tier"], G: g, Objective: obj[g.Key["queue"]]}
		if row.Objective > 0 {
			row.P95Over = g.WaitP95S != nil && *g.WaitP95S > row.Objective
			row.LongestOver = g.LongestWaitS != nil && *g.LongestWaitS > row.Objective
		}
		d.Rows = append(d.Rows, row)
	}
	c.render(w, r, http.StatusOK, "overview", c.newPage(s, "Overview", "overview", d))
}

// usage counts each pool's GPUs: used (fully allocated), fragmented
// (partly allocated: a share of it is free but no whole-GPU request can use
// it) and free, from the placements of the running and placed jobs the
// viewer may see (a submitter's: its own project's).
func usage(inv api.Inventory, jobs []api.Job) []poolUsage {
	milli := map[string]int{}
	for _, j := range jobs {
		if e := j.Explanation; e != nil && e.Placed != nil {
			for _, g := range e.Placed.GPUs {
				milli[g.UUID] += g.Milli
			}
		}
	}
	out := make([]poolUsage, 0, len(inv.Pools))
	for _, p := range inv.Pools {
		u := poolUsage{Name: p.Name, Stage: p.Stage, Available: p.Available}
		for _, n := range p.Nodes {
			for _, g := range n.GPUs {
				if !g.Healthy || !n.Schedulable {
					u.Unusable++
					continue
				}
				u.GPUs++
				switch m := milli[g.UUID]; {
				case m >= 1000:
					u.Used++
				case m > 0:
					u.Fragment++
				default:
					u.Free++
				}
			}
		}
		out = append(out, u)
	}
	return out
}

// reasonChart is a pool's reason-share bar on the verdict's basis.
func reasonChart(pool string, pr *queuereport.PoolReasons) template.HTML {
	if pr == nil || pr.MainBasis == "" {
		return noData("reason-share", "pool "+pool+": no job waited")
	}
	var segs []shareSegment
	for _, g := range pr.Groups {
		sh := g.Share
		if pr.MainBasis == queuereport.BasisGPUSeconds {
			sh = g.GPUShare
		}
		if sh != nil && *sh > 0 {
			segs = append(segs, shareSegment{Label: string(g.Group), Share: *sh})
		}
	}
	basis := "waiting job-seconds"
	if pr.MainBasis == queuereport.BasisGPUSeconds {
		basis = "waiting GPU-seconds"
	}
	return shareBarSVG("reason-share", "pool "+pool+": share of "+basis+" by reason group", segs)
}

// tierChart is one tier's histogram on the queue page.
type tierChart struct {
	Tier       string
	Objective  float64
	Objectives []string // "queue: 2 h" per queue of the tier
	Group      queuereport.Group
	Chart      template.HTML
	Overlay    template.HTML
}

type queueData struct {
	Window, Before, After queuereport.Window
	WindowParam           string
	Tier                  string
	Tiers                 []tierChart
	Waiting               waitingList
}

// waitingJob is one row of the waiting jobs list.
type waitingJob struct {
	api.Job
	Reason, Detail, ReEvaluate string
	Since                      *time.Time
	Next                       *api.NextEvaluation
}

// waitingList is the waiting jobs fragment's data.
type waitingList struct {
	Jobs      []waitingJob
	Truncated bool
	Query     string
}

// queuePage serves GET /ui/queue.
func (c *Console) queuePage(w http.ResponseWriter, r *http.Request, s *session) {
	win, field, err := c.windowParam(r, DefaultQueueWindow)
	if err != nil {
		c.errorPageField(w, r, s, http.StatusBadRequest, err.Error(), field)
		return
	}
	length := win.To.Sub(win.From)
	before, after := queuereport.Window{From: win.From.Add(-length), To: win.From}, win
	for _, p := range []struct {
		name string
		w    *queuereport.Window
	}{{"before", &before}, {"after", &after}} {
		v := r.URL.Query().Get(p.name)
		if v == "" {
			continue
		}
		f, t, ok := strings.Cut(v, ",")
		from, e1 := time.Parse(time.RFC3339, f)
		to, e2 := time.Parse(time.RFC3339, t)
		if !ok || e1 != nil || e2 != nil {
			c.errorPageField(w, r, s, http.StatusBadRequest, p.name+": want FROM,TO with two RFC 3339 times, got "+strconv.Quote(v), p.name)
			return
		}
		*p.w = queuereport.Window{From: from.UTC(), To: to.UTC()}
	}
	tier := r.URL.Query().Get("tier")
	var queues api.QueueList
	if err := c.call(r, s, http.MethodGet, "/v1/queues", nil, nil, &queues); err != nil {
		c.failed(w, r, s, err)
		return
	}
	reports := make([]queuereport.Report, 3)
	for i, wi := range []queuereport.Window{win, before, after} {
		q := windowQuery(wi)
		q.Set("group_by", "tier")
		q.Set("wait_histogram", "true")
		if err := c.call(r, s, http.MethodGet, "/v1/reports/queues", q, nil, &reports[i]); err != nil {
			c.failed(w, r, s, err)
			return
		}
	}
	d := queueData{Window: win, Before: before, After: after, Tier: tier, WindowParam: cmp.Or(r.URL.Query().Get("window"), "1h")}
	for _, t := range vocab.Tiers {
		name := t.String()
		if tier != "" && tier != name {
			continue
		}
		tc := tierChart{Tier: name}
		for _, q := range queues.Queues {
			if q.Tier == name && q.MaxWaitSec > 0 {
				tc.Objectives = append(tc.Objectives, q.Name+": "+fmtDur(q.MaxWaitSec))
				if tc.Objective == 0 || q.MaxWaitSec < tc.Objective {
					tc.Objective = q.MaxWaitSec
				}
			}
		}
		g := tierGroup(reports[0], name)
		tc.Group = g
		tc.Chart = histogramSVG("wait-histogram", "tier "+name+": waits "+fmtTime(win.From)+" → "+fmtTime(win.To),
			[]histSeries{{Label: "window", Bins: g.WaitHistogram}}, tc.Objective)
		tc.Overlay = histogramSVG("wait-overlay", "tier "+name+": before vs after",
			[]histSeries{{Label: "before " + fmtTime(before.From) + " → " + fmtTime(before.To), Bins: tierGroup(reports[1], name).WaitHistogram},
				{Label: "after " + fmtTime(after.From) + " → " + fmtTime(after.To), Bins: tierGroup(reports[2], name).WaitHistogram}}, tc.Objective)
		d.Tiers = append(d.Tiers, tc)
	}
	if tier != "" && len(d.Tiers) == 0 {
		c.errorPageField(w, r, s, http.StatusBadRequest, "tier: unknown tier "+strconv.Quote(tier), "tier")
		return
	}
	if d.Waiting, err = c.waitingJobs(r, s); err != nil {
		c.failed(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "queue", c.newPage(s, "Queue", "queue", d))
}

// tierGroup returns the report's group of tier (an empty group when no job of it was seen).
func tierGroup(r queuereport.Report, tier string) queuereport.Group {
	for _, g := range r.Groups {
		if g.Key["tier"] == tier {
			return g
		}
	}
	return queuereport.Group{}
}

// waitingJobs lists the pending jobs the viewer may see, longest waiting
// first, each with the reason, detail and re-evaluation of its explanation
// (GET /v1/jobs carries them: one list read, no request per job).
func (c *Console) waitingJobs(r *http.Request, s *session) (waitingList, error) {
	var all []api.Job
	truncated := false
	for _, st := range []vocab.JobState{vocab.JobSubmitted, vocab.JobWaiting} {
		jobs, tr, err := c.listJobs(r, s, url.Values{"state": {string(st)}})
		if err != nil {
			return waitingList{}, err
		}
		all, truncated = append(all, jobs...), truncated || tr
	}
	sort.SliceStable(all, func(i, j int) bool { return since(all[i]).Before(since(all[j])) })
	out := waitingList{Truncated: truncated, Jobs: make([]waitingJob, 0, len(all))}
	for _, j := range all {
		wj := waitingJob{Job: j, Since: j.WaitingSince}
		if e := j.Explanation; e != nil { // the list's rows carry it: no request per job
			wj.Reason, wj.Detail, wj.ReEvaluate, wj.Next = e.Reason, e.Detail, e.ReEvaluate, e.NextEvaluation
		}
		out.Jobs = append(out.Jobs, wj)
	}
	return out, nil
}

func since(j api.Job) time.Time {
	if j.WaitingSince != nil {
		return *j.WaitingSince
	}
	return j.SubmittedAt
}

type jobsData struct {
	Jobs      []api.Job
	Truncated bool
	State     string
	Query     string
}

// jobsPage serves GET /ui/jobs.
func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.jobsList(r, s)
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "jobs", c.newPage(s, "Jobs", "jobs", d))
}

func (c *Console) jobsList(r *http.Request, s *session) (jobsData, error) {
	q := listFilters(r, jobsFilters...)
	enc := q.Encode()
	jobs, tr, err := c.listJobs(r, s, q)
	return jobsData{Jobs: jobs, Truncated: tr, State: r.URL.Query().Get("state"), Query: enc}, err
}

type jobData struct {
	Job         api.Job
	Events      api.WaitEventList
	Preemptions []api.Preemption
	Timeline    template.HTML
	Workflow    string
	Pending     bool
	Final       bool
	Done        string
}

// jobPage serves GET /ui/jobs/{id}: the API's 403 for another project's
// job is shown as the 403 page.
func (c *Console) jobPage(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	var d jobData
	if err := c.call(r, s, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, nil, &d.Job); err != nil {
		c.failed(w, r, s, err)
		return
	}
	if err := c.call(r, s, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/events", nil, nil, &d.Events); err != nil {
		c.failed(w, r, s, err)
		return
	}
	var pl api.PreemptionList
	if err := c.call(r, s, http.MethodGet, "/v1/preemptions", url.Values{"job": {id}}, nil, &pl); err != nil {
		c.failed(w, r, s, err)
		return
	}
	d.Preemptions = pl.Preemptions
	d.Workflow = c.workflowURL(temporalx.JobWorkflowID(id))
	d.Pending = d.Job.State.Pending()
	d.Final = slices.Contains([]vocab.JobState{vocab.JobSucceeded, vocab.JobFailed, vocab.JobCancelled}, d.Job.State)
	d.Done = r.URL.Query().Get("done")
	d.Timeline = jobTimeline(&d, c.opts.Now())
	c.render(w, r, http.StatusOK, "job", c.newPage(s, "Job "+id, "jobs", d))
}

// jobTimeline draws the job's wait events by reason, its runs (the
// preempted ones from their preemption records, the last one from the
// job), its checkpoints and its preemptions' notices and releases.
func jobTimeline(d *jobData, now time.Time) template.HTML {
	waits := lane{Label: "waits"}
	reasons := map[string]int{}
	for _, e := range d.Events.Events {
		end := now
		if e.EndedAt != nil {
			end = *e.EndedAt
		}
		if _, ok := reasons[e.Reason]; !ok {
			reasons[e.Reason] = len(reasons)
		}
		waits.Spans = append(waits.Spans, span{From: e.StartedAt, To: end, Label: "wait: " + e.Reason, Colour: reasons[e.Reason] + 2})
	}
	runs := lane{Label: "runs"}
	checkpoints := lane{Label: "checkpoints"}
	preempt := lane{Label: "preemptions"}
	for _, p := range d.Preemptions {
		if p.VictimJobID == d.Job.ID && p.RunStartedAt != nil && p.ReleasedAt != nil {
			runs.Spans = append(runs.Spans, span{From: *p.RunStartedAt, To: *p.ReleasedAt, Label: "run preempted by " + p.ID, Colour: 4})
		}
		if p.NotifiedAt != nil {
			preempt.Marks = append(preempt.Marks, mark{At: *p.NotifiedAt, Label: p.ID + " notice"})
		}
		if p.ReleasedAt != nil {
			preempt.Marks = append(preempt.Marks, mark{At: *p.ReleasedAt, Label: p.ID + " released"})
		}
		if cp := p.SavedCheckpoint; cp != nil && p.VictimJobID == d.Job.ID {
			checkpoints.Marks = append(checkpoints.Marks, mark{At: cp.At, Label: fmt.Sprintf("saved step %d", cp.Step)})
		}
	}
	if lr := d.Job.LastRun; lr != nil {
		end := now
		if lr.EndedAt != nil {
			end = *lr.EndedAt
		}
		runs.Spans = append(runs.Spans, span{From: lr.StartedAt, To: end, Label: fmt.Sprintf("run %d %s", lr.Number, lr.Outcome), Colour: 4})
	}
	if cp := d.Job.Recovery.LastCheckpoint; cp != nil {
		checkpoints.Marks = append(checkpoints.Marks, mark{At: cp.At, Label: fmt.Sprintf("last checkpoint step %d", cp.Step)})
	}
	submit := lane{Label: "submitted", Marks: []mark{{At: d.Job.SubmittedAt, Label: "submitted"}}}
	lanes := []lane{submit, waits, runs}
	if len(checkpoints.Marks) > 0 {
		lanes = append(lanes, checkpoints)
	}
	if len(preempt.Marks) > 0 {
		lanes = append(lanes, preempt)
	}
	return timelineSVG("job-timeline", "job "+d.Job.ID, lanes)
}

// jobAction serves POST /ui/jobs/{id}/hold|release|cancel|amend through
// the API's routes; it redirects back to the job page (303) when done.
func (c *Console) jobAction(w http.ResponseWriter, r *http.Request, s *session) {
	id, action := r.PathValue("id"), r.PathValue("action")
	reason := r.PostForm.Get("reason")
	base := "/v1/jobs/" + url.PathEscape(id)
	var err error
	switch action {
	case "hold", "release", "cancel":
		err = c.call(r, s, http.MethodPost, base+"/"+action, nil, api.ActionRequest{Reason: reason}, nil)
	case "amend":
		var j api.Job
		if err = c.call(r, s, http.MethodGet, base, nil, nil, &j); err != nil {
			break
		}
		res := j.Resources
		if res, err = amendedResources(res, r); err != nil {
			c.errorPageField(w, r, s, http.StatusBadRequest, err.Error(), fieldOf(err))
			return
		}
		err = c.call(r, s, http.MethodPatch, base, nil, api.AmendRequest{Resources: &res, Reason: reason}, nil)
	default:
		c.errorPage(w, r, s, http.StatusNotFound, "no job action "+strconv.Quote(action)+" (hold, release, cancel, amend)")
		return
	}
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/ui/jobs/"+url.PathEscape(id)+"?done="+action, http.StatusSeeOther)
}

// fieldError is a bad form field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func fieldOf(err error) string {
	var f *fieldError
	if errors.As(err, &f) {
		return f.field
	}
	return ""
}

// amendedResources applies the amend form (gpus, gpu_memory_mib,
// gpu_models, topology; an empty field keeps the job's value) to res.
func amendedResources(res api.ResourceSpec, r *http.Request) (api.ResourceSpec, error) {
	f := r.PostForm
	if v := strings.TrimSpace(f.Get("gpus")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return res, &fieldError{"gpus", "not an integer: " + strconv.Quote(v)}
		}
		res.GPUs = n
	}
	if v := strings.TrimSpace(f.Get("gpu_memory_mib")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return res, &fieldError{"gpu_memory_mib", "not an integer: " + strconv.Quote(v)}
		}
		res.GPUMemoryMiB = n
	}
	if v := strings.TrimSpace(f.Get("gpu_models")); v != "" {
		res.GPUModels = nil
		for _, m := range strings.Split(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				res.GPUModels = append(res.GPUModels, m)
			}
		}
	}
	if v := strings.TrimSpace(f.Get("topology")); v != "" {
		res.Topology = v
	}
	return res, nil
}

// prerequisiteAction serves POST /ui/jobs/{id}/prerequisites/{name}.
func (c *Console) prerequisiteAction(w http.ResponseWriter, r *http.Request, s *session) {
	id, name := r.PathValue("id"), r.PathValue("name")
	var ready bool
	switch v := r.PostForm.Get("ready"); v {
	case "true":
		ready = true
	case "false":
	default:
		c.errorPageField(w, r, s, http.StatusBadRequest, "ready: want true or false, got "+strconv.Quote(v), "ready")
		return
	}
	err := c.call(r, s, http.MethodPut, "/v1/jobs/"+url.PathEscape(id)+"/prerequisites/"+url.PathEscape(name), nil,
		api.PrerequisiteUpdate{Ready: &ready, Message: r.PostForm.Get("message")}, nil)
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/ui/jobs/"+url.PathEscape(id)+"?done=prerequisite", http.StatusSeeOther)
}

// fragmentParams are the query parameters of each list's fragment: its
// page's filters.
var fragmentParams = map[string][]string{"waiting-jobs": nil, "jobs": jobsFilters, "preemptions": preemptionsFilters, "reclaims": reclaimsFilters}

// fragment serves GET /ui/fragment/{list}: the list's table alone, for
// refresh.js.
func (c *Console) fragment(w http.ResponseWriter, r *http.Request, s *session) {
	list := r.PathValue("list")
	allowed, ok := fragmentParams[list]
	if !ok {
		c.errorPage(w, r, s, http.StatusNotFound, "no fragment "+strconv.Quote(list))
		return
	}
	if c.queryRefused(w, r, s, allowed...) {
		return
	}
	var name string
	var d any
	var err error
	switch list {
	case "waiting-jobs":
		name = "waiting-jobs"
		d, err = c.waitingJobs(r, s)
	case "jobs":
		name = "jobs-table"
		d, err = c.jobsList(r, s)
	case "preemptions":
		name = "preemptions-table"
		d, err = c.preemptionsList(r, s)
	default: // reclaims
		name = "reclaims-table"
		d, err = c.reclaimsList(r, s)
	}
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, name, c.newPage(s, "", "", d))
}
