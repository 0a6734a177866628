package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpugov/gpugov/internal/dupkey"
	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/yamlnode"
	"github.com/gpugov/gpugov/store"
)

// MaxSpecBytes bounds a job spec body; larger bodies are rejected as malformed.
const MaxSpecBytes = 1 << 20

// JobSpec is the body of POST /v1/jobs and the content of a CLI job file (YAML
// or JSON). Units: milli-GPU, MiB, milli-cores, seconds.
type JobSpec struct {
	// Project defaults to the token's project; a submitter may only name its own.
	Project   string       `json:"project,omitempty" yaml:"project,omitempty"`
	Queue     string       `json:"queue" yaml:"queue"`
	Resources ResourceSpec `json:"resources" yaml:"resources"`
	// Command is the program and its arguments, run by the process executor on
	// the allocation's node. A job without a command is simulated.
	Command []string          `json:"command,omitempty" yaml:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	// RunSeconds is how long a simulated job computes, in seconds; required
	// (> 0) without a command, optional (an estimate) with one; at most
	// store.MaxRunSeconds (10 years).
	RunSeconds    float64            `json:"run_seconds,omitempty" yaml:"run_seconds,omitempty"`
	Recovery      RecoverySpec       `json:"recovery,omitzero" yaml:"recovery,omitempty"`
	Prerequisites []PrerequisiteSpec `json:"prerequisites,omitempty" yaml:"prerequisites,omitempty"`
	// Protected keeps the job from preemption and reclaim; only operators and
	// admins may set it (docs/design.md "protection").
	Protected bool `json:"protected,omitempty" yaml:"protected,omitempty"`
	// Hold submits the job held: it waits with reason "held" until released.
	Hold bool `json:"hold,omitempty" yaml:"hold,omitempty"`
}

// ResourceSpec is the resource request of a job (docs/design.md "resource request").
type ResourceSpec struct {
	GPUs         int      `json:"gpus" yaml:"gpus"`
	GPUMilli     int      `json:"gpu_milli,omitempty" yaml:"gpu_milli,omitempty"`           // share of one GPU, 1..1000, only with gpus == 1
	GPUMemoryMiB int64    `json:"gpu_memory_mib,omitempty" yaml:"gpu_memory_mib,omitempty"` // minimum per GPU
	GPUModels    []string `json:"gpu_models,omitempty" yaml:"gpu_models,omitempty"`
	Pool         string   `json:"pool" yaml:"pool"`
	Topology     string   `json:"topology,omitempty" yaml:"topology,omitempty"` // any (default), same-node, nvlink-domain, whole-nodes
	CPUMilli     int64    `json:"cpu_milli,omitempty" yaml:"cpu_milli,omitempty"`
	MemoryMiB    int64    `json:"memory_mib,omitempty" yaml:"memory_mib,omitempty"`
	// Labels are descriptive (store.JobTypeLabel "job_type" names the
	// report's job type); they never constrain placement.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	// NodeSelector is the node labels the job requires (Kubernetes
	// nodeSelector): every pair must equal a node's label exactly, e.g.
	// {"network": "infiniband"}. At most MaxNodeSelectorPairs pairs.
	NodeSelector map[string]string `json:"node_selector,omitempty" yaml:"node_selector,omitempty"`
}

// MaxNodeSelectorPairs bounds resources.node_selector; each key and value is
// 1..inventory.MaxLabelLength bytes, like a node label.
const MaxNodeSelectorPairs = vocab.MaxNodeSelectorPairs

// Upper bounds of a job's resource request, vocab's (docs/design.md "Bounds
// of outside input"): generous beyond any real job, and small enough that
// every value fits its job_queue column (gpus is an integer) and sums over
// thousands of jobs stay far from int64 overflow.
const (
	MaxGPUs         = vocab.MaxGPUs         // resources.gpus
	MaxGPUMemoryMiB = vocab.MaxGPUMemoryMiB // resources.gpu_memory_mib, per GPU: 1 TiB
	MaxCPUMilli     = vocab.MaxCPUMilli     // resources.cpu_milli: about 1 million cores
	MaxMemoryMiB    = vocab.MaxMemoryMiB    // resources.memory_mib: 1 PiB
)

// MaxGPUModelLength bounds each resources.gpu_models entry, in bytes: NVML
// model names ("NVIDIA H100 80GB HBM3") are far shorter. resources.pool
// follows the node pool name rule of node reports (namePattern, at most 253
// bytes), so a job can name every pool a node can have and the pool fits
// the GpugovPool search attribute (docs/design.md "Job spec bounds").
const MaxGPUModelLength = 128

// RecoverySpec is what the submitter declares about saving and resuming.
type RecoverySpec struct {
	Checkpointable            bool  `json:"checkpointable,omitempty" yaml:"checkpointable,omitempty"`
	CheckpointIntervalSeconds int64 `json:"checkpoint_interval_s,omitempty" yaml:"checkpoint_interval_s,omitempty"`
	// Profile names the job's recovery profile within its project (the
	// stored profile is "<project>/<profile>", store.ProfileOf): jobs whose
	// save and resume behave alike share it and its evidence (docs/design.md
	// §1 "recovery profile"). Letters, digits, '.', '_' and '-', at most
	// store.MaxProfileNameLength bytes. Default: the base name of the
	// command's first word, or "simulated" for a job without a command.
	Profile string `json:"profile,omitempty" yaml:"profile,omitempty"`
	// TotalSteps is the job's declared work in steps, the highest step a
	// checkpoint of it may report; 0..MaxTotalSteps, for a job with a
	// command (a job without one declares run_seconds, one step per
	// second). 0 declares none: then a checkpoint is checked only for going
	// backwards.
	TotalSteps int64 `json:"total_steps,omitempty" yaml:"total_steps,omitempty"`
}

// MaxTotalSteps bounds recovery.total_steps and every reported step:
// vocab.MaxTotalSteps, 2^53, the largest integer a JSON number carries
// exactly.
const MaxTotalSteps = vocab.MaxTotalSteps

// PrerequisiteSpec is one prerequisite as declared at submit time.
type PrerequisiteSpec struct {
	Name    string `json:"name" yaml:"name"`
	Ready   bool   `json:"ready" yaml:"ready"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
}

// Request converts the resources to the scheduling contract's type; call it
// only on a validated spec.
func (r ResourceSpec) Request() scheduling.ResourceRequest {
	topo := scheduling.Topology(r.Topology)
	if topo == "" {
		topo = scheduling.TopologyAny
	}
	return scheduling.ResourceRequest{
		GPUs: r.GPUs, GPUMilli: r.GPUMilli, GPUMemoryMiB: r.GPUMemoryMiB,
		GPUModels: r.GPUModels, Pool: r.Pool, Topology: topo,
		CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, Labels: r.Labels, NodeSelector: r.NodeSelector,
	}
}

// Simulated reports whether the job runs on the simulated executor: it has
// no command, so it only "computes" for RunSeconds.
func (s *JobSpec) Simulated() bool { return len(s.Command) == 0 }

// DecodeJobSpec reads a JSON job spec strictly: unknown fields, trailing data,
// wrong types and oversize bodies are 400 errors naming the field where JSON
// tells it. It does not validate meaning; see ValidateJobSpec.
func DecodeJobSpec(r io.Reader) (*JobSpec, *Error) {
	var spec JobSpec
	if err := decodeStrict(r, &spec, false); err != nil {
		return nil, err
	}
	return &spec, nil
}

// decodeStrict decodes one JSON object of at most MaxSpecBytes from r into v,
// rejecting unknown fields, a key repeated within one object at any depth
// (a 400 naming it: "queue: repeated key"; encoding/json would keep the
// last) and trailing data. An empty body is an error unless allowEmpty,
// when v is left as it is. On any refusal v may be partly filled: the
// caller stores nothing.
func decodeStrict(r io.Reader, v any, allowEmpty bool) *Error {
	data, err := io.ReadAll(io.LimitReader(r, MaxSpecBytes+1))
	if tooLarge := maxBytesError(err); tooLarge != nil {
		return tooLarge
	}
	if err != nil {
		return newError(http.StatusBadRequest, CodeMalformed, "", "reading body: %v", err)
	}
	if len(data) > MaxSpecBytes {
		return newError(http.StatusBadRequest, CodeMalformed, "", "body larger than %d bytes", MaxSpecBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return newError(http.StatusBadRequest, CodeMalformed, "", "empty body: a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, data, v)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, CodeMalformed, "", "unexpected data after the JSON object")
	}
	if f, ok := dupkey.InJSON(data); ok {
		return newError(http.StatusBadRequest, CodeMalformed, f, "%s", dupkey.Message)
	}
	// encoding/json matches a key to a field ignoring case, so
	// {"queue":"train","QUEUE":"inference"} was read as the second queue:
	// the same ambiguity as a repeated key. A field's key must be its exact
	// name; a map's keys (labels) are the caller's and stay as given.
	var doc any
	if json.Unmarshal(data, &doc) == nil {
		if path := unknownFieldPath(doc, reflect.TypeOf(v), ""); path != "" {
			return newError(http.StatusBadRequest, CodeMalformed, path, "unknown field %q (field names are case-sensitive)", path)
		}
	}
	if f := nulField(data); f != "" {
		return newError(http.StatusUnprocessableEntity, CodeInvalid, f, "contains a NUL character, which cannot be stored")
	}
	// encoding/json replaces each invalid UTF-8 byte of a string with
	// U+FFFD: {"gpu_models":["A100\xff"]} was stored as "A100\uFFFD", a
	// model no node has, the caller never told. The raw body is checked
	// (a U+FFFD the caller wrote stays theirs).
	if off := invalidUTF8At(data); off >= 0 {
		return newError(http.StatusUnprocessableEntity, CodeInvalid, valuePathAt(data, int64(off)+1), "not valid UTF-8 (byte %d of the body)", off)
	}
	return nil
}

// invalidUTF8At is the byte offset of the first byte of data that is not
// part of valid UTF-8, or -1 when data is valid.
func invalidUTF8At(data []byte) int {
	if utf8.Valid(data) {
		return -1
	}
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// jsonError turns an encoding/json error into a 400 naming the field when the
// error carries one; for an unknown field the full path is found by walking
// data against v's type, since encoding/json reports only the key.
func jsonError(err error, data []byte, v any) *Error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return newError(http.StatusBadRequest, CodeMalformed, "", "the body must be a JSON object, got JSON %s", typeErr.Value)
	case errors.As(err, &typeErr):
		return typeError(typeErr, data, boundsInput(v))
	case errors.As(err, &syntaxErr):
		return newError(http.StatusBadRequest, CodeMalformed, "", "invalid JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newError(http.StatusBadRequest, CodeMalformed, "", "truncated JSON")
	}
	// A time.Time's own decoder reports a bad time without the field: find
	// the first time-typed field whose value does not parse.
	var timeErr *time.ParseError
	if errors.As(err, &timeErr) {
		var doc any
		field := ""
		if json.Unmarshal(data, &doc) == nil {
			field = badTimePath(doc, reflect.TypeOf(v), "")
		}
		return newError(http.StatusBadRequest, CodeMalformed, field, "not an RFC 3339 time (e.g. 2026-01-05T00:00:00Z): %q", timeErr.Value)
	}
	// A time.Time given another JSON type than a string says so without
	// the field, only as text.
	if strings.Contains(err.Error(), "Time.UnmarshalJSON: input is not a JSON string") {
		var doc any
		field := ""
		if json.Unmarshal(data, &doc) == nil {
			field = badTimePath(doc, reflect.TypeOf(v), "")
		}
		return newError(http.StatusBadRequest, CodeMalformed, field, "must be %s", kindWords(timeType))
	}
	// encoding/json reports unknown fields only as text: `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = yamlnode.Join("", strings.Trim(name, `"`))
		var doc any
		if json.Unmarshal(data, &doc) == nil {
			if path := unknownFieldPath(doc, reflect.TypeOf(v), ""); path != "" {
				name = path
			}
		}
		return newError(http.StatusBadRequest, CodeMalformed, name, "unknown field %q", name)
	}
	return newError(http.StatusBadRequest, CodeMalformed, "", "invalid JSON: %v", err)
}

// QueueLookup tells whether a queue name is configured.
type QueueLookup func(name string) bool

// ValidateJobSpec checks the meaning of a decoded spec and returns every
// problem found, in field order; nil means valid. knownQueue reports
// configured queues. What the caller may set is AuthorizeJobSpec's concern.
func ValidateJobSpec(spec *JobSpec, knownQueue QueueLookup) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	switch {
	case strings.TrimSpace(spec.Queue) == "":
		add("queue", "required")
	case !knownQueue(spec.Queue):
		add("queue", "unknown queue %q (see GET /v1/queues)", spec.Queue)
	}
	errs = append(errs, validateResources(spec.Resources)...)
	errs = append(errs, validateRun(spec)...)
	if spec.Recovery.CheckpointIntervalSeconds < 0 || spec.Recovery.CheckpointIntervalSeconds > store.MaxRunSeconds {
		add("recovery.checkpoint_interval_s", "must be 0..%d seconds, got %d", store.MaxRunSeconds, spec.Recovery.CheckpointIntervalSeconds)
	}
	if spec.Recovery.CheckpointIntervalSeconds > 0 && !spec.Recovery.Checkpointable {
		add("recovery.checkpoint_interval_s", "only meaningful with recovery.checkpointable: true")
	}
	// The project joins the recovery profile ("<project>/<profile>") and
	// the reports; it follows the profile name's rule (store.ValidProfileName,
	// one home for it), so "a b/c" cannot make the profile "a b/c/simulated".
	if p := spec.Project; p != "" && !store.ValidProfileName(p) {
		add("project", "%q is not a project name: 1..%d letters, digits, '.', '_' or '-', starting with a letter or digit",
			clip(p, 64), store.MaxProfileNameLength)
	}
	if p := spec.Recovery.Profile; p != "" && !store.ValidProfileName(p) {
		add("recovery.profile", "%q is not a profile name: 1..%d letters, digits, '.', '_' or '-', starting with a letter or digit (the project is added: \"<project>/<profile>\")",
			clip(p, 64), store.MaxProfileNameLength)
	}
	switch ts := spec.Recovery.TotalSteps; {
	case ts < 0 || ts > MaxTotalSteps:
		add("recovery.total_steps", "must be 0..%d, got %d", int64(MaxTotalSteps), ts)
	case ts > 0 && spec.Simulated():
		add("recovery.total_steps", "a job without a command declares its work with run_seconds (one step per second)")
	}
	if n := len(spec.Prerequisites); n > vocab.MaxPrerequisites {
		// One error, not one per item: 50,000 prerequisites were a 201
		// whose `gpugov why` printed 5.5 MB.
		add("prerequisites", "at most %d items, got %d", vocab.MaxPrerequisites, n)
		return errs
	}
	seen := map[string]bool{}
	for i, pr := range spec.Prerequisites {
		field := fmt.Sprintf("prerequisites[%d].name", i)
		switch {
		case strings.TrimSpace(pr.Name) == "":
			add(field, "required")
		case len(pr.Name) > vocab.MaxPrerequisiteNameLength:
			add(field, "at most %d bytes, got %d", vocab.MaxPrerequisiteNameLength, len(pr.Name))
		case seen[pr.Name]:
			add(field, "duplicate prerequisite %q", pr.Name)
		}
		seen[pr.Name] = true
		if len(pr.Message) > vocab.MaxPrerequisiteMessageLength {
			add(fmt.Sprintf("prerequisites[%d].message", i), "at most %d bytes, got %d", vocab.MaxPrerequisiteMessageLength, len(pr.Message))
		}
	}
	return errs
}

// AuthorizeJobSpec checks what the caller's role allows in a spec: a
// submitter may only submit to its own project and may not set protected. It
// returns a 403 naming the field, or nil.
func AuthorizeJobSpec(spec *JobSpec, p Principal) *Error {
	if p.Role.SeesAllProjects() {
		return nil
	}
	if spec.Project != "" && spec.Project != p.Project {
		return newError(http.StatusForbidden, CodeForbidden, "project", "a %s token may only submit to its own project %q", p.Role, p.Project)
	}
	if spec.Protected {
		return newError(http.StatusForbidden, CodeForbidden, "protected", "only operators and admins may protect a job")
	}
	return nil
}

// validateResources checks the resource request (docs/design.md "resource request").
func validateResources(r ResourceSpec) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: "resources." + field, Message: fmt.Sprintf(format, args...)})
	}
	// gpugov schedules GPUs only: a job without GPUs would never be placed
	// (CPU-only work belongs to the cluster's own scheduler), so it is refused
	// here rather than left waiting forever.
	switch {
	case r.GPUs == 0: // absent and 0 decode alike
		add("gpus", "required: a whole number from 1 to %d (gpugov schedules GPU jobs only)", MaxGPUs)
	case r.GPUs < 1:
		add("gpus", "must be ≥ 1 (gpugov schedules GPU jobs only), got %d", r.GPUs)
	case r.GPUs > MaxGPUs:
		add("gpus", "must be at most %d, got %d", MaxGPUs, r.GPUs)
	}
	switch {
	case r.GPUMilli < 0 || r.GPUMilli > scheduling.MilliPerGPU:
		add("gpu_milli", "must be 1..%d milli-GPU (0 or absent: whole GPUs), got %d", scheduling.MilliPerGPU, r.GPUMilli)
	case r.GPUMilli > 0 && r.GPUs != 1:
		add("gpu_milli", "a GPU share is only allowed with gpus: 1 (gpus is %d)", r.GPUs)
	}
	if r.GPUMemoryMiB < 0 || r.GPUMemoryMiB > MaxGPUMemoryMiB {
		add("gpu_memory_mib", "must be 0..%d MiB, got %d", MaxGPUMemoryMiB, r.GPUMemoryMiB)
	}
	if n := len(r.GPUModels); n > vocab.MaxGPUModels {
		add("gpu_models", "at most %d items, got %d", vocab.MaxGPUModels, n)
		r.GPUModels = nil // one error, not one per item
	}
	for i, m := range r.GPUModels {
		switch {
		case strings.TrimSpace(m) == "":
			add(fmt.Sprintf("gpu_models[%d]", i), "empty model name")
		case len(m) > MaxGPUModelLength:
			add(fmt.Sprintf("gpu_models[%d]", i), "model name of %d bytes, at most %d allowed", len(m), MaxGPUModelLength)
		}
	}
	switch {
	case strings.TrimSpace(r.Pool) == "":
		add("pool", "required")
	case !namePattern.MatchString(r.Pool):
		add("pool", "must be a node pool name: 1-253 letters, digits, '.', '_' or '-' starting with a letter or digit")
	}
	switch scheduling.Topology(r.Topology) {
	case "", scheduling.TopologyAny, scheduling.TopologySameNode, scheduling.TopologyNVLinkDomain, scheduling.TopologyWholeNodes:
	default:
		add("topology", "must be any, same-node, nvlink-domain or whole-nodes, got %q", r.Topology)
	}
	if r.CPUMilli < 0 || r.CPUMilli > MaxCPUMilli {
		add("cpu_milli", "must be 0..%d milli-cores, got %d", MaxCPUMilli, r.CPUMilli)
	}
	if r.MemoryMiB < 0 || r.MemoryMiB > MaxMemoryMiB {
		add("memory_mib", "must be 0..%d MiB, got %d", MaxMemoryMiB, r.MemoryMiB)
	}
	if n := len(r.Labels); n > vocab.MaxJobLabels {
		add("labels", "%d pairs, at most %d allowed", n, vocab.MaxJobLabels)
	} else {
		for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
			switch v := r.Labels[k]; {
			case strings.TrimSpace(k) == "" || len(k) > vocab.MaxLabelKeyLength:
				add("labels", "key %q must be a non-blank string of at most %d bytes", clip(k, 64), vocab.MaxLabelKeyLength)
			case len(v) > vocab.MaxLabelValueLength:
				add("labels."+k, "value of %d bytes, at most %d allowed", len(v), vocab.MaxLabelValueLength)
			}
		}
	}
	if len(r.NodeSelector) > MaxNodeSelectorPairs {
		add("node_selector", "%d pairs, at most %d allowed", len(r.NodeSelector), MaxNodeSelectorPairs)
	}
	for _, k := range slices.Sorted(maps.Keys(r.NodeSelector)) {
		switch v := r.NodeSelector[k]; {
		case strings.TrimSpace(k) == "" || len(k) > inventory.MaxLabelLength:
			add("node_selector", "key %q must be a non-blank string of at most %d bytes", k, inventory.MaxLabelLength)
		case strings.TrimSpace(v) == "" || len(v) > inventory.MaxLabelLength:
			add("node_selector."+k, "value %q must be a non-blank string of at most %d bytes", v, inventory.MaxLabelLength)
		}
	}
	return errs
}

// validateRun checks command and run_seconds together.
func validateRun(spec *JobSpec) []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	switch {
	case spec.Simulated() && !(spec.RunSeconds > 0):
		add("run_seconds", "a job without a command is simulated and needs run_seconds > 0, got %g", spec.RunSeconds)
	case !spec.Simulated() && !(spec.RunSeconds >= 0):
		add("run_seconds", "must be ≥ 0 seconds, got %g", spec.RunSeconds)
	case !(spec.RunSeconds <= store.MaxRunSeconds):
		add("run_seconds", "must be at most %d seconds (10 years), got %s", store.MaxRunSeconds, plainNumber(spec.RunSeconds))
	}
	if spec.RunSeconds > 0 && spec.RunSeconds < vocab.MinPositiveRunSeconds {
		add("run_seconds", "must be 0 or %d..%d seconds, got %s (a run time is declared in seconds)",
			vocab.MinPositiveRunSeconds, store.MaxRunSeconds, strconv.FormatFloat(spec.RunSeconds, 'g', -1, 64))
	}
	if n := len(spec.Command); n > vocab.MaxCommandArgs {
		add("command", "at most %d items, got %d", vocab.MaxCommandArgs, n)
	} else {
		total := 0
		for i, arg := range spec.Command {
			total += len(arg)
			switch {
			case i == 0 && strings.TrimSpace(arg) == "":
				add("command[0]", "the program name is empty")
			case len(arg) > vocab.MaxCommandArgLength:
				add(fmt.Sprintf("command[%d]", i), "at most %d bytes, got %d", vocab.MaxCommandArgLength, len(arg))
			}
		}
		if total > vocab.MaxCommandBytes {
			add("command", "at most %d bytes in all, got %d", vocab.MaxCommandBytes, total)
		}
	}
	if n := len(spec.Env); n > vocab.MaxEnvVars {
		add("env", "%d variables, at most %d allowed", n, vocab.MaxEnvVars)
		return errs
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		v := spec.Env[k]
		total += len(k) + len(v)
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			add("env", "invalid variable name %q", clip(k, 64))
		case len(k) > vocab.MaxCommandArgLength:
			add("env", "variable name of %d bytes, at most %d allowed", len(k), vocab.MaxCommandArgLength)
		case len(v) > vocab.MaxCommandArgLength:
			add("env."+k, "at most %d bytes, got %d", vocab.MaxCommandArgLength, len(v))
		}
	}
	if total > vocab.MaxCommandBytes {
		add("env", "at most %d bytes of names and values in all, got %d", vocab.MaxCommandBytes, total)
	}
	return errs
}

// unknownFieldPath returns the dotted path of the first object key in doc (a
// generic JSON value) that type t has no json-tagged field for, or "".
func unknownFieldPath(doc any, t reflect.Type, prefix string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return ""
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			ft, known := fields[key]
			path := yamlnode.Join(prefix, key)
			if !known {
				return path
			}
			if p := unknownFieldPath(obj[key], ft, path); p != "" {
				return p
			}
		}
	case reflect.Slice:
		arr, _ := doc.([]any)
		for i, el := range arr {
			if p := unknownFieldPath(el, t.Elem(), fmt.Sprintf("%s[%d]", prefix, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// timeType is time.Time's reflect type.
var timeType = reflect.TypeFor[time.Time]()

// badTimePath returns the dotted path of the first value in doc (a generic
// JSON value) that type t decodes as a time.Time and that is not an RFC
// 3339 time, or "".
func badTimePath(doc any, t reflect.Type, prefix string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		if s, ok := doc.(string); ok {
			if _, err := time.Parse(time.RFC3339, s); err == nil {
				return ""
			}
		}
		if doc == nil {
			return ""
		}
		return prefix
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return ""
		}
		fields := map[string]reflect.Type{}
		jsonFields(t, fields)
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if ft, known := fields[key]; known {
				if p := badTimePath(obj[key], ft, yamlnode.Join(prefix, key)); p != "" {
					return p
				}
			}
		}
	case reflect.Slice:
		arr, _ := doc.([]any)
		for i, el := range arr {
			if p := badTimePath(el, t.Elem(), fmt.Sprintf("%s[%d]", prefix, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// jsonFields adds the JSON object keys of struct type t to fields, with
// their types: each field's json tag name, and the keys of an embedded
// struct without a tag inline (as encoding/json decodes them, e.g. an
// experiment condition's tier and queue).
func jsonFields(t reflect.Type, fields map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonFields(f.Type, fields)
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
}

// clip returns s cut to at most n bytes (at a rune boundary) with "…" when
// cut, so that an error message quoting a value stays short.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// plainNumber writes v without an exponent up to 10^15 (400000000, not
// 4e+08), and in %g beyond, so that an absurd value stays short.
func plainNumber(v float64) string {
	if v > -1e15 && v < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
