// Package alibaba reads the Alibaba GPU cluster trace v2023 ("openb", Weng et
// al., "Beware of Fragmentation", USENIX ATC '23) and converts it into gpugov's
// scheduling vocabulary: node lists become a pool of GPUs, pod lists become
// pending jobs.
//
// The readers validate every row strictly; a bad row is reported as
// "file:line: what is wrong" (*ParseError), or skipped and counted when the
// caller asks for it (ReadOptions.SkipInvalid). Units are the trace's: CPU in
// milli-cores, memory in MiB, GPU shares in milli-GPU, times in seconds from the
// start of the trace.
package alibaba

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ParseError is one malformed row, header or CSV syntax error of a trace file.
type ParseError struct {
	File string // path as given to the reader
	Line int    // 1-based line of the record in the file
	Msg  string // what is wrong, naming the column
}

// Error returns "file:line: what is wrong".
func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// ReadOptions tunes ReadPods.
type ReadOptions struct {
	// SkipInvalid skips malformed rows (counting them in Skipped) instead of
	// stopping at the first one. A bad header is an error either way.
	SkipInvalid bool
	// Models are GPU model names accepted besides KnownModels, in node
	// lists (ReadNodesWith) and gpu_spec: an inventory exported from the
	// service (WriteNodes) names its GPUs by their NVML product names.
	Models []string
}

// knownModel reports whether m is one of KnownModels or of the options'
// Models.
func (o ReadOptions) knownModel(m string) bool { return knownModel(m) || contains(o.Models, m) }

// models lists the names the options accept, for messages.
func (o ReadOptions) models() []string { return append(slices.Clone(KnownModels), o.Models...) }

// MaxSkippedMessages is how many skipped-row messages Skipped keeps.
const MaxSkippedMessages = 5

// Skipped counts the rows a reader dropped under ReadOptions.SkipInvalid.
type Skipped struct {
	Count    int      // rows skipped
	Messages []string // the first MaxSkippedMessages "file:line: what is wrong" messages
}

func (s *Skipped) add(err error) {
	s.Count++
	if len(s.Messages) < MaxSkippedMessages {
		s.Messages = append(s.Messages, err.Error())
	}
}

// KnownModels are the GPU model names that occur in the trace's node lists and
// gpu_spec column (G1, G2, G3 are Alibaba-internal, undisclosed types).
var KnownModels = []string{"G1", "G2", "G3", "T4", "P100", "V100M16", "V100M32", "A10"}

func knownModel(m string) bool { return contains(KnownModels, m) }

// The header rows the readers require, column for column.
var (
	nodeHeader = []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}
	podHeader  = []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec",
		"qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"}
)

// csvFile walks the records of one CSV file, tracking their line numbers, and
// turns encoding/csv errors into *ParseError.
type csvFile struct {
	path string
	r    *csv.Reader
	line int // line of the record last returned
}

func openCSV(path string, f io.Reader) *csvFile {
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1 // counted by the callers, for a message naming the file's columns
	return &csvFile{path: path, r: r}
}

// next returns the next record, io.EOF at the end, or a *ParseError for a CSV
// syntax error (the reader can go on after it).
func (c *csvFile) next() ([]string, error) {
	rec, err := c.r.Read()
	if err == io.EOF {
		return nil, io.EOF
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		c.line = pe.StartLine
		return nil, &ParseError{File: c.path, Line: pe.StartLine, Msg: "CSV syntax: " + pe.Err.Error()}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.path, err)
	}
	c.line, _ = c.r.FieldPos(0)
	return rec, nil
}

func (c *csvFile) errorf(format string, args ...any) *ParseError {
	return &ParseError{File: c.path, Line: c.line, Msg: fmt.Sprintf(format, args...)}
}

// header reads and checks the header row.
func (c *csvFile) header(want []string) error {
	rec, err := c.next()
	if err == io.EOF {
		return &ParseError{File: c.path, Line: 1, Msg: "empty file: want header " + strings.Join(want, ",")}
	}
	if err != nil {
		return err
	}
	if strings.Join(rec, ",") != strings.Join(want, ",") {
		return c.errorf("header is %q, want %q", strings.Join(rec, ","), strings.Join(want, ","))
	}
	return nil
}

// fieldCount checks that rec has as many fields as the header.
func (c *csvFile) fieldCount(rec []string, header []string) error {
	if len(rec) != len(header) {
		return c.errorf("%d fields, want %d (%s)", len(rec), len(header), strings.Join(header, ","))
	}
	return nil
}

// nonNegInt parses a required integer column in 0..highest (vocab's
// bounds: docs/design.md "Bounds of outside input").
func (c *csvFile) nonNegInt(col, s string, highest int64) (int64, error) {
	if s == "" {
		return 0, c.errorf("%s is empty, want a non-negative integer", col)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, c.errorf("%s %q is not an integer", col, s)
	}
	if v < 0 {
		return 0, c.errorf("%s %d is negative", col, v)
	}
	if v > highest {
		return 0, c.errorf("%s %d is more than %d", col, v, highest)
	}
	return v, nil
}

// readRows opens path, checks the header and calls row for each record with
// the right field count. Errors from row (always *ParseError) and CSV syntax
// errors stop the read unless skip is set, in which case they are counted.
func readRows(path string, header []string, skip bool, row func(c *csvFile, rec []string) error) (Skipped, error) {
	var skipped Skipped
	f, err := os.Open(path)
	if err != nil {
		return skipped, err
	}
	defer f.Close()
	c := openCSV(path, f)
	if err := c.header(header); err != nil {
		return skipped, err
	}
	for {
		rec, err := c.next()
		if err == io.EOF {
			return skipped, nil
		}
		if err == nil {
			if err = c.fieldCount(rec, header); err == nil {
				err = row(c, rec)
			}
		}
		var pe *ParseError
		if err != nil && (!skip || !errors.As(err, &pe)) {
			return skipped, err
		}
		if err != nil {
			skipped.add(err)
		}
	}
}
