// Package philly reads the Microsoft Philly trace of 2017 (Jeon et al.,
// "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
// Workloads", USENIX ATC '19) in the derived form kept at
// ../shared/traces/philly-2017/ (its README describes every file), and
// converts it into gpugov's scheduling vocabulary (package trace).
//
// Three files are read: philly.csv (one row per job: submit time, run time,
// GPUs, virtual cluster), philly_vc.csv (the node count of each virtual
// cluster) and, optionally, multigpu_pass_jobs_with_vc.csv (the 3,034 jobs
// with a recorded first start). Every row is validated; the first bad row
// stops the read with a *ParseError, "file:line: what is wrong", unless the
// caller asks to skip bad job rows (Options.SkipInvalid).
//
// Times: the trace's timestamps are "YYYY-MM-DD HH:MM:SS" in the cluster's
// local time, without a zone. They are read as wall-clock readings placed on
// UTC (time.Parse with no zone), so no daylight-saving shift is applied: a
// difference of two readings is the difference of the wall-clock readings.
// The recorded queueing delays (first start − submit) are such differences
// too, so simulated and recorded waits are measured on the same clock; only
// a wait spanning the night the cluster's clock went back (if it observed
// daylight saving) would be off by that hour.
package philly

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/trace"
)

// TimeLayout is the layout of every timestamp of the trace (time.Parse).
const TimeLayout = "2006-01-02 15:04:05"

// ParseError is one malformed row, header or CSV syntax error of a trace file.
type ParseError struct {
	File string // path as given to the reader
	Line int    // 1-based line of the record in the file
	Msg  string // what is wrong, naming the column
}

// Error returns "file:line: what is wrong".
func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// The header rows the readers require, column for column.
var (
	jobHeader      = []string{"timestamp", "duration", "num_gpus", "gpu_time", "cluster"}
	vcHeader       = []string{"vc", "node num"}
	recordedHeader = []string{"job_id", "vc", "num_gpus", "submitted_time", "first_start_time", "last_end_time",
		"num_attempts", "run_seconds_sum_attempts", "queue_delay_seconds"}
)

// JobRow is one row of philly.csv.
type JobRow struct {
	Submit   time.Time // timestamp: the submit time, wall clock read as UTC (see the package comment)
	Duration int64     // duration: seconds of run, summed over the job's attempts (≥ 0)
	GPUs     int       // num_gpus (≥ 1)
	VC       string    // cluster: the hashed virtual cluster, non-empty
	Line     int       // line of the row in its file
}

// VCRow is one row of philly_vc.csv.
type VCRow struct {
	VC    string // vc, unique and non-empty
	Nodes int    // node num (≥ 1)
	Line  int
}

// RecordedRow is one row of multigpu_pass_jobs_with_vc.csv.
type RecordedRow struct {
	JobID      string    // job_id, unique and non-empty
	VC         string    // vc; empty for the jobs the derivation could not match
	GPUs       int       // num_gpus (≥ 1)
	Submitted  time.Time // submitted_time
	FirstStart time.Time // first_start_time, not before Submitted
	LastEnd    time.Time // last_end_time, not before FirstStart
	Attempts   int       // num_attempts (≥ 1)
	RunSeconds int64     // run_seconds_sum_attempts (≥ 0)
	// QueueDelay is queue_delay_seconds, which must equal FirstStart −
	// Submitted.
	QueueDelay int64
	Line       int
}

// csvFile walks the records of one CSV file, tracking their line numbers.
type csvFile struct {
	path string
	r    *csv.Reader
	line int
}

func (c *csvFile) errorf(format string, args ...any) *ParseError {
	return &ParseError{File: c.path, Line: c.line, Msg: fmt.Sprintf(format, args...)}
}

// readRows reads the CSV of r (named path in messages), checks its header
// and calls row for each record with the header's field count. A *ParseError
// from row, a wrong field count or a CSV syntax error stops the read, or is
// counted in the returned Skipped when skip is set; a bad header always stops
// it.
func readRows(path string, r io.Reader, header []string, skip bool, row func(c *csvFile, rec []string) error) (trace.Skipped, error) {
	var skipped trace.Skipped
	c := &csvFile{path: path, r: csv.NewReader(r)}
	c.r.FieldsPerRecord = -1
	first := true
	for {
		rec, err := c.r.Read()
		if err == io.EOF {
			if first {
				return skipped, &ParseError{File: path, Line: 1, Msg: "empty file: want header " + strings.Join(header, ",")}
			}
			return skipped, nil
		}
		var pe *csv.ParseError
		switch {
		case errors.As(err, &pe):
			c.line = pe.StartLine
			err = &ParseError{File: path, Line: pe.StartLine, Msg: "CSV syntax: " + pe.Err.Error()}
		case err != nil:
			return skipped, fmt.Errorf("%s: %w", path, err)
		default:
			c.line, _ = c.r.FieldPos(0)
		}
		if first {
			if err != nil {
				return skipped, err
			}
			first = false
			if strings.Join(rec, ",") != strings.Join(header, ",") {
				return skipped, c.errorf("header is %q, want %q", strings.Join(rec, ","), strings.Join(header, ","))
			}
			continue
		}
		if err == nil && len(rec) != len(header) {
			err = c.errorf("%d fields, want %d (%s)", len(rec), len(header), strings.Join(header, ","))
		}
		if err == nil {
			err = row(c, rec)
		}
		if err != nil {
			if !skip {
				return skipped, err
			}
			skipped.Add(err)
		}
	}
}

// time parses a required timestamp column (TimeLayout, read as UTC).
func (c *csvFile) time(col, s string) (time.Time, error) {
	t, err := time.Parse(TimeLayout, s)
	if err != nil {
		return time.Time{}, c.errorf("%s %q is not a time %q", col, s, TimeLayout)
	}
	return t, nil
}

// int parses a required integer column of at least min.
func (c *csvFile) int(col, s string, min int64) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, c.errorf("%s %q is not an integer", col, s)
	}
	if v < min {
		return 0, c.errorf("%s %d is below %d", col, v, min)
	}
	return v, nil
}

// wholeSeconds parses a non-negative number of seconds written as a decimal
// ("66.0") that must be whole.
func (c *csvFile) wholeSeconds(col, s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
		return 0, c.errorf("%s %q is not a number", col, s)
	case v < 0:
		return 0, c.errorf("%s %s is negative", col, s)
	case v != math.Trunc(v) || v > 1<<53:
		return 0, c.errorf("%s %s is not a whole number of seconds", col, s)
	}
	return v, nil
}

// ReadJobs reads philly.csv: the header timestamp,duration,num_gpus,
// gpu_time,cluster, then rows with a TimeLayout timestamp, a duration of
// whole non-negative seconds ("66.0"), num_gpus ≥ 1, gpu_time equal to
// duration × num_gpus (within 1 GPU-second) and a non-empty cluster. Blank
// lines are skipped (the file ends with one). The first bad row is returned
// as a *ParseError unless skip is set, in which case bad rows are dropped
// and counted.
func ReadJobs(path string, skip bool) ([]JobRow, trace.Skipped, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, trace.Skipped{}, err
	}
	defer f.Close()
	return readJobs(path, f, skip)
}

func readJobs(path string, r io.Reader, skip bool) ([]JobRow, trace.Skipped, error) {
	var rows []JobRow
	skipped, err := readRows(path, r, jobHeader, skip, func(c *csvFile, rec []string) error {
		j, err := parseJob(c, rec)
		if err == nil {
			rows = append(rows, j)
		}
		return err
	})
	if err != nil {
		return nil, skipped, err
	}
	return rows, skipped, nil
}

func parseJob(c *csvFile, rec []string) (JobRow, error) {
	j := JobRow{VC: rec[4], Line: c.line}
	var err error
	if j.Submit, err = c.time("timestamp", rec[0]); err != nil {
		return j, err
	}
	d, err := c.wholeSeconds("duration", rec[1])
	if err != nil {
		return j, err
	}
	j.Duration = int64(d)
	n, err := c.int("num_gpus", rec[2], 1)
	if err != nil {
		return j, err
	}
	if n > 1<<20 {
		return j, c.errorf("num_gpus %d is implausibly large", n)
	}
	j.GPUs = int(n)
	gt, err := strconv.ParseFloat(rec[3], 64)
	if err != nil || math.IsNaN(gt) || math.IsInf(gt, 0) {
		return j, c.errorf("gpu_time %q is not a number", rec[3])
	}
	if want := d * float64(n); math.Abs(gt-want) > 1 {
		return j, c.errorf("gpu_time %s is not duration × num_gpus = %.0f", rec[3], want)
	}
	if j.VC == "" {
		return j, c.errorf("cluster is empty")
	}
	return j, nil
}

// ReadVCs reads philly_vc.csv: the header "vc,node num", then rows of a
// unique non-empty vc and a node count ≥ 1. The first bad row is returned as
// a *ParseError.
func ReadVCs(path string) ([]VCRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readVCs(path, f)
}

func readVCs(path string, r io.Reader) ([]VCRow, error) {
	var rows []VCRow
	seen := map[string]int{}
	_, err := readRows(path, r, vcHeader, false, func(c *csvFile, rec []string) error {
		v := VCRow{VC: rec[0], Line: c.line}
		if v.VC == "" {
			return c.errorf("vc is empty")
		}
		if first, dup := seen[v.VC]; dup {
			return c.errorf("vc %q repeats the row of line %d", v.VC, first)
		}
		n, err := c.int("node num", rec[1], 1)
		if err != nil {
			return err
		}
		if n > 1<<20 {
			return c.errorf("node num %d is implausibly large", n)
		}
		v.Nodes = int(n)
		seen[v.VC] = v.Line
		rows = append(rows, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// ReadRecorded reads multigpu_pass_jobs_with_vc.csv: its nine columns
// (recordedHeader), a unique non-empty job_id, num_gpus ≥ 1, TimeLayout
// times with submitted ≤ first start ≤ last end, num_attempts ≥ 1, a
// non-negative run_seconds_sum_attempts and a queue_delay_seconds equal to
// first start − submitted. The first bad row is returned as a *ParseError.
func ReadRecorded(path string) ([]RecordedRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readRecorded(path, f)
}

func readRecorded(path string, r io.Reader) ([]RecordedRow, error) {
	var rows []RecordedRow
	seen := map[string]int{}
	_, err := readRows(path, r, recordedHeader, false, func(c *csvFile, rec []string) error {
		row, err := parseRecorded(c, rec)
		if err != nil {
			return err
		}
		if first, dup := seen[row.JobID]; dup {
			return c.errorf("job_id %q repeats the row of line %d", row.JobID, first)
		}
		seen[row.JobID] = row.Line
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func parseRecorded(c *csvFile, rec []string) (RecordedRow, error) {
	r := RecordedRow{JobID: rec[0], VC: rec[1], Line: c.line}
	if r.JobID == "" {
		return r, c.errorf("job_id is empty")
	}
	n, err := c.int("num_gpus", rec[2], 1)
	if err != nil {
		return r, err
	}
	if n > 1<<20 {
		return r, c.errorf("num_gpus %d is implausibly large", n)
	}
	r.GPUs = int(n)
	if r.Submitted, err = c.time("submitted_time", rec[3]); err != nil {
		return r, err
	}
	if r.FirstStart, err = c.time("first_start_time", rec[4]); err != nil {
		return r, err
	}
	if r.LastEnd, err = c.time("last_end_time", rec[5]); err != nil {
		return r, err
	}
	switch {
	case r.FirstStart.Before(r.Submitted):
		return r, c.errorf("first_start_time %s is before submitted_time %s", rec[4], rec[3])
	case r.LastEnd.Before(r.FirstStart):
		return r, c.errorf("last_end_time %s is before first_start_time %s", rec[5], rec[4])
	}
	a, err := c.int("num_attempts", rec[6], 1)
	if err != nil {
		return r, err
	}
	r.Attempts = int(min(a, 1<<30))
	if r.RunSeconds, err = c.int("run_seconds_sum_attempts", rec[7], 0); err != nil {
		return r, err
	}
	if r.QueueDelay, err = c.int("queue_delay_seconds", rec[8], 0); err != nil {
		return r, err
	}
	if want := int64(r.FirstStart.Sub(r.Submitted) / time.Second); r.QueueDelay != want {
		return r, c.errorf("queue_delay_seconds %d is not first_start_time − submitted_time = %d", r.QueueDelay, want)
	}
	return r, nil
}

// nodeSequenceHeader is philly_node_sequence.csv's header.
var nodeSequenceHeader = []string{"time", "active", "total"}

// NodeSample is one row of philly_node_sequence.csv: at minute At, Active
// of the cluster's Total nodes reported GPU utilisation (HeliosArtifact
// derived the counts from Philly's GPU-utilisation log, so they are nodes
// that reported, not an inventory; the folder's README).
type NodeSample struct {
	At     time.Time // time, read as UTC like every timestamp of the trace
	Active int       // active: 0 ≤ Active ≤ Total
	Total  int       // total (≥ 0)
	Line   int
}

// ReadNodeSequence reads philly_node_sequence.csv: the header
// "time,active,total", then rows of a TimeLayout time in increasing order
// and counts 0 ≤ active ≤ total. The first bad row is returned as a
// *ParseError.
func ReadNodeSequence(path string) ([]NodeSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readNodeSequence(path, f)
}

func readNodeSequence(path string, r io.Reader) ([]NodeSample, error) {
	var rows []NodeSample
	_, err := readRows(path, r, nodeSequenceHeader, false, func(c *csvFile, rec []string) error {
		s := NodeSample{Line: c.line}
		var err error
		if s.At, err = c.time("time", rec[0]); err != nil {
			return err
		}
		if n := len(rows); n > 0 && !s.At.After(rows[n-1].At) {
			return c.errorf("time %s is not after the previous row's %s", rec[0], rows[n-1].At.Format(TimeLayout))
		}
		a, err := c.int("active", rec[1], 0)
		if err != nil {
			return err
		}
		t, err := c.int("total", rec[2], 0)
		if err != nil {
			return err
		}
		if t > 1<<20 {
			return c.errorf("total %d is implausibly large", t)
		}
		if a > t {
			return c.errorf("active %d is above total %d", a, t)
		}
		s.Active, s.Total = int(a), int(t)
		rows = append(rows, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}
