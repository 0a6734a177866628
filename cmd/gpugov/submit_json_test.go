package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A job spec meant as JSON (first byte '{', or a .json file) that is not
// valid JSON is reported in JSON's words with file:line, not as the YAML
// error yaml.v3 made of it (a truncated file was "did not find expected
// node content").
func TestReadJobSpecJSONSyntaxProblems(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, doc, want string }{
		{"-", "{\"queue\": \"standard\",\n \"resources\": {\"gpus\": 1,\n", "submit: -:2: truncated JSON: the document ends inside a value"},
		{"-", "  \n{\"queue\": \"standard\",\n \"resources\": {\"gpus\": 1,}\n}\n", "submit: -:3: invalid JSON: invalid character '}' looking for beginning of object key string"},
		{"-", "{\"queue\": \"standard\"}\n\n{\"queue\": \"batch\"}\n", "submit: -:3: unexpected data after the JSON value"},
		{"job.json", "\n[\"queue\",\n 'standard']\n", "job.json:3: invalid JSON: invalid character '\\'' looking for beginning of value"},
		{"job.json", "queue: standard\n", "job.json:1: invalid JSON: invalid character 'q' looking for beginning of value"},
		// Valid JSON keeps the YAML reader's checks, lines included.
		{"-", "{\"queue\": \"standard\",\n \"queue\": \"batch\"}\n", "submit: -:2: queue: repeated key"},
		{"job.json", "", "job.json is empty"},
	} {
		path := c.name
		if path != "-" {
			path = filepath.Join(dir, c.name)
			if err := os.WriteFile(path, []byte(c.doc), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		want := strings.ReplaceAll(c.want, "job.json", path)
		_, err := readJobSpec(strings.NewReader(c.doc), path)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.HasSuffix(err.Error(), want) || !strings.HasPrefix(err.Error(), "submit: ") {
			t.Errorf("%q: err = %v, want a usage error ending %q", c.doc, err, want)
		}
	}
	// YAML stays YAML.
	if _, err := readJobSpec(strings.NewReader("queue: [standard\n"), "-"); err == nil || strings.Contains(err.Error(), "JSON") {
		t.Errorf("YAML syntax error: %v", err)
	}
}

// A value of the wrong type in a job file is reported at its line in the
// user's words, in YAML and JSON alike: it was "run_seconds: expected
// float64, got JSON string", and a list item's line was its list's.
func TestReadJobSpecTypeErrorsInUserWords(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: \"60\"\n", "submit: -:3: run_seconds: must be a number, got a string"},
		{"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: 1m\n", "submit: -:3: run_seconds: must be a number, got a string"},
		{"queue: standard\nresources:\n  gpus: 1.5\n  pool: p\n", "submit: -:3: resources.gpus: must be a whole number from 1 to 4096, got 1.5"},
		{"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: 5\nprerequisites:\n  - {name: a, ready: true}\n  - name: b\n    ready: \"no\"\n",
			"submit: -:7: prerequisites[1].ready: must be true or false, got a string"},
		{"{\"queue\": \"standard\",\n \"resources\": {\"gpus\": 1, \"pool\": \"p\"},\n \"run_seconds\": \"60\"}\n", "submit: -:3: run_seconds: must be a number, got a string"},
		{"{\"queue\": [\"standard\"]}\n", "submit: -:1: queue: must be a string, got a list"},
	} {
		_, err := readJobSpec(strings.NewReader(c.doc), "-")
		var ue usageError
		if err == nil || !errors.As(err, &ue) || err.Error() != c.want {
			t.Errorf("%q:\n got %v\nwant %s", c.doc, err, c.want)
		}
	}
}

// A --format not accepted lists the formats in words: it was
// `want one of [text json]`.
func TestFormatErrorInWords(t *testing.T) {
	err := checkFormat("yaml", "text", "json")
	if want := `--format "yaml": want one of: text, json`; err == nil || err.Error() != want {
		t.Fatalf("%v, want %q", err, want)
	}
}
