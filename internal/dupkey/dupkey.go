// Package dupkey is the one home of the rule that a key appears at most once
// in one JSON object or YAML mapping of a document the API or the CLI reads
// (a job spec, a quota, a policy body, ...). encoding/json and yaml.v3's
// generic decoders keep the last of two equal keys, so
// {"queue":"standard","queue":"production"} would be read as the second
// queue while a reader of the document sees the first: the API's strict
// decoder (api.decodeStrict, JSON) and the CLI's document reader
// (cmd/gpugov readDocument, YAML and JSON) both refuse it, with Message and
// a path built by yamlnode.Join, the one field-path rule of the document readers. See docs/design.md §1, "Bounds of outside input".
package dupkey

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/gpugov/gpugov/internal/yamlnode"
)

// Message is what a repeated key is reported as, after its field path:
// "queue: repeated key".
const Message = "repeated key"

// Keys is the set of keys met so far in one object or mapping.
type Keys map[string]struct{}

// Repeats records key and reports whether it was met before in the same
// object (an exact, case-sensitive match, as JSON and YAML compare keys).
func (k Keys) Repeats(key string) bool {
	if _, ok := k[key]; ok {
		return true
	}
	k[key] = struct{}{}
	return false
}

// index is the field path of element i of the list at path ("command[1]").
func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// InJSON returns the field path of the first key repeated within one
// object of the JSON value data, at any depth of objects and lists, and
// true; "" and false when every key is unique. Data is expected to be valid
// JSON (decode it first): on malformed input InJSON reports only repeats
// found before the malformation, so the decoder's own error stays the one
// shown.
func InJSON(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	path, found, _ := walk(dec, "")
	return path, found
}

// walk reads one JSON value from dec at path, returning the first repeated
// key's path; err is a token error (malformed input).
func walk(dec *json.Decoder, path string) (string, bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	switch tok {
	case json.Delim('{'):
		keys := Keys{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", false, err
			}
			key, _ := kt.(string)
			at := yamlnode.Join(path, key)
			if keys.Repeats(key) {
				return at, true, nil
			}
			if p, found, err := walk(dec, at); found || err != nil {
				return p, found, err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if p, found, err := walk(dec, index(path, i)); found || err != nil {
				return p, found, err
			}
		}
	default:
		return "", false, nil
	}
	_, err = dec.Token() // the closing '}' or ']'
	return "", false, err
}
