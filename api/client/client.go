// Package client is a small HTTP client for gpugov's API (package api),
// used by the CLI's client commands. It speaks JSON, sends the bearer token,
// and turns the API's error object into *Error.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpugov/gpugov/api"
)

// Environment variables and default the CLI reads for the API address and token.
const (
	EnvAPI   = "GPUGOV_API"
	EnvToken = "GPUGOV_TOKEN"
	// EnvCACert names a PEM file of the CA certificate(s) to trust for an
	// https API (a self-signed serve --tls-cert), as --ca-cert does.
	EnvCACert  = "GPUGOV_CA_CERT"
	DefaultAPI = "http://127.0.0.1:8080"
)

// DefaultTimeout bounds one HTTP exchange.
const DefaultTimeout = 30 * time.Second

// Client calls one gpugov API server. The zero value is not usable; use New.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// New returns a client for the API at baseURL (e.g. "http://127.0.0.1:8080")
// sending token as a bearer token (none when empty). It returns an error for a
// URL that is not absolute http(s).
func New(baseURL, token string) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("API address %q: want an absolute http(s) URL such as %s", baseURL, DefaultAPI)
	}
	return &Client{base: u, token: token, http: &http.Client{Timeout: DefaultTimeout}}, nil
}

// WithHTTPClient returns a copy of c that sends through hc instead of its
// default http.Client (DefaultTimeout, Go's default transport): `gpugov load`
// passes one whose transport keeps enough idle connections for hundreds of
// requests in flight. A nil hc returns c unchanged.
func (c *Client) WithHTTPClient(hc *http.Client) *Client {
	if hc == nil {
		return c
	}
	cp := *c
	cp.http = hc
	return &cp
}

// BaseURL returns the API address the client calls, e.g. "http://127.0.0.1:8080".
func (c *Client) BaseURL() string { return c.base.String() }

// AddFlags registers --api (default $GPUGOV_API or DefaultAPI) and --token
// (default $GPUGOV_TOKEN) on fs and returns a function that builds the client
// from them once flags are parsed.
func AddFlags(fs *pflag.FlagSet) func() (*Client, error) {
	base := os.Getenv(EnvAPI)
	if base == "" {
		base = DefaultAPI
	}
	api := fs.String("api", base, "gpugov API address (env "+EnvAPI+")")
	// The token's default is read when the command runs, not shown as the
	// flag's default: --help must never print a secret.
	token := fs.String("token", "", "bearer token (default: env "+EnvToken+")")
	ca := fs.String("ca-cert", os.Getenv(EnvCACert), "PEM CA certificate(s) to trust for an https --api, besides the system's (env "+EnvCACert+")")
	return func() (*Client, error) {
		t := *token
		if t == "" {
			t = os.Getenv(EnvToken)
		}
		c, err := New(*api, t)
		if err != nil || *ca == "" {
			return c, err
		}
		return c, c.TrustCA(*ca)
	}
}

// TrustCA makes the client trust the PEM CA certificate(s) in file, besides
// the system's roots, for an https API. It returns an error naming the file
// when it cannot be read or holds no certificate.
func (c *Client) TrustCA(file string) error {
	pem, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("CA certificate: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("CA certificate %s: no PEM certificate in it", file)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c.http.Transport = tr
	return nil
}

// Error is a non-2xx answer of the API. Error() is "field: message", or the
// message alone when the API named no field.
type Error struct {
	Status int
	Body   api.ErrorBody
}

// Error returns "field: message", or the message alone.
func (e *Error) Error() string {
	if e.Body.Field != "" {
		return e.Body.Field + ": " + e.Body.Message
	}
	return e.Body.Message
}

// ClientError reports whether the answer was a 4xx: the request was wrong
// (bad input, auth, not found, conflict), not the server.
func (e *Error) ClientError() bool { return e.Status >= 400 && e.Status < 500 }

// Submit posts a job spec. idempotencyKey, when not empty, is sent as the
// Idempotency-Key header so that repeating the call cannot create a second
// job. It returns the job and the status: 201 created, 200 the key's existing
// job, 202 stored with its workflow start deferred (see Job.Note).
func (c *Client) Submit(ctx context.Context, spec *api.JobSpec, idempotencyKey string) (*api.Job, int, error) {
	var job api.Job
	hdr := http.Header{}
	if idempotencyKey != "" {
		hdr.Set(api.IdempotencyKeyHeader, idempotencyKey)
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/jobs", nil, hdr, spec, &job)
	if err != nil {
		return nil, status, err
	}
	return &job, status, nil
}

// GetJob returns one job with its current wait and explanation.
func (c *Client) GetJob(ctx context.Context, id string) (*api.Job, error) {
	var job api.Job
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, nil, nil, &job)
	return &job, err
}

// JobEvents returns a job's wait events, oldest first.
func (c *Client) JobEvents(ctx context.Context, id string) (*api.WaitEventList, error) {
	var out api.WaitEventList
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/events", nil, nil, nil, &out)
	return &out, err
}

// ListOptions filters ListJobs; empty fields match everything.
type ListOptions struct {
	Project, Queue, State, Reason, Cursor string
	Limit                                 int
}

// ListJobs returns one page of jobs; pass the page's NextCursor as
// ListOptions.Cursor for the next.
func (c *Client) ListJobs(ctx context.Context, o ListOptions) (*api.JobList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"project": o.Project, "queue": o.Queue, "state": o.State, "reason": o.Reason, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out api.JobList
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs", q, nil, nil, &out)
	return &out, err
}

// Cancel cancels a job; reason goes to the audit log.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*api.Job, error) {
	return c.action(ctx, id, "cancel", reason)
}

// Hold holds a job; reason goes to the audit log.
func (c *Client) Hold(ctx context.Context, id, reason string) (*api.Job, error) {
	return c.action(ctx, id, "hold", reason)
}

// Release releases a job's hold; reason goes to the audit log.
func (c *Client) Release(ctx context.Context, id, reason string) (*api.Job, error) {
	return c.action(ctx, id, "release", reason)
}

func (c *Client) action(ctx context.Context, id, verb, reason string) (*api.Job, error) {
	var job api.Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/"+verb, nil, nil, api.ActionRequest{Reason: reason}, &job)
	return &job, err
}

// Queues returns every queue.
func (c *Client) Queues(ctx context.Context) (*api.QueueList, error) {
	var out api.QueueList
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, nil, nil, &out)
	return &out, err
}

// Inventory returns the pools, nodes and GPUs.
func (c *Client) Inventory(ctx context.Context) (*api.Inventory, error) {
	var out api.Inventory
	_, err := c.do(ctx, http.MethodGet, "/v1/inventory", nil, nil, nil, &out)
	return &out, err
}

// maxErrorBody bounds how much of a non-JSON error answer is quoted.
const maxErrorBody = 512

// do performs one exchange: body (if any) is sent as JSON, a 2xx answer is
// decoded into out, anything else becomes *Error. It returns the status (0
// when no answer came).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, hdr http.Header, body, out any) (int, error) {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, u.Redacted(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading answer: %w", method, u.Redacted(), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, decodeError(resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		// Most often another server on that address (a wrong port): say
		// so, not encoding/json's "invalid character '‹' …".
		ct := resp.Header.Get("Content-Type")
		if ct == "" {
			ct = "none"
		}
		return resp.StatusCode, fmt.Errorf("%s %s: the server at %s did not answer with gpugov's JSON (HTTP %d, Content-Type %s); is --api the gpugov API's address?",
			method, u.Redacted(), c.base.Redacted(), resp.StatusCode, ct)
	}
	return resp.StatusCode, nil
}

// decodeError builds *Error from an error answer, quoting a non-JSON body
// (e.g. from a proxy) rather than losing it.
func decodeError(status int, data []byte) error {
	var er api.ErrorResponse
	if err := json.Unmarshal(data, &er); err == nil && er.Error.Message != "" {
		return &Error{Status: status, Body: er.Error}
	}
	text := strings.TrimSpace(string(data))
	if len(text) > maxErrorBody {
		text = text[:maxErrorBody] + "…"
	}
	msg := http.StatusText(status)
	if text != "" {
		msg += ": " + text
	}
	return &Error{Status: status, Body: api.ErrorBody{Code: "http_" + strconv.Itoa(status), Message: msg}}
}

// AsError returns err as *Error when it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
