package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpugov/gpugov/store"
)

// queuelessStore passes every submission to the real store without its
// queue: the store's own validation, which the API's normally pre-empts,
// then refuses it.
type queuelessStore struct{ Store }

func (s queuelessStore) CreateJob(ctx context.Context, nj *store.NewJob) (*store.Job, bool, error) {
	stripped := *nj
	stripped.Queue = ""
	return s.Store.CreateJob(ctx, &stripped)
}

// TestStoreValidationErrorIs422 checks that a submission the store refuses
// as invalid is answered 422 invalid naming the field the store named, and
// that nothing was stored and no workflow started.
func TestStoreValidationErrorIs422(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.server = New(queuelessStore{StoreFrom(env.store)}, env.wf, testTokens(t),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	r := env.submit(tokAlice, validSpec(), "k-invalid")
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d %s, want 422", r.status, r.body)
	}
	if e := r.apiError(t); e.Code != CodeInvalid || e.Field != "queue" || e.Message != "queue is required" {
		t.Fatalf("error %+v, want invalid on field queue", e)
	}
	jobs, _, err := env.store.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 0 || len(env.wf.startedJobs()) != 0 {
		t.Fatalf("a refused submission left %d jobs and started %v", len(jobs), env.wf.startedJobs())
	}
}

// TestStoreErrorClassification checks storeError on the errors a store
// call can return: 503 only when PostgreSQL could not be reached or did not
// answer in time, 422 for validation, 500 for everything else.
func TestStoreErrorClassification(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A real connect failure: nothing listens on port 1.
	_, connectErr := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2")
	var ce *pgconn.ConnectError
	if !errors.As(connectErr, &ce) {
		t.Fatalf("connect to port 1: %T %v, want a *pgconn.ConnectError", connectErr, connectErr)
	}
	wrap := func(err error) error { return fmt.Errorf("store: get job j-1: %w", err) }
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"connect", wrap(connectErr), http.StatusServiceUnavailable, CodeStoreUnavailable},
		{"deadline", wrap(context.DeadlineExceeded), http.StatusServiceUnavailable, CodeStoreUnavailable},
		{"dropped connection", wrap(io.ErrUnexpectedEOF), http.StatusServiceUnavailable, CodeStoreUnavailable},
		{"server shutting down", wrap(&pgconn.PgError{Code: "57P01"}), http.StatusServiceUnavailable, CodeStoreUnavailable},
		{"unique violation", wrap(&pgconn.PgError{Code: "23505"}), http.StatusInternalServerError, CodeInternal},
		{"decode failure", wrap(errors.New("job j-1: decode explanation: bad json")), http.StatusInternalServerError, CodeInternal},
		{"validation", wrap(&store.ValidationError{Field: "outcome", Message: `outcome "x" is not valid`}),
			http.StatusUnprocessableEntity, CodeInvalid},
		{"not found", wrap(store.ErrNotFound), http.StatusNotFound, CodeNotFound},
		{"conflict", wrap(store.ErrConflict), http.StatusConflict, CodeConflict},
	} {
		got := storeError(tc.err)
		if got.Status != tc.status || got.Body.Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, got.Status, got.Body.Code, tc.status, tc.code)
		}
		if got.Status == http.StatusInternalServerError && got.Body.Message != "internal error" {
			t.Errorf("%s: message %q shows the cause", tc.name, got.Body.Message)
		}
		if tc.code == CodeNotFound && got.Body.Message != "get job j-1: not found" {
			t.Errorf("%s: message %q, want it to name what was not found", tc.name, got.Body.Message)
		}
		if tc.code == CodeInvalid && got.Body.Field != "outcome" {
			t.Errorf("%s: field %q, want outcome", tc.name, got.Body.Field)
		}
	}
}

// TestConflictMessageIsTheStoresReason: a 409 says why (the store's reason),
// not the store's operation prefix and sentinel text.
func TestConflictMessageIsTheStoresReason(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("store: set hold on j-1: %w",
		fmt.Errorf("job is running; only a submitted or waiting job can be held: %w", store.ErrConflict))
	got := storeError(err)
	if want := "job is running; only a submitted or waiting job can be held"; got.Status != http.StatusConflict || got.Body.Message != want {
		t.Fatalf("%d %q, want 409 %q", got.Status, got.Body.Message, want)
	}
}

// A conflict wrapped twice by the store ("store: open drill: store: open
// drill of j-1: …", as OpenDrill's refusal of a job not running is) loses
// both prefixes.
func TestConflictMessageLosesNestedStorePrefixes(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("store: open drill: %w", fmt.Errorf("store: open drill of j-1: %w",
		fmt.Errorf("job is submitted; only a running job can be drilled: %w", store.ErrConflict)))
	if got, want := storeError(err).Body.Message, "job is submitted; only a running job can be drilled"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// An unknown job is `job "ID" not found` naming id, the ID clipped: it was
// "get job ID: not found" with a 5,000-character ID echoed in full.
func TestUnknownJobIsNamedAndClipped(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	long := strings.Repeat("x", 5000)
	for id, want := range map[string]string{
		"j-missing": `job "j-missing" not found`,
		long:        `job "` + long[:maxEchoedID] + `…" not found`,
	} {
		r := e.do(http.MethodGet, "/v1/jobs/"+id, tokOps, nil)
		if r.status != http.StatusNotFound {
			t.Errorf("%.20s: %d %.200s, want 404", id, r.status, r.body)
			continue
		}
		if b := r.apiError(t); b.Message != want || b.Field != "id" {
			t.Errorf("%.20s: %+v, want %q naming id", id, b, want)
		}
	}
}
