// Package httpreport is the node agent's side of the gpugov API: it reports
// the node's inventory and GPU utilisation samples (an inventory.Reporter),
// records the checkpoints the node's runs report (an
// executor.CheckpointRecorder), and fetches the runs' commands (a
// process.RunSpecSource), all over HTTP with a bearer token — node agents
// have no database access. The routes are api/nodes.go's:
//
//	POST /v1/nodes/{name}/inventory
//	POST /v1/nodes/{name}/samples
//	GET  /v1/nodes/{name}/runs/{run}
//	POST /v1/jobs/{id}/runs/{run}/checkpoints
//
// The token should have the `agent` role, which may call nothing else.
// Nothing is retried here: the agent's refresh loop sends fresh data at the
// next refresh, and the process activity offers a checkpoint again at its
// next heartbeat — unless the API refused it as evidence (409, 422:
// executor.ErrCheckpointRefused).
package httpreport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/executor/process"
	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
)

// DefaultTimeout bounds one HTTP exchange when the caller's context does not
// bound it sooner.
const DefaultTimeout = 30 * time.Second

// maxErrorBody is how much of a non-JSON error answer an APIError quotes.
const maxErrorBody = 512

// Client talks to one gpugov API server. It is safe for concurrent use.
// Create it with New.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client

	mu sync.Mutex
	// gpuNode maps each GPU UUID of the last inventory reported per node to
	// that node, so ReportSamples (whose samples carry no node) can address
	// each sample's node route.
	gpuNode map[string]string
}

// New returns a client for the API at baseURL (e.g. "http://gpugov:8080")
// sending token as a bearer token. It returns an error for a URL that is not
// absolute http(s) or an empty token.
func New(baseURL, token string) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("API address %q: want an absolute http(s) URL such as http://127.0.0.1:8080", baseURL)
	}
	if token == "" {
		return nil, errors.New("a bearer token is required (an agent-role token of the API's token config)")
	}
	return &Client{base: u, token: token, http: &http.Client{Timeout: DefaultTimeout}, gpuNode: map[string]string{}}, nil
}

// APIError is a non-2xx answer of the API: its status and error object.
type APIError struct {
	Status  int
	Code    string // the API's error code (e.g. "invalid"), or "http_<status>" for a non-JSON answer
	Field   string // the field the API named, if any
	Message string
}

// Error returns "API <status> <code>: field: message".
func (e *APIError) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("API %d %s: %s", e.Status, e.Code, msg)
}

// Report sends one node's inventory (POST /v1/nodes/{node}/inventory) and
// remembers its GPUs for ReportSamples. Errors: *APIError for a rejected
// report (a 422 names the field), or the transport's error.
func (c *Client) Report(ctx context.Context, inv inventory.NodeInventory) error {
	if err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(inv.Node)+"/inventory", inv, nil); err != nil {
		return fmt.Errorf("report inventory of node %s: %w", inv.Node, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for uuid, node := range c.gpuNode {
		if node == inv.Node {
			delete(c.gpuNode, uuid)
		}
	}
	for _, g := range inv.GPUs {
		c.gpuNode[g.UUID] = inv.Node
	}
	return nil
}

// ReportSamples sends samples (POST /v1/nodes/{node}/samples), grouped by the
// node their GPU was last reported on by Report; samples of a GPU no accepted
// report named are an error, and are not sent. Errors of several nodes are
// joined.
func (c *Client) ReportSamples(ctx context.Context, samples []inventory.UtilizationSample) error {
	byNode, unknown := c.groupByNode(samples)
	var errs []error
	if len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("samples of GPUs %s not sent: no accepted inventory report names them", strings.Join(unknown, ", ")))
	}
	for _, node := range sortedKeys(byNode) {
		body := struct {
			Samples []inventory.UtilizationSample `json:"samples"`
		}{byNode[node]}
		if err := c.do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(node)+"/samples", body, nil); err != nil {
			errs = append(errs, fmt.Errorf("report samples of node %s: %w", node, err))
		}
	}
	return errors.Join(errs...)
}

// groupByNode splits samples by their GPU's node; unknown lists the UUIDs of
// no known node.
func (c *Client) groupByNode(samples []inventory.UtilizationSample) (map[string][]inventory.UtilizationSample, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byNode := map[string][]inventory.UtilizationSample{}
	var unknown []string
	for _, s := range samples {
		node, ok := c.gpuNode[s.GPUUUID]
		if !ok {
			unknown = append(unknown, s.GPUUUID)
			continue
		}
		byNode[node] = append(byNode[node], s)
	}
	return byNode, unknown
}

// RecordCheckpoint records a checkpoint a run reported (POST
// /v1/jobs/{job}/runs/{run}/checkpoints); the same one again is accepted, so
// repeating it is safe. Errors: *APIError (404 for an unknown run; 409 and
// 422, the checkpoint refused as evidence, also wrap
// executor.ErrCheckpointRefused) or the transport's error.
func (c *Client) RecordCheckpoint(ctx context.Context, jobID, runID string, cp scheduling.Checkpoint) error {
	body := checkpointJSON{At: cp.At.UTC(), Step: cp.Step, Location: cp.Location}
	path := "/v1/jobs/" + url.PathEscape(jobID) + "/runs/" + url.PathEscape(runID) + "/checkpoints"
	err := c.do(ctx, http.MethodPost, path, body, nil)
	var apiErr *APIError
	if errors.As(err, &apiErr) && (apiErr.Status == http.StatusConflict || apiErr.Status == http.StatusUnprocessableEntity) {
		return fmt.Errorf("record checkpoint of job %s run %s at step %d: %w: %w", jobID, runID, cp.Step, executor.ErrCheckpointRefused, err)
	}
	if err != nil {
		return fmt.Errorf("record checkpoint of job %s run %s at step %d: %w", jobID, runID, cp.Step, err)
	}
	return nil
}

// checkpointJSON is the API's checkpoint object.
type checkpointJSON struct {
	At       time.Time `json:"at"`
	Step     int64     `json:"step"`
	Location string    `json:"location,omitempty"`
}

// runSpecJSON is the answer of GET /v1/nodes/{name}/runs/{run}.
type runSpecJSON struct {
	JobID      string            `json:"job_id"`
	RunID      string            `json:"run_id"`
	Node       string            `json:"node"`
	Command    []string          `json:"command"`
	Env        map[string]string `json:"env"`
	StartStep  int64             `json:"start_step"`
	ResumeFrom *checkpointJSON   `json:"resume_from"`
	Ended      bool              `json:"ended"`
}

// RunSpec fetches what node's agent needs to start run runID (GET
// /v1/nodes/{node}/runs/{run}). A 404 (no such run, or placed on another
// node) is returned wrapping process.ErrRunNotFound; other errors are
// *APIError or the transport's error.
func (c *Client) RunSpec(ctx context.Context, node, runID string) (*process.RunSpec, error) {
	var out runSpecJSON
	err := c.do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(node)+"/runs/"+url.PathEscape(runID), nil, &out)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %v", process.ErrRunNotFound, err)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch spec of run %s: %w", runID, err)
	}
	rs := &process.RunSpec{JobID: out.JobID, Command: out.Command, Env: out.Env, Ended: out.Ended}
	if cp := out.ResumeFrom; cp != nil {
		rs.ResumeFrom = &scheduling.Checkpoint{At: cp.At, Step: cp.Step, Location: cp.Location}
	}
	return rs, nil
}

// do performs one exchange on path (already escaped): body (if not nil) is sent as JSON, a 2xx answer
// is decoded into out (if not nil), anything else becomes *APIError.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	// path's variable segments are escaped by the callers.
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	return nil
}

// decodeError builds an *APIError from an error answer, quoting a non-JSON
// body (e.g. from a proxy) rather than losing it.
func decodeError(status int, data []byte) error {
	var er struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &er); err == nil && er.Error.Message != "" {
		return &APIError{Status: status, Code: er.Error.Code, Field: er.Error.Field, Message: er.Error.Message}
	}
	text := strings.TrimSpace(string(data))
	if len(text) > maxErrorBody {
		text = text[:maxErrorBody] + "…"
	}
	return &APIError{Status: status, Code: fmt.Sprintf("http_%d", status), Message: strings.TrimSpace(http.StatusText(status) + " " + text)}
}

// sortedKeys returns m's keys in order, so reports go out in a stable order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
