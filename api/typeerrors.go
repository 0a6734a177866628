package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/yamlnode"
)

// This file words encoding/json's type errors for the caller: the field
// by its full path (list indexes and map keys included) and the types in
// JSON's and YAML's terms, not Go's ("run_seconds: must be a number, got
// a string" rather than "expected float64, got JSON string"). The CLI's
// job files are decoded by the same decoder, so its messages are these.

// typeError is e as a 400 naming the field: the path of the value at e's
// offset in data when it agrees with the field encoding/json names (a
// custom UnmarshalJSON reports offsets into its own bytes), else that
// field.
//
// input is the bounds table's name of the body (vocab.Bound.Input, e.g.
// "job spec"; "" for a body without bounded fields): a number that does
// not fit a bounded field is told that field's range from vocab.Bounds
// ("resources.gpus: must be a whole number from 1 to 4096, got 1.0"),
// not its Go type's.
func typeError(e *json.UnmarshalTypeError, data []byte, input string) *Error {
	field := e.Field
	if p := valuePathAt(data, e.Offset); p != "" && withinField(p, field) {
		field = p
	}
	return &Error{Status: 400, Body: ErrorBody{Code: CodeMalformed, Field: field, Message: typeMessage(e.Type, e.Value, fieldBound(input, field))}}
}

// boundsInputs names, for each body type decodeStrict reads whose numeric
// fields vocab.Bounds bounds, its Input in that table.
var boundsInputs = map[reflect.Type]string{
	reflect.TypeFor[JobSpec]():                 "job spec",
	reflect.TypeFor[AmendRequest]():            "job spec",
	reflect.TypeFor[inventory.NodeInventory](): "node report",
	reflect.TypeFor[SamplesReport]():           "node report",
}

// boundsInput is boundsInputs' name for the type v points to, or "".
func boundsInput(v any) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return boundsInputs[t]
}

// fieldBound returns the vocab.Bounds row of field (a path such as
// "resources.gpus" or "samples[3].gpu_percent", its indexes read as "[]")
// in input, or nil when the field has none.
func fieldBound(input, field string) *vocab.Bound {
	if input == "" {
		return nil
	}
	bare := listIndex.ReplaceAllString(field, "[]")
	for i := range vocab.Bounds {
		if b := &vocab.Bounds[i]; b.Input == input && b.Field == bare {
			return b
		}
	}
	return nil
}

// listIndex matches the list indexes of a field path.
var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

// withinField reports whether path, with its list indexes left out, is
// field or a value inside it (a map's key: "resources.labels.a" within
// "resources.labels").
func withinField(path, field string) bool {
	bare := listIndex.ReplaceAllString(path, "")
	return field != "" && (bare == field || strings.HasPrefix(bare, field+"."))
}

// valuePathAt walks the JSON document data and returns the field path of
// the first value whose first token ends at or after offset, the byte
// offset encoding/json gives a type error (just past a scalar, or past an
// object's or list's opening bracket); "" when none does.
func valuePathAt(data []byte, offset int64) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	path, _ := pathWalk(dec, "", offset)
	return path
}

// pathWalk reads one value at path; found is false when it ended before
// offset (or the input is malformed).
func pathWalk(dec *json.Decoder, path string, offset int64) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	if dec.InputOffset() >= offset {
		return path, true
	}
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", false
			}
			key, _ := kt.(string)
			if p, found := pathWalk(dec, yamlnode.Join(path, key), offset); found {
				return p, found
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if p, found := pathWalk(dec, fmt.Sprintf("%s[%d]", path, i), offset); found {
				return p, found
			}
		}
	default:
		return "", false
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return "", false
	}
	return "", false
}

// typeMessage says what a field of Go type want must be, and what the JSON
// value (encoding/json's UnmarshalTypeError.Value: "string", "number",
// "number 1.5", "bool", "array", "object") was.
// With a bound b (nil: none), a number is told b's range instead of the
// Go type's.
func typeMessage(want reflect.Type, value string, b *vocab.Bound) string {
	for want != nil && want.Kind() == reflect.Pointer {
		want = want.Elem()
	}
	words := kindWords(want)
	num, isNum := strings.CutPrefix(value, "number ")
	switch {
	case isNum && b != nil && want != nil && (isIntKind(want.Kind()) || want.Kind() == reflect.Float32 || want.Kind() == reflect.Float64):
		kind := "a number"
		if isIntKind(want.Kind()) {
			kind = "a whole number"
		}
		if b.MinExclusive {
			return fmt.Sprintf("must be %s above %s and at most %s, got %s", kind, boundNumber(b.Min), boundNumber(b.Max), num)
		}
		return fmt.Sprintf("must be %s from %s to %s, got %s", kind, boundNumber(b.Min), boundNumber(b.Max), num)
	case isNum && want != nil && isIntKind(want.Kind()):
		if lo, hi, whole := intRange(want, num); whole {
			return fmt.Sprintf("must be a whole number from %s to %s, got %s", lo, hi, num)
		}
		return fmt.Sprintf("must be a whole number, got %s", num)
	case isNum && want != nil && (want.Kind() == reflect.Float32 || want.Kind() == reflect.Float64):
		return fmt.Sprintf("must be a number of magnitude at most %g, got %s", maxFloat(want.Kind()), num)
	case isNum:
		return fmt.Sprintf("must be %s, got the number %s", words, num)
	}
	return fmt.Sprintf("must be %s, got %s", words, valueWords(value))
}

// kindWords names what a value of Go type t is written as in JSON or YAML.
func kindWords(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	if t == timeType {
		return "an RFC 3339 time string (e.g. 2026-01-05T00:00:00Z)"
	}
	switch k := t.Kind(); {
	case isIntKind(k):
		return "a whole number"
	case k == reflect.Float32 || k == reflect.Float64:
		return "a number"
	case k == reflect.String:
		return "a string"
	case k == reflect.Bool:
		return "true or false"
	case k == reflect.Slice || k == reflect.Array:
		return "a list"
	case k == reflect.Map || k == reflect.Struct:
		return "an object"
	}
	return "a value of another type"
}

// valueWords names encoding/json's word for a JSON value's type.
func valueWords(v string) string {
	switch v {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "bool":
		return "true or false"
	case "array":
		return "a list"
	case "object":
		return "an object"
	case "null":
		return "null"
	}
	return v
}

func isIntKind(k reflect.Kind) bool {
	return (k >= reflect.Int && k <= reflect.Int64) || (k >= reflect.Uint && k <= reflect.Uintptr)
}

// intRange is t's range as text, and whether num is a whole number (which
// then did not fit it; 1e3 is whole, 1.5 is not).
func intRange(t reflect.Type, num string) (lo, hi string, whole bool) {
	f, _, err := big.ParseFloat(num, 10, 0, big.ToNearestEven)
	if err != nil || !f.IsInt() {
		return "", "", false
	}
	bits := t.Bits()
	if t.Kind() >= reflect.Uint {
		return "0", new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(bits)), big.NewInt(1)).String(), true
	}
	max := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(bits-1)), big.NewInt(1))
	return new(big.Int).Neg(new(big.Int).Add(max, big.NewInt(1))).String(), max.String(), true
}

// boundNumber writes a bound as the bounds table does: 4096, not 4.096e+03.
func boundNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1<<63 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func maxFloat(k reflect.Kind) float64 {
	if k == reflect.Float32 {
		return math.MaxFloat32
	}
	return math.MaxFloat64
}
