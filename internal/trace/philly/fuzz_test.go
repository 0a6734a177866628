package philly

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fuzzName is the file name the fuzz targets give their input.
const fuzzName = "fuzz.csv"

// checkRejection fails t unless err is a *ParseError naming fuzzName and a
// line of the input, "fuzz.csv:N: ...".
func checkRejection(t *testing.T, data []byte, err error) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *ParseError", err, err)
	}
	lines := bytes.Count(data, []byte("\n")) + 1
	if pe.File != fuzzName || pe.Line < 1 || pe.Line > lines || !strings.HasPrefix(err.Error(), fmt.Sprintf("%s:%d: ", fuzzName, pe.Line)) {
		t.Fatalf("rejection %q does not name %s and a line in 1..%d", err, fuzzName, lines)
	}
}

// encode writes records as CSV.
func encode(t *testing.T, header []string, rows [][]string) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(header); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteAll(rows); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func addSeeds(f *testing.F, files ...string) {
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// FuzzPhillyJobs reads arbitrary bytes as philly.csv: the reader never
// panics, a rejection names the file and a line of the input, and the rows
// it accepts, written back as CSV, read back the same (Line aside).
func FuzzPhillyJobs(f *testing.F) {
	addSeeds(f, "testdata/jobs_good.csv", "testdata/jobs_bad_time.csv", "testdata/jobs_bad_gputime.csv", "testdata/jobs_bad_fields.csv")
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, _, err := readJobs(fuzzName, bytes.NewReader(data), false)
		if err != nil {
			checkRejection(t, data, err)
			return
		}
		var recs [][]string
		for _, r := range rows {
			d := strconv.FormatInt(r.Duration, 10) + ".0"
			recs = append(recs, []string{r.Submit.Format(TimeLayout), d, strconv.Itoa(r.GPUs),
				strconv.FormatInt(r.Duration*int64(r.GPUs), 10) + ".0", r.VC})
		}
		again, _, err := readJobs(fuzzName, bytes.NewReader(encode(t, jobHeader, recs)), false)
		if err != nil {
			t.Fatalf("accepted rows written back are rejected: %v", err)
		}
		for i := range again {
			again[i].Line = rows[i].Line
		}
		if !reflect.DeepEqual(rows, again) && !(len(rows) == 0 && len(again) == 0) {
			t.Fatalf("round trip changed the rows:\n%+v\n%+v", rows, again)
		}
	})
}

// FuzzPhillyVCs is FuzzPhillyJobs for philly_vc.csv.
func FuzzPhillyVCs(f *testing.F) {
	addSeeds(f, "testdata/vcs_good.csv", "testdata/vcs_dup.csv", "testdata/vcs_zero.csv")
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := readVCs(fuzzName, bytes.NewReader(data))
		if err != nil {
			checkRejection(t, data, err)
			return
		}
		var recs [][]string
		for _, r := range rows {
			recs = append(recs, []string{r.VC, strconv.Itoa(r.Nodes)})
		}
		again, err := readVCs(fuzzName, bytes.NewReader(encode(t, vcHeader, recs)))
		if err != nil {
			t.Fatalf("accepted rows written back are rejected: %v", err)
		}
		for i := range again {
			again[i].Line = rows[i].Line
		}
		if !reflect.DeepEqual(rows, again) && !(len(rows) == 0 && len(again) == 0) {
			t.Fatalf("round trip changed the rows:\n%+v\n%+v", rows, again)
		}
	})
}

// FuzzPhillyRecorded is FuzzPhillyJobs for multigpu_pass_jobs_with_vc.csv.
func FuzzPhillyRecorded(f *testing.F) {
	addSeeds(f, "testdata/recorded_good.csv", "testdata/recorded_bad_delay.csv", "testdata/recorded_bad_order.csv")
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := readRecorded(fuzzName, bytes.NewReader(data))
		if err != nil {
			checkRejection(t, data, err)
			return
		}
		var recs [][]string
		for _, r := range rows {
			recs = append(recs, []string{r.JobID, r.VC, strconv.Itoa(r.GPUs), r.Submitted.Format(TimeLayout),
				r.FirstStart.Format(TimeLayout), r.LastEnd.Format(TimeLayout), strconv.Itoa(r.Attempts),
				strconv.FormatInt(r.RunSeconds, 10), strconv.FormatInt(r.QueueDelay, 10)})
		}
		again, err := readRecorded(fuzzName, bytes.NewReader(encode(t, recordedHeader, recs)))
		if err != nil {
			t.Fatalf("accepted rows written back are rejected: %v", err)
		}
		for i := range again {
			again[i].Line = rows[i].Line
		}
		if !reflect.DeepEqual(rows, again) && !(len(rows) == 0 && len(again) == 0) {
			t.Fatalf("round trip changed the rows:\n%+v\n%+v", rows, again)
		}
	})
}
