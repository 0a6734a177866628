package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

// openAPIDoc is the part of the OpenAPI document the coverage test reads.
type openAPIDoc struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]json.RawMessage `json:"paths"`
}

var ginParam = regexp.MustCompile(`:([A-Za-z_]+)`)

// TestOpenAPICoversEveryRoute walks gin's routes and checks each method and
// path is documented, and that nothing documented is missing from the router.
// It needs no database: the store is never called.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	srv := New(nil, nil, testTokens(t), WithMetricsHandler(http.NotFoundHandler()))
	var doc openAPIDoc
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	served := map[string]bool{}
	for _, r := range srv.engine.Routes() {
		path := ginParam.ReplaceAllString(r.Path, "{$1}")
		method := strings.ToLower(r.Method)
		served[method+" "+path] = true
		if _, ok := doc.Paths[path][method]; !ok {
			t.Errorf("route %s %s is not in openapi.json", r.Method, path)
		}
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, method+" "+path)
		}
	}
	sort.Strings(documented)
	for _, op := range documented {
		if !served[op] {
			t.Errorf("openapi.json documents %s, which the router does not serve", op)
		}
	}
	if len(served) < 13 {
		t.Fatalf("only %d routes found", len(served))
	}
}

// TestOpenAPIRefsResolve checks every $ref points at a defined schema.
func TestOpenAPIRefsResolve(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas   map[string]json.RawMessage `json:"schemas"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`"\$ref":\s*"#/components/schemas/([^"]+)"`).FindAllStringSubmatch(string(OpenAPIDocument), -1)
	if len(refs) == 0 {
		t.Fatal("no $ref found")
	}
	for _, m := range refs {
		if _, ok := doc.Components.Schemas[m[1]]; !ok {
			t.Errorf("$ref to undefined schema %s", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`"\$ref":\s*"#/components/responses/([^"]+)"`).FindAllStringSubmatch(string(OpenAPIDocument), -1) {
		if _, ok := doc.Components.Responses[m[1]]; !ok {
			t.Errorf("$ref to undefined response %s", m[1])
		}
	}
}

// TestOpenAPIDocumentsLimits checks that every operation documents the
// limits every route enforces (api/limits.go): 431 for an oversized header
// everywhere, 413 for an oversized body on every operation with a body, and
// 429 with Retry-After on every authenticated operation.
func TestOpenAPIDocumentsLimits(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]struct {
			Security  *[]json.RawMessage         `json:"security"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			want := []string{"431"}
			if method == "post" || method == "put" || method == "patch" {
				want = append(want, "413")
			}
			if op.Security == nil || len(*op.Security) > 0 {
				want = append(want, "429")
			}
			for _, code := range want {
				if _, ok := op.Responses[code]; !ok {
					t.Errorf("%s %s does not document %s", method, path, code)
				}
			}
		}
	}
}

// TestOptionsMountMetricsAndMiddleware checks the server options the
// telemetry wiring uses. It needs no database: neither route calls the store.
func TestOptionsMountMetricsAndMiddleware(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("gpugov_up 1\n")) })
	mw := func(c *gin.Context) { c.Header("X-Traced", "yes"); c.Next() }
	srv := New(nil, nil, testTokens(t), WithMetricsHandler(metrics), WithMiddleware(mw))
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "gpugov_up 1\n" || rec.Header().Get("X-Traced") != "yes" {
		t.Fatalf("%d %q %v", rec.Code, rec.Body, rec.Header())
	}
	// Without the option there is no /metrics route.
	rec = httptest.NewRecorder()
	New(nil, nil, testTokens(t)).Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("metrics without a handler: %d", rec.Code)
	}
}
