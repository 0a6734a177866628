package api

import (
	"net/http"
	"strings"
	"testing"
)

// A query parameter the route does not declare, or one given twice, is a 400
// naming it; the declared ones pass (the OpenAPI document is the list).
func TestUnknownAndRepeatedQueryParameters(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, c := range []struct {
		path, field, says string
	}{
		{"/v1/reports/queues?window=abc", "window", "takes only from, group_by, project, to, wait_histogram"},
		{"/v1/jobs?bogus=1", "bogus", `unknown query parameter "bogus"`},
		{"/v1/jobs?limit=1&limit=abc", "limit", "given 2 times"},
		{"/v1/queues?state=waiting", "state", "takes no query parameters"},
	} {
		r := e.do(http.MethodGet, c.path, tokOps, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", c.path, r.status)
			continue
		}
		if b := r.apiError(t); b.Field != c.field || !strings.Contains(b.Message, c.says) {
			t.Errorf("%s: field %q message %q, want field %q saying %q", c.path, b.Field, b.Message, c.field, c.says)
		}
	}
	for _, path := range []string{"/v1/jobs?state=waiting&limit=5", "/v1/reports/queues?group_by=queue", "/v1/queues"} {
		if r := e.do(http.MethodGet, path, tokOps, nil); r.status != http.StatusOK {
			t.Errorf("%s: %d, want 200: %s", path, r.status, r.body)
		}
	}
	if len(routeQueryParams) < len(routeAccess)/2 {
		t.Fatalf("routeQueryParams has %d routes of %d: the OpenAPI document was not read", len(routeQueryParams), len(routeAccess))
	}
}

// A query string that does not parse is a 400 naming the parameter: it was
// dropped (`?project=%zz` answered 200 with every project's jobs).
func TestMalformedQueryStringIsRefused(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, c := range []struct{ path, field, says string }{
		{"/v1/jobs?project=%zz", "project", "malformed percent escape"},
		{"/v1/jobs?state=waiting&project=a%2", "project", "malformed percent escape"},
		{"/v1/jobs?pro%zzject=a", "pro%zzject", "name"},
		{"/v1/jobs?project=a;state=waiting", "project", "';'"},
	} {
		r := e.do(http.MethodGet, c.path, tokOps, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400: %s", c.path, r.status, r.body)
			continue
		}
		if b := r.apiError(t); b.Field != c.field || !strings.Contains(b.Message, c.says) {
			t.Errorf("%s: field %q message %q, want field %q saying %q", c.path, b.Field, b.Message, c.field, c.says)
		}
	}
	if r := e.do(http.MethodGet, "/v1/jobs?project=a%20b", tokOps, nil); r.status != http.StatusOK {
		t.Errorf("a good escape: %d %s", r.status, r.body)
	}
}

// An enumerated query value not accepted lists the values in words: it was
// `"bogus" is not one of [pending delivered dead unrouted]`.
func TestEnumQueryValueListsValuesInWords(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	r := e.do(http.MethodGet, "/v1/notifications?state=bogus", tokOps, nil)
	if want := `"bogus" is not one of: pending, delivered, dead, unrouted`; r.status != http.StatusUnprocessableEntity ||
		r.apiError(t).Message != want {
		t.Fatalf("%d %s, want 422 with %q", r.status, r.body, want)
	}
}
