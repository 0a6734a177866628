package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Fuzz targets of the API's parsers of outside input (`make fuzz` runs each
// for FUZZTIME; plain `go test` runs their seeds and testdata/fuzz corpora).
// Properties: no panic; every rejection names a field, or is a problem of
// the whole body (checkWholeBody); anything accepted round-trips (encode,
// decode, encode again gives the same bytes) and is inside vocab.Bounds.

// wholeBodyProblems are the messages a rejection without a field may have:
// the body as a whole is not one JSON object (where JSON says, at a byte
// offset).
var wholeBodyProblems = []string{"invalid JSON at byte", "truncated JSON", "empty body", "unexpected data after the JSON object",
	"body larger than", "the body must be a JSON object"}

// checkRejection fails t unless e names a field or a whole-body problem and
// is a 4xx.
func checkRejection(t *testing.T, e *Error) {
	t.Helper()
	if e.Status < 400 || e.Status > 499 {
		t.Fatalf("rejection with status %d, want 4xx: %v", e.Status, e)
	}
	if e.Body.Field != "" {
		return
	}
	for _, p := range wholeBodyProblems {
		if strings.Contains(e.Body.Message, p) {
			return
		}
	}
	t.Fatalf("rejection names no field: %q", e.Body.Message)
}

// checkFieldErrors fails t unless every error names a field.
func checkFieldErrors(t *testing.T, errs []FieldError) {
	t.Helper()
	for _, fe := range errs {
		if fe.Field == "" {
			t.Fatalf("validation error without a field: %q", fe.Message)
		}
	}
}

// roundTrip encodes v, decodes the bytes into a fresh T with decode and
// checks that encoding that gives the same bytes.
func roundTrip[T any](t *testing.T, v *T, decode func([]byte) (*T, *Error)) {
	t.Helper()
	first, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted value does not encode: %v", err)
	}
	again, apiErr := decode(first)
	if apiErr != nil {
		t.Fatalf("accepted value's encoding %s is rejected: %v", first, apiErr)
	}
	second, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("round trip changed the value:\n%s\n%s", first, second)
	}
}

func decodeSpecBytes(b []byte) (*JobSpec, *Error) { return DecodeJobSpec(bytes.NewReader(b)) }

// FuzzJobSpecJSON fuzzes POST /v1/jobs's decoder and validator.
func FuzzJobSpecJSON(f *testing.F) {
	for _, s := range []string{
		`{"queue":"standard","resources":{"gpus":1,"pool":"alibaba"},"run_seconds":60}`,
		`{"queue":"standard","resources":{"gpus":1,"gpu_milli":500,"gpu_memory_mib":16384,"gpu_models":["T4"],"pool":"p","topology":"same-node","cpu_milli":4000,"memory_mib":8192,"labels":{"job_type":"train"},"node_selector":{"network":"infiniband"}},"command":["python","train.py"],"env":{"A":"1"},"recovery":{"checkpointable":true,"checkpoint_interval_s":600,"profile":"train","total_steps":1000},"prerequisites":[{"name":"data","ready":false,"message":"copying"}],"hold":true}`,
		`{"queue":"standard","resources":{"gpus":1,"pool":"p"},"run_seconds":1e308}`,
		`{"queue":"standard","resources":{"gpus":9223372036854775808,"pool":"p"},"run_seconds":1}`,
		`{"queue":"standard","resources":{"gpus":1,"pool":"p","gpu_mili":3},"run_seconds":1}`,
		`{"queue":"standard","resources":{"gpus":1.5,"pool":"p"}}`,
		`[]`, `null`, `{}`, `{"queue":"\u0000"}`, `{"queue":"standard"} {}`, `{"queue":`,
		`{"env":{"":"x","A=B":"y"},"command":[""]}`,
		`{"prerequisites":[{"name":"a"},{"name":"a"},{"name":" "}]}`,
	} {
		f.Add([]byte(s))
	}
	known := func(q string) bool { return q == "standard" || q == "batch" }
	f.Fuzz(func(t *testing.T, body []byte) {
		spec, apiErr := DecodeJobSpec(bytes.NewReader(body))
		if apiErr != nil {
			checkRejection(t, apiErr)
			return
		}
		errs := ValidateJobSpec(spec, known)
		checkFieldErrors(t, errs)
		if len(errs) > 0 {
			return
		}
		checkSpecBounds(t, spec)
		roundTrip(t, spec, decodeSpecBytes)
		if again, _ := decodeSpecBytes(mustJSON(t, spec)); len(ValidateJobSpec(again, known)) > 0 {
			t.Fatalf("a valid spec's encoding does not validate: %v", ValidateJobSpec(again, known))
		}
	})
}

// checkSpecBounds fails t when a valid spec is outside vocab's bounds.
func checkSpecBounds(t *testing.T, s *JobSpec) {
	t.Helper()
	r := s.Resources
	ok := r.GPUs >= 1 && r.GPUs <= vocab.MaxGPUs && r.GPUMilli >= 0 && r.GPUMilli <= vocab.MaxGPUMilli &&
		r.GPUMemoryMiB >= 0 && r.GPUMemoryMiB <= vocab.MaxGPUMemoryMiB && r.CPUMilli >= 0 && r.CPUMilli <= vocab.MaxCPUMilli &&
		r.MemoryMiB >= 0 && r.MemoryMiB <= vocab.MaxMemoryMiB && s.RunSeconds >= 0 && s.RunSeconds <= vocab.MaxRunSeconds &&
		s.Recovery.CheckpointIntervalSeconds >= 0 && s.Recovery.CheckpointIntervalSeconds <= vocab.MaxRunSeconds &&
		s.Recovery.TotalSteps >= 0 && s.Recovery.TotalSteps <= vocab.MaxTotalSteps
	if !ok {
		t.Fatalf("a valid spec is out of bounds: %+v", s)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzCheckpointReport fuzzes POST /v1/jobs/{id}/runs/{run}/checkpoints's
// decoder and validator.
func FuzzCheckpointReport(f *testing.F) {
	for _, s := range []string{
		`{"at":"2026-12-01T10:00:00Z","step":120,"location":"s3://bucket/ckpt-120"}`,
		`{"at":"2026-12-01T10:00:00.123456789+02:00","step":0,"location":"/ckpt"}`,
		`{"at":"0001-01-01T00:00:00Z","step":-1}`,
		`{"at":"2026-12-01T10:00:00Z","step":9007199254740993,"location":"x"}`,
		`{"at":"not a time","step":1,"location":"x"}`, `{"step":"1"}`, `{"at":null}`, ``,
	} {
		f.Add([]byte(s))
	}
	decode := func(b []byte) (*Checkpoint, *Error) {
		var cp Checkpoint
		if e := decodeStrict(bytes.NewReader(b), &cp, false); e != nil {
			return nil, e
		}
		return &cp, nil
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cp, apiErr := decode(body)
		if apiErr != nil {
			checkRejection(t, apiErr)
			return
		}
		errs := ValidateCheckpoint(cp)
		checkFieldErrors(t, errs)
		if len(errs) > 0 {
			return
		}
		if cp.Step < 0 || cp.Step > vocab.MaxTotalSteps {
			t.Fatalf("a valid checkpoint's step %d is out of bounds", cp.Step)
		}
		roundTrip(t, cp, decode)
	})
}

// FuzzSamplesReport fuzzes POST /v1/nodes/{name}/samples's decoder and
// validator.
func FuzzSamplesReport(f *testing.F) {
	for _, s := range []string{
		`{"samples":[{"gpu_uuid":"GPU-1","at":"2026-12-01T10:00:00Z","gpu_percent":3,"memory_used_mib":100}]}`,
		`{"samples":[{"gpu_uuid":"GPU 1","at":"2026-12-01T10:00:00Z","gpu_percent":101,"memory_used_mib":-1}]}`,
		`{"samples":[{"gpu_uuid":"GPU-1","at":"2999-01-01T00:00:00Z","gpu_percent":0,"memory_used_mib":9223372036854775807}]}`,
		`{"samples":[]}`, `{"samples":null}`, `{"samples":[{}]}`, `{"samples":[1]}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	decode := func(b []byte) (*SamplesReport, *Error) {
		var rep SamplesReport
		if e := decodeStrict(bytes.NewReader(b), &rep, false); e != nil {
			return nil, e
		}
		return &rep, nil
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, apiErr := decode(body)
		if apiErr != nil {
			checkRejection(t, apiErr)
			return
		}
		errs := ValidateSamples(rep.Samples, now)
		checkFieldErrors(t, errs)
		if len(errs) > 0 {
			return
		}
		for _, s := range rep.Samples {
			if s.GPUPercent < 0 || s.GPUPercent > vocab.MaxPercent || s.MemoryUsedMiB < 0 || s.MemoryUsedMiB > vocab.MaxGPUMemoryMiB {
				t.Fatalf("a valid sample is out of bounds: %+v", s)
			}
		}
		roundTrip(t, rep, decode)
	})
}

// FuzzNodeInventoryReport fuzzes POST /v1/nodes/{name}/inventory's decoder
// and validator (node "n1").
func FuzzNodeInventoryReport(f *testing.F) {
	for _, s := range []string{
		`{"node":"n1","pool":"p","source":"nvml","cpu_milli":64000,"memory_mib":512000,"labels":{"network":"infiniband"},"gpus":[{"index":0,"uuid":"GPU-a","model":"A100","memory_total_mib":81920,"memory_used_mib":10,"utilization_gpu_percent":50,"utilization_memory_percent":20,"nvlink_domain":"d0","nvlink_peers":["GPU-b"],"healthy":true,"health_notes":[],"processes":[]}],"collected_at":"2026-12-01T10:00:00Z"}`,
		`{"node":"n1","pool":"p","source":"static","gpus":[{"index":0,"uuid":"GPU-a","model":"T4","memory_total_mib":16384},{"index":0,"uuid":"GPU-a","model":"","memory_total_mib":0}]}`,
		`{"node":"n1","pool":"p","source":"static","cpu_milli":9223372036854775807,"memory_mib":-1,"gpus":[{"index":9223372036854775807,"uuid":"GPU-a","model":"T4","memory_total_mib":9223372036854775807}]}`,
		`{"node":"n2","pool":"","source":"x"}`,
	} {
		f.Add([]byte(s))
	}
	decode := func(b []byte) (*inventory.NodeInventory, *Error) {
		var inv inventory.NodeInventory
		if e := decodeStrict(bytes.NewReader(b), &inv, false); e != nil {
			return nil, e
		}
		return &inv, nil
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		inv, apiErr := decode(body)
		if apiErr != nil {
			checkRejection(t, apiErr)
			return
		}
		errs := ValidateNodeInventory("n1", inv)
		checkFieldErrors(t, errs)
		if len(errs) > 0 {
			return
		}
		if inv.CPUMilli > vocab.MaxCPUMilli || inv.MemoryMiB > vocab.MaxMemoryMiB || len(inv.GPUs) > vocab.MaxGPUsPerNode {
			t.Fatalf("a valid report is out of bounds: cpu %d, memory %d, %d GPUs", inv.CPUMilli, inv.MemoryMiB, len(inv.GPUs))
		}
		for _, g := range inv.GPUs {
			if g.Index > vocab.MaxGPUIndex || g.MemoryTotalMiB > vocab.MaxGPUMemoryMiB {
				t.Fatalf("a valid GPU is out of bounds: %+v", g)
			}
		}
		roundTrip(t, inv, decode)
	})
}

// queryContext is a gin context of GET /v1/reports/queues?rawQuery.
func queryContext(rawQuery string) *gin.Context {
	gin.SetMode(gin.TestMode)
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/v1/reports/queues", RawQuery: rawQuery}, Header: http.Header{}}
	return c
}

// FuzzReportQuery fuzzes the report routes' query parameters: the window
// (from, to), a compare route's FROM,TO pair (before), group_by and a list
// route's limit. Every rejection names its parameter; every accepted window
// is inside vocab's report bounds.
func FuzzReportQuery(f *testing.F) {
	for _, s := range []string{
		"from=2026-11-30T00:00:00Z&to=2026-12-01T00:00:00Z&group_by=queue,tier",
		"to=2026-12-01T00:00:00Z", "group_by=", "group_by=queue,queue", "group_by=pool,,project",
		"from=0001-01-01T00:00:00Z&to=0001-01-02T00:00:00Z",
		"from=1677-06-01T00:00:00Z&to=1677-06-02T00:00:00Z",
		"from=9999-12-31T00:00:00Z&to=9999-12-31T23:59:59Z",
		"from=2026-12-01T00:00:00Z&to=2026-11-01T00:00:00Z",
		"before=2026-11-01T00:00:00Z,2026-11-02T00:00:00Z&limit=5",
		"before=2026-11-01T00:00:00Z&limit=0", "limit=1001", "limit=-1", "limit=99999999999999999999",
		"from=%zz", "from=2026-12-01T00:00:00+25:00",
	} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	minFrom := time.Unix(vocab.MinReportUnixSeconds, 0)
	f.Fuzz(func(t *testing.T, rawQuery string) {
		c := queryContext(rawQuery)
		check := func(e *Error, fields ...string) bool {
			t.Helper()
			if e == nil {
				return true
			}
			checkRejection(t, e)
			for _, f := range fields {
				if e.Body.Field == f {
					return false
				}
			}
			t.Fatalf("rejection names %q, want one of %v: %v", e.Body.Field, fields, e)
			return false
		}
		checkWin := func(w windowBounds) {
			t.Helper()
			if !w.To.After(w.From) || w.To.Sub(w.From) > MaxReportWindow || w.From.Before(minFrom) || w.From.After(now) {
				t.Fatalf("accepted window %s..%s is out of bounds", w.From, w.To)
			}
		}
		if w, e := windowParams(c, now); check(e, "from", "to") {
			checkWin(windowBounds{w.From, w.To})
		}
		if _, ok := c.GetQuery("before"); ok {
			if w, e := windowPairParam(c, "before", now); check(e, "before") {
				checkWin(windowBounds{w.From, w.To})
			}
		}
		if keys, e := groupByParam(c); check(e, "group_by") && keys != nil {
			if again, err := parseGroupByKeys(keys); err != nil || strings.Join(again, ",") != strings.Join(keys, ",") {
				t.Fatalf("group_by %v does not round-trip: %v %v", keys, again, err)
			}
		}
		if n, e := countParam(c, "limit"); check(e, "limit") && n != 0 && (n < 1 || n > vocab.MaxListLimit) {
			t.Fatalf("accepted limit %d is out of bounds", n)
		}
	})
}

// windowBounds is a window's two ends.
type windowBounds struct{ From, To time.Time }

// parseGroupByKeys parses canonical keys again through the route's parser.
func parseGroupByKeys(keys []string) ([]string, *Error) {
	return groupByParam(queryContext("group_by=" + url.QueryEscape(strings.Join(keys, ","))))
}

// TestFuzzFindingsNameTheField holds what the API's fuzz targets' seeds
// found: each input was accepted, or refused naming no field, before.
func TestFuzzFindingsNameTheField(t *testing.T) {
	var cp Checkpoint
	if e := decodeStrict(strings.NewReader(`{"at":"not a time","step":1,"location":"x"}`), &cp, false); e == nil || e.Body.Field != "at" || e.Status != 400 {
		t.Errorf("a bad checkpoint time: %v, want a 400 naming at", e)
	}
	var rep SamplesReport
	if e := decodeStrict(strings.NewReader(`{"samples":[{"gpu_uuid":"G","at":"2026-13-01T00:00:00Z"}]}`), &rep, false); e == nil || e.Body.Field != "samples[0].at" {
		t.Errorf("a bad sample time: %v, want a 400 naming samples[0].at", e)
	}
	if _, e := DecodeJobSpec(strings.NewReader(`[]`)); e == nil || !strings.Contains(e.Body.Message, "the body must be a JSON object") {
		t.Errorf("a top-level array: %v, want a whole-body 400", e)
	}
	if errs := ValidateCheckpoint(&Checkpoint{At: time.Now(), Step: MaxTotalSteps + 1, Location: "x"}); len(errs) != 1 || errs[0].Field != "step" {
		t.Errorf("a checkpoint step above 2^53: %v, want step refused", errs)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sm := []inventory.UtilizationSample{{GPUUUID: "GPU-1", At: now, MemoryUsedMiB: 1 << 62}}
	if errs := ValidateSamples(sm, now); len(errs) != 1 || errs[0].Field != "samples[0].memory_used_mib" {
		t.Errorf("a sample of 2^62 MiB: %v, want memory_used_mib refused", errs)
	}
	inv := &inventory.NodeInventory{Node: "n1", Pool: "p", Source: inventory.SourceStatic, CPUMilli: 1 << 62, MemoryMiB: 1 << 62,
		GPUs: []inventory.GPUInfo{{Index: 1 << 40, UUID: "GPU-1", Model: "T4", MemoryTotalMiB: 1 << 62}}}
	var fields []string
	for _, fe := range ValidateNodeInventory("n1", inv) {
		fields = append(fields, fe.Field)
	}
	if strings.Join(fields, ",") != "cpu_milli,memory_mib,gpus[0].index,gpus[0].memory_total_mib" {
		t.Errorf("an int64-sized inventory report: refused fields %v", fields)
	}
	for _, q := range []string{"from=0001-01-01T00:00:00Z&to=0001-01-02T00:00:00Z", "from=1677-06-01T00:00:00Z&to=1677-06-02T00:00:00Z"} {
		if _, e := windowParams(queryContext(q), now); e == nil || e.Body.Field != "from" {
			t.Errorf("%s: %v, want a 400 naming from (Unix nanoseconds do not reach it)", q, e)
		}
	}
}
