package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/*
var staticFS embed.FS

// Defaults of Options.
const (
	// SessionTTL is how long a sign-in lasts (absolute, not sliding): a
	// working day.
	SessionTTL = 8 * time.Hour
	// RefreshInterval is how often refresh.js polls a list's fragment.
	RefreshInterval = 10 * time.Second
	// MaxRefreshes bounds the polls of one page load (30 minutes at
	// RefreshInterval); a reload starts again.
	MaxRefreshes = 180
	// MaxFormBytes bounds a form body.
	MaxFormBytes = 64 << 10
)

// SessionStore keeps the console's sessions (*store.Store implements it;
// see its methods for the errors).
type SessionStore interface {
	CreateConsoleSession(ctx context.Context, sess store.ConsoleSession) error
	LookupConsoleSession(ctx context.Context, idDigest []byte, now time.Time) (*store.ConsoleSession, error)
	DeleteConsoleSession(ctx context.Context, idDigest []byte) error
}

// Options configure the console.
type Options struct {
	// TemporalUI is the Temporal UI's base URL (serve --temporal-ui, e.g.
	// http://127.0.0.1:8233) the job, preemption, reclaim and experiment
	// pages link workflows to; "" leaves the links out.
	TemporalUI string
	// Namespace is the Temporal namespace of the workflows (default "default").
	Namespace string
	// SecureCookies sets the Secure flag on the cookies even on plain HTTP
	// requests (behind a TLS-terminating proxy); requests over TLS always get it.
	SecureCookies bool
	// Logger logs failures the viewer sees only as a 500 page.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Console serves the /ui/ pages. Create it with New.
type Console struct {
	api   *api.Server
	store SessionStore
	opts  Options
	tmpl  *template.Template
	mux   *http.ServeMux
}

// New builds the console over the API server srv (which it calls
// in-process as each session's token) and the session store st.
func New(srv *api.Server, st SessionStore, opts Options) (*Console, error) {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.TemporalUI = strings.TrimRight(opts.TemporalUI, "/")
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c := &Console{api: srv, store: st, opts: opts, tmpl: t, mux: http.NewServeMux()}
	c.routes()
	return c, nil
}

// ServeHTTP serves the console's routes (all under /ui/).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// Mount returns a handler serving the console under /ui/ and everything
// else with apiHandler (the API's Handler).
func Mount(c *Console, apiHandler http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ui/", c)
	mux.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("/", apiHandler)
	return mux
}

func (c *Console) routes() {
	m := c.mux
	sub, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(sub)))
	m.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/overview", http.StatusSeeOther)
	})
	m.HandleFunc("GET /ui/sign-in", c.signInForm)
	m.HandleFunc("POST /ui/sign-in", c.signIn)
	m.HandleFunc("POST /ui/sign-out", c.withSession(c.signOut))
	m.HandleFunc("GET /ui/overview", c.withSession(c.withQuery(c.overview, windowParams...)))
	m.HandleFunc("GET /ui/queue", c.withSession(c.withQuery(c.queuePage, queueParams...)))
	m.HandleFunc("GET /ui/jobs", c.withSession(c.withQuery(c.jobsPage, jobsFilters...)))
	m.HandleFunc("GET /ui/jobs/{id}", c.withSession(c.withQuery(c.jobPage, "done")))
	m.HandleFunc("POST /ui/jobs/{id}/{action}", c.withSession(c.jobAction))
	m.HandleFunc("POST /ui/jobs/{id}/prerequisites/{name}", c.withSession(c.prerequisiteAction))
	m.HandleFunc("GET /ui/preemptions", c.withSession(c.withQuery(c.preemptionsPage, preemptionsFilters...)))
	m.HandleFunc("GET /ui/preemptions/{id}", c.withSession(c.withQuery(c.preemptionPage)))
	m.HandleFunc("GET /ui/reclaims", c.withSession(c.withQuery(c.reclaimsPage, append(slices.Clone(reclaimsFilters), "done")...)))
	m.HandleFunc("POST /ui/reclaims/{id}/{action}", c.withSession(c.reclaimAction))
	m.HandleFunc("GET /ui/experiments", c.withSession(c.withQuery(c.experimentsPage)))
	m.HandleFunc("GET /ui/experiments/{id}", c.withSession(c.withQuery(c.experimentPage)))
	m.HandleFunc("GET /ui/policies", c.withSession(c.withQuery(c.policiesPage, "diff")))
	m.HandleFunc("GET /ui/fragment/{list}", c.withSession(c.fragment))
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, nil, http.StatusNotFound, "no page "+r.URL.Path)
	})
}

// The query parameters the pages read (doc.go's URL scheme); the list pages
// pass their filters on to the API's list routes.
var (
	windowParams       = []string{"window", "from", "to"}
	queueParams        = append(slices.Clone(windowParams), "tier", "before", "after")
	jobsFilters        = []string{"state", "queue", "project", "reason"}
	preemptionsFilters = []string{"state", "outcome", "kind", "pool", "job"}
	reclaimsFilters    = []string{"class", "mode", "state", "pool", "project"}
)

// withQuery runs h only when the request's query parameters are among
// allowed, each given once; otherwise it answers the 400 page naming the
// parameter, by the API's own check (api.CheckQueryParams), so a page's
// `?limit=abc` is refused as the API refuses it instead of ignored.
func (c *Console) withQuery(h func(http.ResponseWriter, *http.Request, *session), allowed ...string) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		if c.queryRefused(w, r, s, allowed...) {
			return
		}
		h(w, r, s)
	}
}

// queryRefused renders the 400 page of api.CheckQueryParams and reports
// true when r's query parameters are not among allowed or one is repeated.
func (c *Console) queryRefused(w http.ResponseWriter, r *http.Request, s *session, allowed ...string) bool {
	q, err := api.ParseQueryParams(r.URL.RawQuery)
	if err == nil {
		err = api.CheckQueryParams(q, r.Method+" "+r.URL.Path, allowed)
	}
	if err == nil {
		return false
	}
	c.errorPageField(w, r, s, err.Status, err.Body.Message, err.Body.Field)
	return true
}

// apiFailure is a non-2xx answer of the API: its status and error object.
type apiFailure struct {
	Status int
	Body   api.ErrorBody
}

func (f *apiFailure) Error() string {
	return fmt.Sprintf("%d %s: %s", f.Status, f.Body.Code, f.Body.Message)
}

// bufferedResponse is the http.ResponseWriter of an in-process API call.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

// call sends one request to the API in-process as the session's token
// (api.Server.ServeAs) and decodes a 2xx JSON answer into out (unless nil).
// A non-2xx answer is an *apiFailure.
func (c *Console) call(r *http.Request, s *session, method, path string, query url.Values, body any, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	target := path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(r.Context(), method, target, rd)
	if err != nil {
		return err
	}
	req.RemoteAddr = r.RemoteAddr
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp := &bufferedResponse{header: http.Header{}}
	c.api.ServeAs(s.token, resp, req)
	if resp.status == 0 {
		resp.status = http.StatusOK
	}
	if resp.status < 200 || resp.status > 299 {
		f := &apiFailure{Status: resp.status}
		var e api.ErrorResponse
		if json.Unmarshal(resp.body.Bytes(), &e) == nil {
			f.Body = e.Error
		}
		if f.Body.Message == "" {
			f.Body.Message = http.StatusText(resp.status)
		}
		return f
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.body.Bytes(), out); err != nil {
		return fmt.Errorf("console: decode %s %s: %w", method, path, err)
	}
	return nil
}
