package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// The jsonb columns use these snake_case shapes, named after docs/design.md's
// vocabulary, rather than the Go field names of package scheduling: SQL reports
// and other tools read them, and renaming a Go field must not change stored data.

// requestDoc is jobs.request.
type requestDoc struct {
	GPUs         int               `json:"gpus"`
	GPUMilli     int               `json:"gpu_milli,omitempty"`
	GPUMemoryMiB int64             `json:"gpu_memory_mib,omitempty"`
	GPUModels    []string          `json:"gpu_models,omitempty"`
	Pool         string            `json:"pool"`
	Topology     string            `json:"topology,omitempty"`
	CPUMilli     int64             `json:"cpu_milli,omitempty"`
	MemoryMiB    int64             `json:"memory_mib,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
}

func toRequestDoc(r scheduling.ResourceRequest) requestDoc {
	return requestDoc{
		GPUs: r.GPUs, GPUMilli: r.GPUMilli, GPUMemoryMiB: r.GPUMemoryMiB, GPUModels: r.GPUModels,
		Pool: r.Pool, Topology: string(r.Topology), CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, Labels: r.Labels,
		NodeSelector: r.NodeSelector,
	}
}

func (d requestDoc) request() scheduling.ResourceRequest {
	return scheduling.ResourceRequest{
		GPUs: d.GPUs, GPUMilli: d.GPUMilli, GPUMemoryMiB: d.GPUMemoryMiB, GPUModels: d.GPUModels,
		Pool: d.Pool, Topology: scheduling.Topology(d.Topology), CPUMilli: d.CPUMilli, MemoryMiB: d.MemoryMiB, Labels: d.Labels,
		NodeSelector: d.NodeSelector,
	}
}

// prerequisiteDoc is one element of jobs.prerequisites.
type prerequisiteDoc struct {
	Name    string `json:"name"`
	Ready   bool   `json:"ready"`
	Message string `json:"message,omitempty"`
}

func toPrerequisiteDocs(ps []scheduling.Prerequisite) []prerequisiteDoc {
	out := make([]prerequisiteDoc, len(ps))
	for i, p := range ps {
		out[i] = prerequisiteDoc(p)
	}
	return out
}

func prerequisites(ds []prerequisiteDoc) []scheduling.Prerequisite {
	if len(ds) == 0 {
		return nil
	}
	out := make([]scheduling.Prerequisite, len(ds))
	for i, d := range ds {
		out[i] = scheduling.Prerequisite(d)
	}
	return out
}

// checkpointDoc is runs.last_checkpoint and jobs.recovery.last_checkpoint.
type checkpointDoc struct {
	At       time.Time `json:"at"`
	Step     int64     `json:"step"`
	Location string    `json:"location,omitempty"`
}

func toCheckpointDoc(c *scheduling.Checkpoint) *checkpointDoc {
	if c == nil {
		return nil
	}
	return &checkpointDoc{At: c.At.UTC(), Step: c.Step, Location: c.Location}
}

func (d *checkpointDoc) checkpoint() *scheduling.Checkpoint {
	if d == nil {
		return nil
	}
	return &scheduling.Checkpoint{At: d.At.UTC(), Step: d.Step, Location: d.Location}
}

// recoveryDoc is jobs.recovery.
type recoveryDoc struct {
	Checkpointable      bool           `json:"checkpointable"`
	CheckpointIntervalS int64          `json:"checkpoint_interval_s,omitempty"`
	LastCheckpoint      *checkpointDoc `json:"last_checkpoint,omitempty"`
	VerifiedResumes     int            `json:"verified_resumes"`
	// Profile is the job's recovery profile (ProfileOf), set at submission.
	Profile string `json:"profile,omitempty"`
	// TotalSteps is the job's declared work in steps (recovery.total_steps);
	// 0 when none is declared.
	TotalSteps int64 `json:"total_steps,omitempty"`
}

func toRecoveryDoc(r scheduling.RecoveryEvidence) recoveryDoc {
	return recoveryDoc{
		Checkpointable: r.Checkpointable, CheckpointIntervalS: r.CheckpointIntervalSeconds,
		LastCheckpoint: toCheckpointDoc(r.LastCheckpoint), VerifiedResumes: r.VerifiedResumes,
		Profile: r.Profile, TotalSteps: r.TotalSteps,
	}
}

func (d recoveryDoc) recovery() scheduling.RecoveryEvidence {
	return scheduling.RecoveryEvidence{
		Checkpointable: d.Checkpointable, CheckpointIntervalSeconds: d.CheckpointIntervalS,
		LastCheckpoint: d.LastCheckpoint.checkpoint(), VerifiedResumes: d.VerifiedResumes,
		Profile: d.Profile, TotalSteps: d.TotalSteps,
	}
}

// specDoc is jobs.spec: what the executor runs.
type specDoc struct {
	Command    []string          `json:"command,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	RunSeconds float64           `json:"run_seconds,omitempty"`
}

// mustJSON encodes v, which is always one of this package's document types
// (maps, slices and plain fields only), so an error is a programming error.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("store: encode %T: %v", v, err))
	}
	return b
}

// IsJobID reports whether s has the shape of a job ID newID makes: "j-"
// and 26 characters of crockford. GET /v1/jobs uses it to refuse a cursor
// that no page handed out.
func IsJobID(s string) bool {
	rest, ok := strings.CutPrefix(s, "j-")
	if !ok || len(rest) != 26 {
		return false
	}
	for i := range len(rest) {
		if strings.IndexByte(crockford, rest[i]) < 0 {
			return false
		}
	}
	return true
}

// crockford is the ULID alphabet (Crockford's base32 without I, L, O, U).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newID returns prefix + a ULID (https://github.com/ulid/spec): 48 bits of Unix
// milliseconds then 80 random bits, 26 base32 characters. IDs therefore sort by
// creation time, which ListJobs' cursor relies on for a stable order.
func newID(prefix string) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(fmt.Sprintf("store: crypto/rand: %v", err)) // rand.Read never fails on supported platforms
	}
	// Encode 128 bits as 26 characters: the first holds the top 3 bits.
	var out [26]byte
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return prefix + string(out[:])
}
