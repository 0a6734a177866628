package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/vocab"
)

// page is what every template gets: the title, the nav entry to mark, the
// viewer (nil on the sign-in and some error pages), the CSRF token of its
// forms, the refresh settings and the page's own data D.
type page struct {
	Title     string
	Nav       string
	Viewer    *api.Principal
	CSRF      string
	RefreshMS int64
	MaxPolls  int
	D         any
}

// newPage fills the parts every signed-in page shares.
func (c *Console) newPage(s *session, title, nav string, d any) *page {
	p := &page{Title: title, Nav: nav, D: d, RefreshMS: RefreshInterval.Milliseconds(), MaxPolls: MaxRefreshes}
	if s != nil {
		pr := s.principal
		p.Viewer, p.CSRF = &pr, s.csrf
	}
	return p
}

// render executes template name into a buffer first, so a template error
// is a clean 500, never half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	var buf bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		c.opts.Logger.Error("console: render", "template", name, "path", r.URL.Path, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorData is the error page's data.
type errorData struct {
	Status  int
	Text    string
	Message string
	Field   string
}

// errorPage renders the error page with status and message.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	c.errorPageField(w, r, s, status, msg, "")
}

func (c *Console) errorPageField(w http.ResponseWriter, r *http.Request, s *session, status int, msg, field string) {
	if status >= 500 {
		c.opts.Logger.Error("console: request failed", "path", r.URL.Path, "status", status, "err", msg)
	}
	c.render(w, r, status, "error", c.newPage(s, fmt.Sprintf("%d %s", status, http.StatusText(status)), "",
		errorData{Status: status, Text: http.StatusText(status), Message: msg, Field: field}))
}

// failed renders err of an API call: the API's own status and message
// (403 for another project's job, 404, 400 naming the field), 502 for a
// console fault. A 401 means the session's token stopped working: the
// viewer is sent to sign in.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var f *apiFailure
	if errors.As(err, &f) {
		if f.Status == http.StatusUnauthorized && r.Method == http.MethodGet {
			http.Redirect(w, r, "/ui/sign-in?next="+queryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		c.errorPageField(w, r, s, f.Status, f.Body.Message, f.Body.Field)
		return
	}
	c.errorPage(w, r, s, http.StatusBadGateway, err.Error())
}

func queryEscape(s string) string { return url.QueryEscape(s) }

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"dur":      fmtDur,
	"durp":     fmtDurPtr,
	"ts":       fmtTime,
	"tsp":      fmtTimePtr,
	"pct":      fmtPct,
	"num":      fmtNum,
	"nump":     fmtNumPtr,
	"since":    func(t time.Time) string { return fmtDur(time.Since(t).Seconds()) },
	"join":     strings.Join,
	"short":    shortHash,
	"sees_all": func(p *api.Principal) bool { return p != nil && p.Role.SeesAllProjects() },
	"staff": func(p *api.Principal) bool {
		return p != nil && (p.Role == vocab.RoleOperator || p.Role == vocab.RoleAdmin)
	},
	"admin":  func(p *api.Principal) bool { return p != nil && p.Role == vocab.RoleAdmin },
	"query":  func(s string) string { return url.QueryEscape(s) },
	"path":   func(s string) string { return url.PathEscape(s) },
	"derefb": func(b *bool) bool { return b != nil && *b },
	"isnil":  func(b *bool) bool { return b == nil },
	// sub is p with its data replaced by d: a page's list rendered by the
	// same template as its fragment.
	"sub": func(p *page, d any) *page { cp := *p; cp.D = d; return &cp },
	// opt is an <option>, selected when value is the current one.
	"opt": func(value, label, current string) template.HTML {
		sel := ""
		if value == current {
			sel = " selected"
		}
		return template.HTML(`<option value="` + template.HTMLEscapeString(value) + `"` + sel + `>` + template.HTMLEscapeString(label) + `</option>`)
	},
}

// fmtDur writes seconds as "45 s", "12 min 3 s", "2 h 5 min", "3 d 4 h".
func fmtDur(s float64) string {
	switch {
	case math.IsNaN(s):
		return "—"
	case s < 0:
		return "−" + fmtDur(-s)
	case s < 10:
		return fmt.Sprintf("%.1f s", s)
	case s < 60:
		return fmt.Sprintf("%.0f s", s)
	case s < 3600:
		return fmt.Sprintf("%d min %d s", int(s)/60, int(s)%60)
	case s < 86400:
		return fmt.Sprintf("%d h %d min", int(s)/3600, int(s)%3600/60)
	}
	return fmt.Sprintf("%d d %d h", int(s)/86400, int(s)%86400/3600)
}

func fmtDurPtr(s *float64) string {
	if s == nil {
		return "—"
	}
	return fmtDur(*s)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return fmtTime(*t)
}

func fmtPct(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f %%", *v*100)
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtNumPtr(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmtNum(*v)
}

func shortHash(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// workflowURL links workflow ID to the Temporal UI; "" without a base URL.
func (c *Console) workflowURL(id string) string {
	if c.opts.TemporalUI == "" || id == "" {
		return ""
	}
	return c.opts.TemporalUI + "/namespaces/" + url.PathEscape(c.opts.Namespace) + "/workflows/" + url.PathEscape(id)
}
