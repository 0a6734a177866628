package api

import (
	"bufio"
	"bytes"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// utf8BOM is the UTF-8 byte order mark some editors write at a file's start.
var utf8BOM = []byte("\xef\xbb\xbf")

// bodyPeekBytes is how much of a body checkBody reads ahead.
const bodyPeekBytes = 512

// checkBody answers 400 (code malformed) before a handler decodes a body
// that is not JSON in a way encoding/json would report in its own words:
//   - a body starting with a UTF-8 byte order mark (it read "invalid
//     character 'ï' looking for beginning of value");
//   - a body sent with a Content-Type other than JSON (application/json or
//     a +json type) whose first byte other than white space opens no JSON
//     value, such as YAML sent as application/yaml.
//
// A body without Content-Type, or JSON under another type, is left to the
// handler's decoder. The body is read ahead, not consumed.
func checkBody(c *gin.Context) {
	if c.Request.Body == nil || c.Request.Body == http.NoBody {
		c.Next()
		return
	}
	body := c.Request.Body
	br := bufio.NewReaderSize(body, bodyPeekBytes)
	head, _ := br.Peek(bodyPeekBytes) // a short body gives what there is; read errors are the decoder's
	c.Request.Body = struct {
		io.Reader
		io.Closer
	}{br, body}
	if bytes.HasPrefix(head, utf8BOM) {
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "",
			"the body starts with a UTF-8 byte order mark, which is not allowed: send plain UTF-8 JSON"))
		return
	}
	ct := c.GetHeader("Content-Type")
	rest := bytes.TrimLeft(head, " \t\r\n")
	if ct != "" && !jsonMediaType(ct) && len(rest) > 0 && !strings.ContainsRune("{[\"-0123456789tfn", rune(rest[0])) {
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "",
			"the body must be JSON (Content-Type: application/json); got Content-Type %q", clip(ct, maxEchoedID)))
		return
	}
	c.Next()
}

// jsonMediaType reports whether a Content-Type names JSON: application/json
// or a structured +json type, parameters (charset) aside.
func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
