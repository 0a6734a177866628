package api

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// PostgreSQL's text cannot hold the NUL character (U+0000): a string with one
// fails its statement (SQLSTATE 22021 or 22P05). The API refuses such input
// before it reaches the store, naming where it was (docs/design.md invariant 7).

// rejectNUL is middleware that answers 400 naming the path or query parameter
// whose value contains a NUL character.
func rejectNUL(c *gin.Context) {
	for _, p := range c.Params {
		if strings.IndexByte(p.Value, 0) >= 0 {
			writeError(c, newError(http.StatusBadRequest, CodeMalformed, p.Key, "contains a NUL character"))
			return
		}
	}
	q := c.Request.URL.Query()
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if strings.IndexByte(k, 0) >= 0 {
			writeError(c, newError(http.StatusBadRequest, CodeMalformed, "", "a query parameter name contains a NUL character"))
			return
		}
		for _, v := range q[k] {
			if strings.IndexByte(v, 0) >= 0 {
				writeError(c, newError(http.StatusBadRequest, CodeMalformed, k, "contains a NUL character"))
				return
			}
		}
	}
	c.Next()
}

// nulField returns the path (e.g. "resources.pool", "command[1]") of the
// first string, key or value, in the JSON document data that contains a NUL
// character, or "" when none does. Raw NUL bytes are not valid JSON; only the
// escape \u0000 can put one in a string, so documents without it are not
// walked.
func nulField(data []byte) string {
	if !bytes.Contains(data, []byte(`\u0000`)) {
		return ""
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return ""
	}
	return findNUL(v, "")
}

// findNUL walks v (decoded JSON) depth first, map keys in sorted order.
func findNUL(v any, path string) string {
	switch x := v.(type) {
	case string:
		if strings.IndexByte(x, 0) >= 0 {
			return path
		}
	case []any:
		for i, e := range x {
			if f := findNUL(e, path+"["+strconv.Itoa(i)+"]"); f != "" {
				return f
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if strings.IndexByte(k, 0) >= 0 {
				return p
			}
			if f := findNUL(x[k], p); f != "" {
				return f
			}
		}
	}
	return ""
}
