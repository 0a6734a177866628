package vocab

// This file is the one home of the numeric bounds of outside input: job
// specs, node-agent reports, policy files, static inventories, trace rows,
// report windows and list pages (docs/design.md "Bounds of outside input",
// whose table a test holds to Bounds). The packages that validate each input
// (api, store, internal/policy, internal/inventory/static,
// internal/trace/alibaba, internal/executor/process) use these constants;
// a value outside its bound is refused naming the field (HTTP 4xx, CLI exit
// 2, "file:line: field" for files) before anything is stored or run.
//
// The bounds are generous beyond any real cluster and small enough that
// every value fits its PostgreSQL column and a time.Duration, and sums over
// many jobs or GPUs stay far from int64 overflow.

// Resource bounds of a job's request, a node and a GPU.
const (
	// MaxGPUs bounds resources.gpus and a trace pod's num_gpu: the
	// job_queue column is an integer; no job spans more GPUs than a large
	// cluster's NVLink domains hold.
	MaxGPUs = 4096
	// MaxGPUsPerNode bounds the GPUs of one node (an inventory report's
	// gpus, a static inventory node's gpus, a trace node's gpu column):
	// today's densest nodes carry 8 to 16; 256 leaves room for any
	// superchip tray while keeping a node's report small.
	MaxGPUsPerNode = 256
	// MaxGPUMilli is a whole GPU in milli-GPU (scheduling.MilliPerGPU).
	MaxGPUMilli = 1000
	// MaxGPUMemoryMiB bounds one GPU's memory (resources.gpu_memory_mib,
	// a GPU's memory_mib or memory_total_mib, a sample's
	// memory_used_mib): 1 TiB, beyond any device (the largest have 192 GiB).
	MaxGPUMemoryMiB = 1 << 20
	// MaxCPUMilli bounds a CPU request or a node's CPU: 2^30 milli-cores,
	// about a million cores.
	MaxCPUMilli = 1 << 30
	// MaxMemoryMiB bounds a host memory request or a node's memory: 2^30
	// MiB, 1 PiB.
	MaxMemoryMiB = 1 << 30
	// MaxGPUIndex bounds an inventory report's NVML device index: below
	// MaxGPUsPerNode.
	MaxGPUIndex = MaxGPUsPerNode - 1
	// MaxPercent bounds utilisation percentages and idle thresholds.
	MaxPercent = 100
)

// Time bounds, in seconds.
const (
	// MaxRunSeconds bounds run_seconds, checkpoint intervals and every
	// duration of a policy file: ten years (10 × 31,536,000 s), far beyond
	// any real job or rule, yet small enough to fit a bigint and a
	// time.Duration (about 292 years) with room to add to a timestamp.
	MaxRunSeconds = 10 * 31_536_000
	// MaxDurationSeconds is MaxRunSeconds for the durations of a policy
	// file (intervals, windows, half-life, grace, timeouts): a rule slower
	// than ten years is a typo, and the value must become a time.Duration.
	MaxDurationSeconds = MaxRunSeconds
	// MaxTraceSeconds bounds a trace row's times (seconds from the trace's
	// origin): the Alibaba v2023 trace spans about 150 days, and the
	// simulator turns every time into a time.Duration.
	MaxTraceSeconds = MaxRunSeconds
	// MaxReportWindowSeconds bounds a queue report's window: 90 days, so
	// one request cannot make the store read the whole history.
	MaxReportWindowSeconds = 90 * 24 * 3600
	// MinReportUnixSeconds is the earliest instant a report window may
	// start (1970-01-01T00:00:00Z): the report's arithmetic is on Unix
	// nanoseconds, which int64 carries only from 1678 to 2262, and gpugov
	// has no record before its first run anyway.
	MinReportUnixSeconds = 0
	// MinPolicyYear and MaxPolicyYear bound the times of a policy file
	// (protection_windows[].start, end), in UTC: the canonical body writes
	// them as JSON, which carries years 0..9999 only, and gpugov has no
	// record before 1970.
	MinPolicyYear = 1970
	MaxPolicyYear = 9999
	// MaxReadinessWindowSeconds bounds automation.readiness.window_s: the
	// checks read two such windows in one queue report, so half of
	// MaxReportWindowSeconds.
	MaxReadinessWindowSeconds = MaxReportWindowSeconds / 2
)

// Count and score bounds.
const (
	// MaxTotalSteps bounds recovery.total_steps and every reported step
	// (status lines, checkpoints): 2^53, the largest integer a JSON number
	// carries exactly.
	MaxTotalSteps = 1 << 53
	// MaxPriorityPoints bounds the priority points of a policy (tier_base,
	// aging step and cap, fair-share weight) in absolute value: the
	// defaults are 10,000 apart per tier; a billion keeps every sum of a
	// few of them exact in a float64 and far from overflow.
	MaxPriorityPoints = 1e9
	// MaxProjectWeight bounds fair_share.project_weights: relative shares,
	// normalised by the scheduler; a million to one is beyond any
	// organisation's intent.
	MaxProjectWeight = 1e6
	// MaxPolicyCount bounds the counts of a policy file (reservation depth,
	// max_preemptions, idle bursts, verified resumes, drills per day,
	// starving and over-objective job limits, simulated projects): a
	// million, where the real values are single or double digits.
	MaxPolicyCount = 1_000_000
	// MaxGrowthFactor bounds ratio thresholds (readiness
	// max_longest_wait_growth, simulation starvation_factor): a thousand
	// times the baseline is no threshold.
	MaxGrowthFactor = 1000
	// MaxQuotaMilli bounds a quota's nominal and borrowing limit, in
	// milli-GPU (one million GPUs): products of two milli-GPU amounts in
	// the quota ledger cannot overflow.
	MaxQuotaMilli int64 = 1_000_000_000
	// MaxListLimit is the largest page of every GET list route (limit
	// 1..MaxListLimit); DefaultListLimit is the page without a limit.
	MaxListLimit     = 1000
	DefaultListLimit = 100
	// MaxSamplesPerReport bounds the samples of one node-agent report: one
	// per GPU per refresh, 4096 leaves room for a backlog.
	MaxSamplesPerReport = 4096
)

// Size bounds of a job spec's lists and free text, in items and bytes
// (docs/design.md "Job spec bounds"). Like the numeric bounds they are far
// beyond what a real cluster's jobs carry (a handful of prerequisites,
// models and labels, a command line of a few hundred bytes, a reason of a
// sentence) and small enough that one job's row, its wait detail and
// `gpugov why` stay a few hundred KiB at most.
const (
	// MaxPrerequisites bounds a spec's prerequisites list: real jobs
	// declare a few (image, dataset, credentials).
	MaxPrerequisites = 64
	// MaxPrerequisiteNameLength bounds a prerequisite's name, in bytes: it
	// is a URL path segment of PUT /v1/jobs/{id}/prerequisites/{name}.
	MaxPrerequisiteNameLength = 253
	// MaxPrerequisiteMessageLength bounds a prerequisite's message, in
	// bytes, at submit and in PUT …/prerequisites/{name}: a sentence.
	MaxPrerequisiteMessageLength = 1024
	// MaxGPUModels bounds resources.gpu_models: a cluster has a handful of
	// GPU models; 32 lists every model NVIDIA has shipped in a decade.
	MaxGPUModels = 32
	// MaxNodeSelectorPairs bounds resources.node_selector: a job requires
	// a few node labels (network, storage).
	MaxNodeSelectorPairs = 16
	// MaxJobLabels bounds resources.labels; MaxLabelKeyLength and
	// MaxLabelValueLength bound each key (non-blank) and value, in bytes,
	// as Kubernetes bounds a label's name (63) and gpugov more loosely
	// its value (256, where Kubernetes allows 63).
	MaxJobLabels        = 64
	MaxLabelKeyLength   = 63
	MaxLabelValueLength = 256
	// MaxCommandArgs bounds a command's words (the program and its
	// arguments); MaxCommandArgLength bounds each, MaxCommandBytes their
	// sum, in bytes: a real training command line is well under 4 KiB,
	// and 64 KiB stays far below the kernel's ARG_MAX.
	MaxCommandArgs      = 256
	MaxCommandArgLength = 4096
	MaxCommandBytes     = 64 << 10
	// MaxEnvVars bounds a spec's env; each value is at most
	// MaxCommandArgLength bytes and the names and values together at most
	// MaxCommandBytes, as a command's words.
	MaxEnvVars = 128
	// MaxReasonLength bounds a caller's free-text reason, in bytes: of
	// cancel, hold and release (copied into the audit log and the held
	// wait's detail) and of an amend. A sentence or two.
	MaxReasonLength = 1024
	// MinPositiveRunSeconds is the shortest positive run_seconds: a run
	// time is declared in seconds (fractions above it are kept and round
	// up in estimates); a positive value below one second is a unit
	// mistake (1e-300 would be a simulated job that never computes).
	MinPositiveRunSeconds = 1
)

// Bound is the accepted range of one numeric field of outside input, as
// docs/design.md's bounds table states it. Min and Max are inclusive unless
// MinExclusive (then the value must be above Min).
type Bound struct {
	Input        string  // which input: "job spec", "policy", "node report", "inventory file", "trace", "report query", "list query", "status line"
	Field        string  // the field's path in that input, e.g. "resources.gpus"
	Min, Max     float64 // the range
	MinExclusive bool    // Min itself is refused (a positive duration)
	Unit         string  // "GPUs", "milli-GPU", "MiB", "milli-cores", "s", "points", "fraction", "count", "%", "steps"
	Why          string  // why these bounds
}

// Bounds lists every bounded numeric field of outside input, in the order
// of docs/design.md's table.
var Bounds = []Bound{
	{"job spec", "resources.gpus", 1, MaxGPUs, false, "GPUs", "a job_queue integer column; no job spans more"},
	{"job spec", "resources.gpu_milli", 0, MaxGPUMilli, false, "milli-GPU", "a share of one GPU (only with gpus: 1); 0 = whole GPUs"},
	{"job spec", "resources.gpu_memory_mib", 0, MaxGPUMemoryMiB, false, "MiB", "per GPU; 1 TiB is beyond any device"},
	{"job spec", "resources.cpu_milli", 0, MaxCPUMilli, false, "milli-cores", "about a million cores; sums stay far from int64 overflow"},
	{"job spec", "resources.memory_mib", 0, MaxMemoryMiB, false, "MiB", "1 PiB; sums stay far from int64 overflow"},
	{"job spec", "run_seconds", 0, MaxRunSeconds, false, "s", "> 0 without a command; a positive value is ≥ 1 (fractions kept); must fit a time.Duration added to a timestamp"},
	{"job spec", "recovery.checkpoint_interval_s", 0, MaxRunSeconds, false, "s", "must fit a time.Duration, as run_seconds"},
	{"job spec", "recovery.total_steps", 0, MaxTotalSteps, false, "steps", "2^53: exact in a JSON number"},
	{"job spec", "prerequisites", 0, MaxPrerequisites, false, "items", "real jobs declare a few; name ≤ 253 bytes, message ≤ 1024"},
	{"job spec", "resources.gpu_models", 0, MaxGPUModels, false, "items", "a cluster has a handful of models; each ≤ 128 bytes"},
	{"job spec", "resources.labels", 0, MaxJobLabels, false, "pairs", "key 1..63 bytes, value ≤ 256, as Kubernetes labels"},
	{"job spec", "resources.node_selector", 0, MaxNodeSelectorPairs, false, "pairs", "key and value 1..253 bytes, as node labels"},
	{"job spec", "command", 0, MaxCommandArgs, false, "words", "each ≤ 4096 bytes, ≤ 65536 in all: far below ARG_MAX"},
	{"job spec", "env", 0, MaxEnvVars, false, "variables", "each value ≤ 4096 bytes, names and values ≤ 65536 in all"},
	{"job action", "reason", 0, MaxReasonLength, false, "bytes", "cancel, hold, release and amend: a sentence or two"},
	{"node report", "cpu_milli", 0, MaxCPUMilli, false, "milli-cores", "as a job's request (0 = not tracked)"},
	{"node report", "memory_mib", 0, MaxMemoryMiB, false, "MiB", "as a job's request (0 = not tracked)"},
	{"node report", "gpus", 0, MaxGPUsPerNode, false, "GPUs", "per node; the densest carry 16"},
	{"node report", "gpus[].index", 0, MaxGPUIndex, false, "index", "an NVML index below the node's GPU bound"},
	{"node report", "gpus[].memory_total_mib", 0, MaxGPUMemoryMiB, true, "MiB", "as resources.gpu_memory_mib"},
	{"node report", "gpus[].memory_used_mib", 0, MaxGPUMemoryMiB, false, "MiB", "at most memory_total_mib"},
	{"node report", "gpus[].utilization_gpu_percent", 0, MaxPercent, false, "%", "NVML's range"},
	{"node report", "gpus[].utilization_memory_percent", 0, MaxPercent, false, "%", "NVML's range"},
	{"node report", "samples", 1, MaxSamplesPerReport, false, "count", "per request: one per GPU per refresh plus a backlog"},
	{"node report", "samples[].gpu_percent", 0, MaxPercent, false, "%", "NVML's range"},
	{"node report", "samples[].memory_used_mib", 0, MaxGPUMemoryMiB, false, "MiB", "as a GPU's memory"},
	{"node report", "checkpoint step", 0, MaxTotalSteps, false, "steps", "as recovery.total_steps"},
	{"status line", "step, from_step", 0, MaxTotalSteps, false, "steps", "as recovery.total_steps"},
	{"inventory file", "nodes[].cpu_milli", 0, MaxCPUMilli, false, "milli-cores", "as a node report"},
	{"inventory file", "nodes[].memory_mib", 0, MaxMemoryMiB, false, "MiB", "as a node report"},
	{"inventory file", "nodes[].gpus", 0, MaxGPUsPerNode, false, "GPUs", "as a node report"},
	{"inventory file", "gpus[].memory_mib", 0, MaxGPUMemoryMiB, true, "MiB", "as a node report"},
	{"trace", "node cpu_milli, pod cpu_milli", 0, MaxCPUMilli, false, "milli-cores", "as a job's request"},
	{"trace", "node memory_mib, pod memory_mib", 0, MaxMemoryMiB, false, "MiB", "as a job's request"},
	{"trace", "node gpu", 0, MaxGPUsPerNode, false, "GPUs", "as a node report"},
	{"trace", "pod num_gpu", 0, MaxGPUs, false, "GPUs", "as resources.gpus (0: a CPU-only pod, skipped)"},
	{"trace", "pod gpu_milli", 0, MaxGPUMilli, false, "milli-GPU", "as resources.gpu_milli"},
	{"trace", "creation_time, deletion_time, scheduled_time", 0, MaxTraceSeconds, false, "s", "from the trace's origin; must fit a time.Duration"},
	{"policy", "tier_base.*", -MaxPriorityPoints, MaxPriorityPoints, false, "points", "sums of a few stay exact in a float64"},
	{"policy", "aging.step_points, aging.cap_points, queues[].aging_cap_points, fair_share.weight", 0, MaxPriorityPoints, false, "points", "as tier_base"},
	{"policy", "aging.interval_s", 0, MaxDurationSeconds, false, "s", "> 0 with aging enabled; a time.Duration"},
	{"policy", "fair_share.half_life_s, preemption.min_runtime_s, window_s, save_restore_s, grace_s", 0, MaxDurationSeconds, false, "s", "a time.Duration; ten years is no rule"},
	{"policy", "preemption.verify_resume_timeout_s, recompute_timeout_s, evidence_window_s", 0, MaxDurationSeconds, true, "s", "positive; a time.Duration"},
	{"policy", "reclaim.scan_interval_s, observation_window_s, dispute_window_s, notify_window_s, confirm_window_s", 0, MaxDurationSeconds, true, "s", "positive; a time.Duration"},
	{"policy", "automation.readiness.window_s", 0, MaxReadinessWindowSeconds, true, "s", "two windows in one report of at most 90 days"},
	{"policy", "automation.readiness.freshness_s, longest_wait_floor_s", 0, MaxDurationSeconds, false, "s", "freshness > 0; a time.Duration"},
	{"policy", "queues[].max_wait_s", 0, MaxDurationSeconds, false, "s", "a wait objective; 0 = none"},
	{"policy", "fair_share.project_weights.*", 0, MaxProjectWeight, true, "weight", "relative shares, positive"},
	{"policy", "queues[].share", 0, MaxProjectWeight, false, "weight", "a service share relative to the other queues"},
	{"policy", "queues[].min_share, max_share; preemption.max_resume_failure_rate; readiness shares; simulation.recovery.probability", 0, 1, false, "fraction", "fractions of a pool or of resumes (max_share above 0)"},
	{"policy", "reclaim.idle_gpu_percent", 0, MaxPercent, false, "%", "a utilisation percentage"},
	{"policy", "reclaim.idle_memory_mib", 0, MaxGPUMemoryMiB, false, "MiB", "as a GPU's memory"},
	{"policy", "reservation.depth, preemption.max_preemptions, min_verified_resumes, reclaim.idle_max_bursts, drills.per_profile_per_day, readiness job counts, simulation.projects, verified_resumes", 0, MaxPolicyCount, false, "count", "real values are single or double digits"},
	{"policy", "automation.readiness.max_longest_wait_growth, simulation.starvation_factor", 0, MaxGrowthFactor, false, "ratio", "a thousandfold is no threshold"},
	{"policy", "automation.recovery_loss_budget_gpu_s_per_day", 0, MaxGPUs * 86400, false, "GPU-s/day", "every GPU of the largest job for a whole day"},
	{"policy", "simulation.cycle_interval_s, recovery.checkpoint_interval_s", 1, MaxDurationSeconds, false, "s", "a time.Duration"},
	{"policy", "simulation.background_step_s, cycle_period_s, locality_relax_s", 0, MaxDurationSeconds, false, "s", "a time.Duration; 0 is off"},
	{"policy", "protection_windows[].start, end", MinPolicyYear, MaxPolicyYear, false, "year (UTC)", "JSON carries years 0..9999; no record before 1970"},
	{"policy", "notifications.delivery.initial_interval_s, max_interval_s, timeout_s, poll_interval_s, retention_s", 0, MaxDurationSeconds, true, "s", "positive; a time.Duration"},
	{"policy", "notifications.delivery.max_attempts", 1, MaxPolicyCount, false, "count", "as the other counts"},
	{"policy", "quotas[].nominal_milli, borrowing_limit_milli", 0, float64(MaxQuotaMilli), false, "milli-GPU", "a million GPUs; ledger products cannot overflow"},
	{"report query", "from, to", MinReportUnixSeconds, MaxReportWindowSeconds, false, "s", "from ≥ 1970-01-01, to after from, to − from ≤ 90 days, from not in the future"},
	{"list query", "limit", 1, MaxListLimit, false, "rows", "every GET list route's page; absent = 100"},
}
