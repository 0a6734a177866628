package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/gin-gonic/gin"
)

// routeQueryParams is, for every route the OpenAPI document describes
// ("METHOD gin-full-path", the key of routeAccess), the query parameters it
// declares: the one list of what each route reads, so that checkQuery can
// refuse what no route reads instead of ignoring it (a report asked for
// `?window=1h` answered 200 over the default window). Built from
// OpenAPIDocument at start; a route it does not describe takes none.
var routeQueryParams = mustRouteQueryParams(OpenAPIDocument)

// openAPIPathParam matches an OpenAPI path template's parameter ({id}).
var openAPIPathParam = regexp.MustCompile(`\{([^}]+)\}`)

// mustRouteQueryParams reads doc's paths and their operations' query
// parameters (path-level ones included); it panics on a document that does
// not parse, which the embedded one's test rules out.
func mustRouteQueryParams(doc []byte) map[string][]string {
	type param struct {
		Name string `json:"name"`
		In   string `json:"in"`
	}
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic(fmt.Sprintf("api: openapi.json: %v", err))
	}
	out := map[string][]string{}
	for path, item := range d.Paths {
		ginPath := openAPIPathParam.ReplaceAllString(path, ":$1")
		var shared []param
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				panic(fmt.Sprintf("api: openapi.json %s parameters: %v", path, err))
			}
		}
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				Parameters []param `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				panic(fmt.Sprintf("api: openapi.json %s %s: %v", method, path, err))
			}
			var names []string
			for _, p := range append(slices.Clone(shared), op.Parameters...) {
				if p.In == "query" {
					names = append(names, p.Name)
				}
			}
			sort.Strings(names)
			out[strings.ToUpper(method)+" "+ginPath] = names
		}
	}
	return out
}

// checkQuery answers 400 naming a query parameter the route does not take
// (routeQueryParams) or one given more than once, before the handler reads
// any: either would otherwise be ignored silently (a repeated `limit` used
// its first value). CheckQueryParams is the check.
func checkQuery(c *gin.Context) {
	q, perr := ParseQueryParams(c.Request.URL.RawQuery)
	if perr != nil {
		writeError(c, perr)
		return
	}
	if err := CheckQueryParams(q, c.Request.Method+" "+clip(c.Request.URL.Path, maxEchoedMessage), routeQueryParams[routeKey(c)]); err != nil {
		writeError(c, err)
		return
	}
	c.Next()
}

// ParseQueryParams parses a raw query string (URL.RawQuery) as
// url.ParseQuery does, but refuses one that does not parse with the 400
// (code malformed) naming the parameter, instead of dropping the pair as
// URL.Query and gin's c.Query do (`?project=%zz` listed every project's
// jobs): a malformed percent escape in a name or value, or a ';' separator.
func ParseQueryParams(raw string) (url.Values, *Error) {
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		name, kerr := url.QueryUnescape(key)
		if kerr != nil {
			name = clip(key, 64)
		}
		if strings.Contains(pair, ";") {
			return nil, newError(http.StatusBadRequest, CodeMalformed, name,
				"query parameter %q: ';' does not separate query parameters; use '&' (or %%3B for a ';' in a value)", name)
		}
		if kerr != nil {
			return nil, newError(http.StatusBadRequest, CodeMalformed, name,
				"query parameter name %q holds a malformed percent escape (%%XX with two hex digits; %%25 for a '%%')", name)
		}
		if _, err := url.QueryUnescape(value); err != nil {
			return nil, newError(http.StatusBadRequest, CodeMalformed, name,
				"query parameter %q holds a malformed percent escape (%%XX with two hex digits; %%25 for a '%%')", name)
		}
	}
	q, err := url.ParseQuery(raw)
	if err != nil { // ruled out above; kept so no parse error is dropped
		return nil, newError(http.StatusBadRequest, CodeMalformed, "", "query string: %v", err)
	}
	return q, nil
}

// CheckQueryParams returns the 400 (code malformed) naming the first query
// parameter of q, in name order, that allowed lacks or that q gives more
// than once; route ("GET /v1/jobs") is what takes allowed, for the message.
// nil when every parameter is allowed and given once. The API's routes
// (checkQuery) and the console's pages use it alike.
func CheckQueryParams(q url.Values, route string, allowed []string) *Error {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(allowed, k) {
			takes := "no query parameters"
			if len(allowed) > 0 {
				takes = "only " + strings.Join(slices.Sorted(slices.Values(allowed)), ", ")
			}
			return newError(http.StatusBadRequest, CodeMalformed, k, "unknown query parameter %q: %s takes %s", k, route, takes)
		}
		if len(q[k]) > 1 {
			return newError(http.StatusBadRequest, CodeMalformed, k, "query parameter %q is given %d times; give it once", k, len(q[k]))
		}
	}
	return nil
}
