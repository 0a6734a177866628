package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/dupkey"
	"github.com/gpugov/gpugov/internal/yamlnode"
)

// This file holds `gpugov submit` and the helpers every client command (get,
// why, queues) shares: the --api/--token flags and the mapping of API errors
// to exit codes.

func init() {
	var file, key, format string
	cmd := &cobra.Command{
		Use:   "submit -f JOB.yaml",
		Short: "Submit a job from a YAML (or JSON) job spec and print its ID",
		Long: `submit reads a job spec (YAML or JSON; "-" reads standard input) and posts it
to the gpugov API. It prints the job ID. Unknown fields are rejected.

Example job.yaml:

  queue: standard
  resources:
    gpus: 4
    gpu_memory_mib: 81920
    pool: a100-east
    topology: same-node
  command: [python, train.py]
  recovery: {checkpointable: true, checkpoint_interval_s: 600}

With --idempotency-key, submitting again with the same key returns the first
job instead of creating another, so a submit can be retried safely.
Exit codes: 0 accepted, 2 rejected input (the field is named), 1 server or
network failure.`,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	cmd.Flags().StringVarP(&file, "file", "f", "", "job spec file (YAML or JSON); - for standard input")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "makes retries safe: one job per key and project")
	cmd.Flags().StringVar(&format, "format", "text", "output: text (the job ID) or json (the job)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if file == "" {
			return newUsageError("submit: -f JOB.yaml is required")
		}
		client, err := connect(newClient, format, "text", "json")
		if err != nil {
			return err
		}
		spec, root, err := readJobSpecNode(cmd.InOrStdin(), file)
		if err != nil {
			return err
		}
		job, status, err := client.Submit(cmd.Context(), spec, key)
		if e, ok := apiclient.AsError(err); ok && e.ClientError() && e.Body.Field != "" {
			// The API's own check (a value out of range, ...) names a JSON
			// path; the file's line is the user's (file:line: field: message).
			if line := fieldLine(root, e.Body.Field); line > 0 {
				return newUsageError("submit: %s:%d: %w", file, line, e)
			}
		}
		if err != nil {
			return apiFailure(err)
		}
		if job.Note != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "note (HTTP %d): %s\n", status, job.Note)
		} else if status == 200 {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: idempotency key %q was already used; this is the existing job\n", key)
		}
		if format == "json" {
			return printJSON(cmd.OutOrStdout(), job)
		}
		fmt.Fprintln(cmd.OutOrStdout(), job.ID)
		return nil
	}
	rootCmd.AddCommand(cmd)
}

// readJobSpec reads a YAML or JSON job spec from path ("-" is stdin). The
// document is parsed as generic YAML, then decoded by the API's own strict
// JSON decoder, so an unknown field or a wrong type is a usage error naming the
// field path (e.g. "resources.gpu_mili"), exactly as the API would answer.
func readJobSpec(stdin io.Reader, path string) (*api.JobSpec, error) {
	spec, _, err := readJobSpecNode(stdin, path)
	return spec, err
}

// readJobSpecNode is readJobSpec that also returns the document's YAML
// node, for fieldLine to place a field the API names in its answer.
func readJobSpecNode(stdin io.Reader, path string) (*api.JobSpec, *yaml.Node, error) {
	body, root, err := readDocumentNode(stdin, path, "submit", func(doc any) any { return doc })
	if err != nil {
		return nil, nil, err
	}
	spec, apiErr := api.DecodeJobSpec(bytes.NewReader(body))
	if apiErr != nil {
		if line := fieldLine(root, apiErr.Body.Field); line > 0 {
			return nil, nil, newUsageError("submit: %s:%d: %w", path, line, apiErr)
		}
		return nil, nil, newUsageError("submit: %s: %w", path, apiErr)
	}
	return spec, root, nil
}

// fieldLine is the YAML line of the field the API's decoder named, a JSON
// path such as "resources.gpu_mili" or "command[1]": the line of the key
// (an unknown or mistyped field), or of the deepest part of the path the
// document holds (a missing field's parent); 0 when the path is empty or
// the document is not a mapping (JSON input carries lines as well: YAML
// parses it, so the same walk serves both).
func fieldLine(root *yaml.Node, field string) int {
	n := yamlnode.Deref(root)
	if field == "" || n == nil || n.Kind != yaml.MappingNode {
		return 0
	}
	line := 0
	for _, part := range strings.Split(strings.ReplaceAll(field, "[", ".["), ".") {
		if part == "" {
			continue
		}
		var next *yaml.Node
		if idx, ok := strings.CutPrefix(part, "["); ok {
			i, err := strconv.Atoi(strings.TrimSuffix(idx, "]"))
			if n.Kind == yaml.SequenceNode && err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		} else if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part {
					next, line = n.Content[i+1], n.Content[i].Line
					break
				}
			}
		}
		if next == nil {
			break
		}
		n = yamlnode.Deref(next)
	}
	if line == 0 {
		line = n.Line
	}
	return line
}

// readDocument reads a YAML or JSON document from path ("-" is stdin) and
// returns wrap(document) as JSON, for the API's strict decoders. Every
// failure is a usage error prefixed with the command's name; one in the
// YAML names "path:line" (and the field, where the document is valid YAML
// that JSON cannot carry: a key that is not a string, a repeated key, NaN
// or infinity, aliases nested too deep).
func readDocument(stdin io.Reader, path, command string, wrap func(any) any) ([]byte, error) {
	body, _, err := readDocumentNode(stdin, path, command, wrap)
	return body, err
}

// readDocumentNode is readDocument that also returns the document's YAML
// node, so that a field the API's decoder names can be given its line
// (fieldLine).
func readDocumentNode(stdin io.Reader, path, command string, wrap func(any) any) ([]byte, *yaml.Node, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, nil, newUsageError("%s: %w", command, err)
	}
	if looksLikeJSON(path, data) {
		// YAML would parse JSON too, but report its syntax in YAML's words
		// ("did not find expected node content" for a truncated file).
		if line, msg := jsonSyntaxProblem(data); msg != "" {
			return nil, nil, newUsageError("%s: %s:%d: %s", command, path, line, msg)
		}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		se := yamlnode.Syntax(err)
		if yamlLineRef.MatchString(se.Msg) { // yaml.v3's "yaml: line 3: …"
			return nil, nil, newUsageError("%s: %s: %w", command, path, se)
		}
		return nil, nil, newUsageError("%s: %s:%d: %w", command, path, se.Line, se)
	}
	if len(root.Content) == 0 || root.Content[0].Tag == "!!null" {
		return nil, nil, newUsageError("%s: %s is empty", command, path)
	}
	// One document per file: a second one would be dropped unseen.
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, nil, newUsageError("%s: %s holds more than one YAML document; submit one job per file", command, path)
	}
	doc, bad := (&yamlToJSON{}).value(root.Content[0], "", 0)
	if bad != nil {
		return nil, nil, newUsageError("%s: %s:%d: %s", command, path, bad.line, bad.text())
	}
	body, err := json.Marshal(wrap(doc))
	if err != nil {
		return nil, nil, newUsageError("%s: %s: %w", command, path, err)
	}
	return body, root.Content[0], nil
}

// looksLikeJSON reports whether a document is meant as JSON: path ends in
// ".json", or its first byte other than white space (and a UTF-8
// byte-order mark) is '{' followed, after optional white space, by '"' or
// '}' (a quoted first key, or an empty object). A document that opens
// '{gpus: 1, …}' is YAML in flow style, as README's amend example is, and
// goes to the YAML reader.
func looksLikeJSON(path string, data []byte) bool {
	if strings.HasSuffix(strings.ToLower(path), ".json") {
		return true
	}
	rest := bytes.TrimLeft(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(rest) == 0 || rest[0] != '{' {
		return false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	return len(rest) == 0 || rest[0] == '"' || rest[0] == '}'
}

// jsonSyntaxProblem checks that data is one JSON value and nothing after
// it. It returns "" when it is, else the 1-based line of the problem and a
// message in JSON's words: "invalid JSON: invalid character '}' looking
// for beginning of value", "truncated JSON: the document ends inside a
// value" (at the last line), "unexpected data after the JSON value". An
// empty document is left to the YAML reader ("… is empty").
func jsonSyntaxProblem(data []byte) (int, string) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	lineAt := func(off int64) int {
		off = max(0, min(off, int64(len(data))))
		return bytes.Count(data[:off], []byte("\n")) + 1
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	err := dec.Decode(&v)
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, the bad one included.
		return lineAt(se.Offset - 1), "invalid JSON: " + se.Error()
	case errors.Is(err, io.ErrUnexpectedEOF):
		return lineAt(int64(len(bytes.TrimRight(data, " \t\r\n")))), "truncated JSON: the document ends inside a value"
	case errors.Is(err, io.EOF):
		return 0, "" // empty: the YAML reader's "is empty"
	case err != nil:
		return lineAt(dec.InputOffset()), "invalid JSON: " + err.Error()
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		rest := data[end:]
		skipped := len(rest) - len(bytes.TrimLeft(rest, " \t\r\n"))
		return lineAt(end + int64(skipped)), "unexpected data after the JSON value"
	}
	return 0, ""
}

// yamlLineRef finds the line yaml.v3 names in a syntax error ("line 3";
// found by FuzzJobSpecYAML: "… expected whitespace or line break" names
// none, and was passed on without one).
var yamlLineRef = regexp.MustCompile(`line [0-9]+`)

// maxAliasDepth bounds how deeply YAML aliases may nest in a document: a
// job file has no use for them beyond reuse of a block, and a cycle (an
// alias inside the anchor it names) would never end.
const maxAliasDepth = 16

// maxYAMLValues bounds how many values (mappings, sequences and scalars,
// counted each time an alias expands them) a job spec may hold: a few
// lines of nested anchors can otherwise expand to billions ("billion
// laughs"), which the body limit (checked on the expanded JSON) would only
// catch after the CLI spent gigabytes building it. A real job spec holds
// well under a thousand.
const maxYAMLValues = 1 << 16

// yamlToJSON converts a job spec's YAML nodes into a JSON document, counting
// the values it builds against maxYAMLValues.
type yamlToJSON struct{ values int }

// yamlProblem is a value of a YAML document that JSON cannot carry.
type yamlProblem struct {
	line  int
	field string // dotted path, "" at the top
	msg   string
}

func (p *yamlProblem) text() string {
	if p.field == "" {
		return p.msg
	}
	return p.field + ": " + p.msg
}

// value converts YAML node n at path (dotted, as the API names fields)
// into a value encoding/json writes as the same document, or the first
// problem: a key that is not a string, a repeated key, a number that is
// not finite, aliases nested deeper than maxAliasDepth, a document that
// expands to more than maxYAMLValues values.
func (c *yamlToJSON) value(n *yaml.Node, path string, aliases int) (any, *yamlProblem) {
	if c.values++; c.values > maxYAMLValues {
		return nil, &yamlProblem{n.Line, path, fmt.Sprintf("the document expands to more than %d values (aliases repeat what they name)", maxYAMLValues)}
	}
	switch n.Kind {
	case yaml.AliasNode:
		if aliases >= maxAliasDepth || n.Alias == nil {
			return nil, &yamlProblem{n.Line, path, fmt.Sprintf("aliases nested more than %d deep (or an alias inside its own anchor)", maxAliasDepth)}
		}
		return c.value(n.Alias, path, aliases+1)
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		// Merge keys (<<: *base) first, so that the mapping's own keys
		// override what they bring, as YAML's merge rule says.
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Tag != "!!merge" {
				continue
			}
			val, bad := c.value(n.Content[i+1], path, aliases)
			if bad != nil {
				return nil, bad
			}
			merged, ok := val.(map[string]any)
			if !ok {
				return nil, &yamlProblem{n.Content[i].Line, path, "<< must merge a mapping"}
			}
			maps.Copy(out, merged)
		}
		own := dupkey.Keys{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := yamlnode.Deref(n.Content[i]), n.Content[i+1]
			if n.Content[i].Tag == "!!merge" {
				continue
			}
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return nil, &yamlProblem{k.Line, path, fmt.Sprintf("key %s is not a string (quote it)", yamlnode.Describe(k))}
			}
			at := yamlnode.Join(path, k.Value)
			if own.Repeats(k.Value) { // the rule the API's decoder holds JSON to
				return nil, &yamlProblem{k.Line, at, dupkey.Message}
			}
			val, bad := c.value(v, at, aliases)
			if bad != nil {
				return nil, bad
			}
			out[k.Value] = val
		}
		return out, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			val, bad := c.value(item, fmt.Sprintf("%s[%d]", path, i), aliases)
			if bad != nil {
				return nil, bad
			}
			out = append(out, val)
		}
		return out, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, &yamlProblem{n.Line, path, err.Error()}
	}
	if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return nil, &yamlProblem{n.Line, path, fmt.Sprintf("%s is not a finite number", n.Value)}
	}
	return v, nil
}

// apiFailure maps a client error to the CLI's exit codes: a 4xx from the API
// is the caller's input (exit 2, printed "field: message"); a 5xx or a network
// failure is not (exit 1).
func apiFailure(err error) error {
	if e, ok := apiclient.AsError(err); ok && e.ClientError() {
		return usageError{e}
	}
	return err
}

// checkFormat validates a --format value.
func checkFormat(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return newUsageError("--format %q: want one of: %s", format, strings.Join(allowed, ", "))
}

// connect checks --format against allowed (no check when allowed is empty)
// and returns the API client the command's --api and --token flags give
// (newClient, from apiclient.AddFlags); either failure is a usage error (exit
// code 2).
func connect(newClient func() (*apiclient.Client, error), format string, allowed ...string) (*apiclient.Client, error) {
	if len(allowed) > 0 {
		if err := checkFormat(format, allowed...); err != nil {
			return nil, err
		}
	}
	client, err := newClient()
	if err != nil {
		return nil, newUsageError("%w", err)
	}
	return client, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// showResult ends a client command that fetched v (err being the call's
// error): a failed call is an API failure (apiFailure's exit codes), the
// json format prints v as indented JSON, any other format writes it with
// write to the command's output.
func showResult[T any](cmd *cobra.Command, format string, v T, err error, write func(w io.Writer, v T) error) error {
	if err != nil {
		return apiFailure(err)
	}
	if format == "json" {
		return printJSON(cmd.OutOrStdout(), v)
	}
	return write(cmd.OutOrStdout(), v)
}
