// Package governance holds gpugov's preemption and reclaim rules that come
// from configuration rather than from a policy version: each pool's
// automation stage, the low-risk queues the trial stage may act on,
// protection windows, the bounds of a preemption's verify-resume step, and
// the reclaim scan (observation window, idle threshold) with its modes per
// (pool, queue, class). It also holds the pure decisions built on them:
// the effective-run-loss formula (DESIGN.md §1), the reclaim classification
// of an allocation from its evidence, and the mode a finding is handled in.
//
// The configuration is a YAML file (Load) re-read on change by a Watcher,
// which keeps the last good configuration when a new file is invalid. It
// imports neither Temporal nor pgx.
package governance

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Defaults of Config.
const (
	DefaultVerifyResumeTimeoutSeconds = 3600 // how long VerifyResume waits for the victim's next run
	DefaultRecomputeTimeoutSeconds    = 1800 // how long it waits for that run to pass the step reached at notice
	DefaultScanIntervalSeconds        = 60
	DefaultObservationWindowSeconds   = 1800
	DefaultIdleGPUPercent             = 5
	DefaultNotifyWindowSeconds        = 900
	DefaultConfirmWindowSeconds       = 86400
)

// Config is the governance configuration. Durations are in seconds.
type Config struct {
	// Pools gives each named pool its automation stage; a pool not listed
	// keeps the stage stored for it (observe when created).
	Pools map[string]PoolConfig `yaml:"pools"`
	// LowRiskQueues are the queues the trial stage may act on (victims of
	// preemption, owners of reclaimed allocations). Written to queues.low_risk.
	LowRiskQueues []string `yaml:"low_risk_queues"`
	// ProtectionWindows are times during which jobs of the named queues (all
	// when none) are neither preempted nor reclaimed.
	ProtectionWindows []WindowConfig   `yaml:"protection_windows"`
	Preemption        PreemptionConfig `yaml:"preemption"`
	Reclaim           ReclaimConfig    `yaml:"reclaim"`
}

// PoolConfig is one pool's governance settings.
type PoolConfig struct {
	Stage vocab.AutomationStage `yaml:"stage"`
}

// WindowConfig is a protection window.
type WindowConfig struct {
	Name   string    `yaml:"name"`
	Start  time.Time `yaml:"start"`
	End    time.Time `yaml:"end"`
	Queues []string  `yaml:"queues"`
}

// PreemptionConfig bounds the workflow steps that wait on the victim's next
// run. The grace period and the no-checkpoint policy are the scheduling
// policy's (scheduling.PreemptionPolicy), which the Plan also reads.
type PreemptionConfig struct {
	// VerifyResumeTimeoutSeconds bounds the wait for the victim's next run to
	// start; 0 means DefaultVerifyResumeTimeoutSeconds.
	VerifyResumeTimeoutSeconds float64 `yaml:"verify_resume_timeout_seconds"`
	// RecomputeTimeoutSeconds bounds the wait for that run to pass the step
	// the victim had reached at the notice; 0 means DefaultRecomputeTimeoutSeconds.
	RecomputeTimeoutSeconds float64 `yaml:"recompute_timeout_seconds"`
}

// ReclaimConfig is the reclaim scan and its modes.
type ReclaimConfig struct {
	// Enabled turns the periodic scan on; false makes a scan record nothing.
	Enabled bool `yaml:"enabled"`
	// ScanIntervalSeconds is the time between scans; 0 means DefaultScanIntervalSeconds.
	ScanIntervalSeconds float64 `yaml:"scan_interval_seconds"`
	// ObservationWindowSeconds is how long an allocation must show no
	// progress and no utilisation above IdleGPUPercent to be idle (and how
	// long a granted allocation may go without a run before it is failed);
	// 0 means DefaultObservationWindowSeconds.
	ObservationWindowSeconds float64 `yaml:"observation_window_seconds"`
	// IdleGPUPercent is the utilisation (NVML utilization.gpu, percent) at or
	// below which a sample counts as idle; 0 means DefaultIdleGPUPercent.
	IdleGPUPercent int `yaml:"idle_gpu_percent"`
	// NotifyWindowSeconds is how long the owner has to keep an allocation in
	// notify mode; 0 means DefaultNotifyWindowSeconds.
	NotifyWindowSeconds float64 `yaml:"notify_window_seconds"`
	// ConfirmWindowSeconds is how long a confirm-mode finding waits for an
	// operator before it expires unreleased; 0 means DefaultConfirmWindowSeconds.
	ConfirmWindowSeconds float64 `yaml:"confirm_window_seconds"`
	// DefaultMode is the mode of findings no rule matches; "" means report.
	DefaultMode vocab.ReclaimMode `yaml:"default_mode"`
	// Rules give modes by pool, queue and class; the first rule whose
	// non-empty fields all match wins.
	Rules []ModeRule `yaml:"rules"`
}

// ModeRule sets the mode of the findings it matches; an empty field matches any value.
type ModeRule struct {
	Pool  string             `yaml:"pool"`
	Queue string             `yaml:"queue"`
	Class vocab.ReclaimClass `yaml:"class"`
	Mode  vocab.ReclaimMode  `yaml:"mode"`
}

// Default returns the configuration used when no file is given: no pool
// stage set (pools stay as stored), no low-risk queue, no window, default
// bounds, and the reclaim scan off with every finding reported only.
func Default() *Config {
	c := &Config{}
	c.applyDefaults()
	return c
}

// applyDefaults fills zero fields with the defaults named on each field.
func (c *Config) applyDefaults() {
	setDefault(&c.Preemption.VerifyResumeTimeoutSeconds, DefaultVerifyResumeTimeoutSeconds)
	setDefault(&c.Preemption.RecomputeTimeoutSeconds, DefaultRecomputeTimeoutSeconds)
	r := &c.Reclaim
	setDefault(&r.ScanIntervalSeconds, DefaultScanIntervalSeconds)
	setDefault(&r.ObservationWindowSeconds, DefaultObservationWindowSeconds)
	setDefault(&r.NotifyWindowSeconds, DefaultNotifyWindowSeconds)
	setDefault(&r.ConfirmWindowSeconds, DefaultConfirmWindowSeconds)
	if r.IdleGPUPercent == 0 {
		r.IdleGPUPercent = DefaultIdleGPUPercent
	}
	if r.DefaultMode == "" {
		r.DefaultMode = vocab.ModeReport
	}
}

func setDefault(v *float64, d float64) {
	if *v == 0 {
		*v = d
	}
}

// Stages returns the configured stage of each listed pool.
func (c *Config) Stages() map[string]vocab.AutomationStage {
	out := make(map[string]vocab.AutomationStage, len(c.Pools))
	for name, p := range c.Pools {
		out[name] = p.Stage
	}
	return out
}

// LowRisk reports whether queue is one of the low-risk queues.
func (c *Config) LowRisk(queue string) bool { return slices.Contains(c.LowRiskQueues, queue) }

// Windows returns the protection windows in the scheduler's type.
func (c *Config) Windows() []scheduling.ProtectionWindow {
	out := make([]scheduling.ProtectionWindow, len(c.ProtectionWindows))
	for i, w := range c.ProtectionWindows {
		out[i] = scheduling.ProtectionWindow{Name: w.Name, Start: w.Start, End: w.End, Queues: w.Queues}
	}
	return out
}

// InProtectionWindow returns the name of a window covering queue at now
// (Start ≤ now < End), or "" when none does.
func (c *Config) InProtectionWindow(queue string, now time.Time) string {
	for _, w := range c.ProtectionWindows {
		if now.Before(w.Start) || !now.Before(w.End) {
			continue
		}
		if len(w.Queues) == 0 || slices.Contains(w.Queues, queue) {
			return w.Name
		}
	}
	return ""
}

// ConfiguredMode returns the mode the first matching rule gives a finding of
// class in (pool, queue), or the default mode.
func (c *Config) ConfiguredMode(pool, queue string, class vocab.ReclaimClass) vocab.ReclaimMode {
	for _, r := range c.Reclaim.Rules {
		if (r.Pool == "" || r.Pool == pool) && (r.Queue == "" || r.Queue == queue) && (r.Class == "" || r.Class == class) {
			return r.Mode
		}
	}
	return c.Reclaim.DefaultMode
}

// Seconds converts a seconds field to a duration.
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// errorf formats a validation message naming the field.
func errorf(field, format string, args ...any) string {
	return field + ": " + fmt.Sprintf(format, args...)
}
