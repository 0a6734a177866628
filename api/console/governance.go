package console

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/experiment"
)

// listFilters copies the list filters the API's list routes take.
func listFilters(r *http.Request, keys ...string) url.Values {
	q := url.Values{}
	for _, k := range keys {
		if v := r.URL.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	return q
}

type preemptionsData struct {
	Preemptions []api.Preemption
	Query       string
}

func (c *Console) preemptionsList(r *http.Request, s *session) (preemptionsData, error) {
	q := listFilters(r, preemptionsFilters...)
	var l api.PreemptionList
	err := c.call(r, s, http.MethodGet, "/v1/preemptions", q, nil, &l)
	return preemptionsData{Preemptions: l.Preemptions, Query: q.Encode()}, err
}

// preemptionsPage serves GET /ui/preemptions.
func (c *Console) preemptionsPage(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.preemptionsList(r, s)
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "preemptions", c.newPage(s, "Preemptions", "preemptions", d))
}

// preemptionStep is one of the five steps of a preemption.
type preemptionStep struct {
	Name string
	At   *time.Time
	Note string
}

type preemptionData struct {
	P        api.Preemption
	Steps    []preemptionStep
	Timeline template.HTML
	Workflow string
}

// preemptionSteps are the five steps (docs/design.md §5): notify,
// checkpoint, release, reschedule, verify resume.
func preemptionSteps(p *api.Preemption) []preemptionStep {
	return []preemptionStep{
		{"notify", p.NotifiedAt, "victim told to checkpoint within the grace"},
		{"checkpoint", p.SavedAt, "checkpoint saved in the grace"},
		{"release", p.ReleasedAt, "GPUs released to " + p.ForJobID},
		{"reschedule", p.RescheduledAt, "victim requeued and placed again"},
		{"verify resume", firstTime(p.PassedAt, p.ResumedAt), "next run resumed from the saved step"},
	}
}

func firstTime(ts ...*time.Time) *time.Time {
	for _, t := range ts {
		if t != nil {
			return t
		}
	}
	return nil
}

// preemptionPage serves GET /ui/preemptions/{id}.
func (c *Console) preemptionPage(w http.ResponseWriter, r *http.Request, s *session) {
	var d preemptionData
	if err := c.call(r, s, http.MethodGet, "/v1/preemptions/"+url.PathEscape(r.PathValue("id")), nil, nil, &d.P); err != nil {
		c.failed(w, r, s, err)
		return
	}
	d.Steps = preemptionSteps(&d.P)
	steps := lane{Label: "steps", Marks: []mark{{At: d.P.StartedAt, Label: "decided"}}}
	for _, st := range d.Steps {
		if st.At != nil {
			steps.Marks = append(steps.Marks, mark{At: *st.At, Label: st.Name})
		}
	}
	lanes := []lane{steps}
	if d.P.RunStartedAt != nil && d.P.ReleasedAt != nil {
		lanes = append(lanes, lane{Label: "victim run", Spans: []span{{From: *d.P.RunStartedAt, To: *d.P.ReleasedAt, Label: "run " + d.P.RunID}}})
	}
	cps := lane{Label: "checkpoints"}
	if cp := d.P.CheckpointAtNotice; cp != nil {
		cps.Marks = append(cps.Marks, mark{At: cp.At, Label: "at notice"})
	}
	if cp := d.P.SavedCheckpoint; cp != nil {
		cps.Marks = append(cps.Marks, mark{At: cp.At, Label: "saved"})
	}
	if len(cps.Marks) > 0 {
		lanes = append(lanes, cps)
	}
	d.Timeline = timelineSVG("preemption-timeline", "preemption "+d.P.ID, lanes)
	d.Workflow = c.workflowURL(d.P.WorkflowID)
	c.render(w, r, http.StatusOK, "preemption", c.newPage(s, "Preemption "+d.P.ID, "preemptions", d))
}

type reclaimsData struct {
	Report api.ReclaimReport
	Query  string
	// Links maps a reclaim's workflow ID to its Temporal UI URL.
	Links map[string]string
}

func (c *Console) reclaimsList(r *http.Request, s *session) (reclaimsData, error) {
	q := listFilters(r, reclaimsFilters...)
	d := reclaimsData{Query: q.Encode(), Links: map[string]string{}}
	err := c.call(r, s, http.MethodGet, "/v1/reclaims", q, nil, &d.Report)
	for _, rc := range d.Report.Reclaims {
		if u := c.workflowURL(rc.WorkflowID); u != "" {
			d.Links[rc.WorkflowID] = u
		}
	}
	return d, err
}

// reclaimsPage serves GET /ui/reclaims.
func (c *Console) reclaimsPage(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.reclaimsList(r, s)
	if err != nil {
		c.failed(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "reclaims", c.newPage(s, "Reclaims", "reclaims", d))
}

// reclaimAction serves POST /ui/reclaims/{id}/keep|confirm: the API decides
// who may (keep: the owning project; confirm: operators and admins).
func (c *Console) reclaimAction(w http.ResponseWriter, r *http.Request, s *session) {
	id, action := r.PathValue("id"), r.PathValue("action")
	if action != "keep" && action != "confirm" {
		c.errorPage(w, r, s, http.StatusNotFound, "no reclaim action "+action+" (keep, confirm)")
		return
	}
	if err := c.call(r, s, http.MethodPost, "/v1/reclaims/"+url.PathEscape(id)+"/"+action, nil,
		api.ActionRequest{Reason: r.PostForm.Get("reason")}, nil); err != nil {
		c.failed(w, r, s, err)
		return
	}
	http.Redirect(w, r, "/ui/reclaims?done="+action, http.StatusSeeOther)
}

type experimentsData struct {
	Experiments []api.Experiment
}

// experimentsPage serves GET /ui/experiments.
func (c *Console) experimentsPage(w http.ResponseWriter, r *http.Request, s *session) {
	var l api.ExperimentList
	if err := c.call(r, s, http.MethodGet, "/v1/experiments", nil, nil, &l); err != nil {
		c.failed(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "experiments", c.newPage(s, "Experiments", "experiments", experimentsData{Experiments: l.Experiments}))
}

type experimentData struct {
	E        api.ExperimentDetail
	Timeline template.HTML
	Chart    template.HTML
	Checks   []experiment.ConditionResult
	Workflow string
}

// experimentPage serves GET /ui/experiments/{id}.
func (c *Console) experimentPage(w http.ResponseWriter, r *http.Request, s *session) {
	var d experimentData
	if err := c.call(r, s, http.MethodGet, "/v1/experiments/"+url.PathEscape(r.PathValue("id")), nil, nil, &d.E); err != nil {
		c.failed(w, r, s, err)
		return
	}
	e := &d.E
	marks := lane{Label: "events"}
	for _, ev := range e.Events {
		marks.Marks = append(marks.Marks, mark{At: ev.At, Label: ev.Kind})
	}
	window := lane{Label: "window"}
	if e.SwitchedAt != nil {
		end := c.opts.Now()
		if e.EndedAt != nil {
			end = *e.EndedAt
		}
		window.Spans = append(window.Spans, span{From: *e.SwitchedAt, To: end, Label: "candidate in force"})
	}
	d.Timeline = timelineSVG("experiment-timeline", "experiment "+e.Name, []lane{window, marks})
	var rows []pairRow
	if o := e.Outcome; o != nil {
		d.Checks = o.Checks
		for _, row := range o.Rows {
			label := row.Metric
			if t := strings.TrimSpace(row.Tier + " " + row.Queue); t != "" {
				label += " (" + t + ")"
			}
			rows = append(rows, pairRow{Label: label, Before: row.Before, After: row.After})
		}
	}
	d.Chart = beforeAfterSVG("experiment-chart", "baseline vs candidate", rows)
	d.Workflow = c.workflowURL(e.WorkflowID)
	c.render(w, r, http.StatusOK, "experiment", c.newPage(s, "Experiment "+e.Name, "experiments", d))
}

type policiesData struct {
	Versions []api.PolicyVersionInfo
	Diff     *api.PolicyDiff
	From, To string
}

// policiesPage serves GET /ui/policies?diff=FROM..TO (operators and
// admins, as the API's policy routes).
func (c *Console) policiesPage(w http.ResponseWriter, r *http.Request, s *session) {
	var d policiesData
	var l api.PolicyVersionList
	if err := c.call(r, s, http.MethodGet, "/v1/policies", nil, nil, &l); err != nil {
		c.failed(w, r, s, err)
		return
	}
	d.Versions = l.Versions
	from, to, ok := strings.Cut(r.URL.Query().Get("diff"), "..")
	if !ok && len(d.Versions) > 1 { // the active version against the one before it
		for i, v := range d.Versions {
			if v.Active {
				j := i + 1
				if j >= len(d.Versions) {
					j = i - 1
				}
				from, to, ok = d.Versions[j].Hash, v.Hash, true
			}
		}
	}
	if ok && from != "" && to != "" {
		var diff api.PolicyDiff
		if err := c.call(r, s, http.MethodGet, "/v1/policies/"+url.PathEscape(from)+"/diff/"+url.PathEscape(to), nil, nil, &diff); err != nil {
			c.failed(w, r, s, err)
			return
		}
		d.Diff, d.From, d.To = &diff, from, to
	}
	c.render(w, r, http.StatusOK, "policies", c.newPage(s, "Policies", "policies", d))
}
