package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
)

func TestNewRejectsNonHTTPAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "ftp://x", "http://", ""} {
		if _, err := New(addr, ""); err == nil {
			t.Errorf("%q accepted", addr)
		}
	}
}

// TestErrorsAndHeaders checks what the client sends (token, idempotency key)
// and how it reports a JSON API error and a non-JSON one (e.g. from a proxy).
// The full round trip against the real API is in cmd/gpugov's tests.
func TestErrorsAndHeaders(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0k" || r.Header.Get(api.IdempotencyKeyHeader) != "k" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/base/v1/jobs") && r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"error": {"code": "invalid", "field": "resources.gpus", "message": "must be ≥ 0, got -1"}}`))
			return
		}
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>bad gateway</html>"))
	}))
	defer hs.Close()
	c, err := New(hs.URL+"/base/", "t0k")
	if err != nil {
		t.Fatal(err)
	}
	_, status, err := c.Submit(context.Background(), &api.JobSpec{Queue: "q"}, "k")
	e, ok := AsError(err)
	if !ok || status != 422 || !e.ClientError() || err.Error() != "resources.gpus: must be ≥ 0, got -1" {
		t.Fatalf("422: %d %v", status, err)
	}
	_, err = c.action(context.Background(), "j-1", "hold", "")
	if e, ok := AsError(err); !ok || e.Status != http.StatusUnauthorized || !e.ClientError() {
		t.Fatalf("401 without idempotency key: %v", err)
	}
	c.http.Transport = headerTransport{"Idempotency-Key": "k"}
	_, err = c.Queues(context.Background())
	if e, ok := AsError(err); !ok || e.ClientError() || !strings.Contains(err.Error(), "Bad Gateway: <html>bad gateway</html>") {
		t.Fatalf("502: %v", err)
	}
}

// headerTransport adds fixed headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestWithHTTPClientKeepsAddressAndToken(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		_, _ = w.Write([]byte(`{"queues":[]}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL, "tok")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: time.Second}
	c2 := c.WithHTTPClient(hc)
	if c2 == c || c2.http != hc || c.http == hc || c2.BaseURL() != srv.URL || c.WithHTTPClient(nil) != c {
		t.Fatalf("WithHTTPClient: copy %p of %p, http %p, base %s", c2, c, c2.http, c2.BaseURL())
	}
	if _, err := c2.Queues(context.Background()); err != nil || got != "Bearer tok" {
		t.Fatalf("Queues through the new client: %v, Authorization %q", err, got)
	}
}

// A 200 that is not gpugov's JSON (another server on that port) says so,
// with the status and Content-Type: it was "decoding answer: invalid
// character '‹' looking for beginning of value".
func TestAnswerNotGpugovJSON(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte("\x1f\x8b\x08binary"))
	}))
	defer hs.Close()
	c, err := New(hs.URL, "t0k")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Queues(context.Background())
	want := "the server at " + hs.URL + " did not answer with gpugov's JSON (HTTP 200, Content-Type application/octet-stream)"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "invalid character") {
		t.Fatalf("%v, want it to say %q", err, want)
	}
}
