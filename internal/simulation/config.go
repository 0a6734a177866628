package simulation

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Config is everything a simulation run is governed by: the scheduling policy
// and the settings the trace does not carry (queues, quotas, automation stage,
// projects, recovery evidence), plus the simulator's own knobs.
type Config struct {
	Policy   scheduling.Policy
	Queues   []scheduling.Queue // one per tier, named after it (trace jobs are routed by tier name)
	Quotas   []scheduling.Quota // none by default: no project quota limits
	PoolName string             // name of the pool the node list forms
	Stage    vocab.AutomationStage
	Projects int    // synthetic projects pods are hashed into (alibaba.ProjectOf)
	Seed     uint64 // seed of the recovery-evidence draw
	Recovery RecoveryRule
	// CycleIntervalSeconds is the period of the timer-driven scheduling cycle
	// that runs, besides the cycles at arrivals and releases, while some job
	// waits for a reason that time alone can change and some job runs.
	CycleIntervalSeconds int64
	// StarvationFactor: a job is starved when one continuous wait exceeds this
	// many times its queue's wait objective, or it never started.
	StarvationFactor float64
	// StarvationMinWaitS is the queue report's floor, in seconds of trace
	// time, below which a wait carries no starvation signal
	// (queuereport.Options.StarvationMinWaitS): 0 means its default (300 s),
	// queuereport.NoStarvationMinWait none.
	StarvationMinWaitS float64
}

// RecoveryRule assigns recovery evidence, which the trace lacks, to jobs: each
// job of the listed tiers is checkpointable with probability Probability,
// drawn from a PCG stream seeded by (Config.Seed, FNV-64a of the job ID) so
// a job's draw does not depend on the order of the others. A checkpointable
// job checkpoints every CheckpointIntervalSeconds of run time and starts with
// VerifiedResumes verified resumes.
type RecoveryRule struct {
	Tiers                     []vocab.Tier
	Probability               float64 // 0..1
	CheckpointIntervalSeconds int64   // > 0
	VerifiedResumes           int
}

// The default queues' wait objectives, in seconds.
const (
	DefaultProductionMaxWaitS = 60
	DefaultKeyProjectMaxWaitS = 10 * 60
	DefaultStandardMaxWaitS   = 60 * 60
	DefaultExperimentMaxWaitS = 6 * 60 * 60
)

// DefaultConfig returns the simulation defaults: scheduling.DefaultPolicy();
// four queues named after the tiers with service shares 4:3:2:1 and wait
// objectives production 60 s, key-project 10 min, standard 1 h, experiment
// 6 h, production protected and experiment low-risk; no quotas; pool
// "alibaba" in stage automate; 8 projects; seed 1; standard and experiment
// jobs checkpointable with probability 0.5, every 1,800 s, with one verified
// resume; a 600 s timer cycle (the default aging interval); starvation at 4×
// the objective.
func DefaultConfig() Config {
	q := func(t vocab.Tier, share float64, maxWaitS int64) scheduling.Queue {
		return scheduling.Queue{Name: t.String(), Tier: t, ServiceShare: share, MaxWait: time.Duration(maxWaitS) * time.Second}
	}
	queues := []scheduling.Queue{
		q(vocab.TierProduction, 4, DefaultProductionMaxWaitS),
		q(vocab.TierKeyProject, 3, DefaultKeyProjectMaxWaitS),
		q(vocab.TierStandard, 2, DefaultStandardMaxWaitS),
		q(vocab.TierExperiment, 1, DefaultExperimentMaxWaitS),
	}
	queues[0].Protected = true
	queues[3].LowRisk = true
	return Config{
		Policy:   scheduling.DefaultPolicy(),
		Queues:   queues,
		PoolName: alibaba.DefaultPoolName,
		Stage:    vocab.StageAutomate,
		Projects: alibaba.DefaultProjects,
		Seed:     1,
		Recovery: RecoveryRule{
			Tiers:       []vocab.Tier{vocab.TierStandard, vocab.TierExperiment},
			Probability: 0.5, CheckpointIntervalSeconds: 1800, VerifiedResumes: 1,
		},
		CycleIntervalSeconds: 600,
		StarvationFactor:     4,
	}
}

// The policy file's YAML shape. Every field is optional; absent fields keep
// DefaultConfig's value (lists given replace the default list as a whole).
type fileConfig struct {
	Version          string             `yaml:"version"`
	TierBase         map[string]float64 `yaml:"tier_base"`
	Aging            fileAging          `yaml:"aging"`
	FairShare        fileFairShare      `yaml:"fair_share"`
	Reservation      fileReservation    `yaml:"reservation"`
	Preemption       filePreemption     `yaml:"preemption"`
	Queues           []fileQueue        `yaml:"queues"`
	Quotas           []fileQuota        `yaml:"quotas"`
	Pool             string             `yaml:"pool"`
	Stage            string             `yaml:"stage"`
	Projects         int                `yaml:"projects"`
	Seed             uint64             `yaml:"seed"`
	Recovery         fileRecovery       `yaml:"recovery"`
	CycleIntervalS   int64              `yaml:"cycle_interval_s"`
	StarvationFactor float64            `yaml:"starvation_factor"`
}

type fileAging struct {
	Enabled    bool    `yaml:"enabled"`
	StepPoints float64 `yaml:"step_points"`
	IntervalS  float64 `yaml:"interval_s"`
	CapPoints  float64 `yaml:"cap_points"`
}

type fileFairShare struct {
	Enabled   bool    `yaml:"enabled"`
	Weight    float64 `yaml:"weight"`
	HalfLifeS float64 `yaml:"half_life_s"`
}

type fileReservation struct {
	Enabled bool `yaml:"enabled"`
	Depth   int  `yaml:"depth"`
}

type filePreemption struct {
	Enabled                  bool    `yaml:"enabled"`
	MinRuntimeS              float64 `yaml:"min_runtime_s"`
	MaxPreemptions           int     `yaml:"max_preemptions"`
	WindowS                  float64 `yaml:"window_s"`
	SaveRestoreS             float64 `yaml:"save_restore_s"`
	GraceS                   float64 `yaml:"grace_s"`
	RequireVerifiedResume    bool    `yaml:"require_verified_resume"`
	ReleaseWithoutCheckpoint bool    `yaml:"release_without_checkpoint"`
}

type fileQueue struct {
	Name      string  `yaml:"name"`
	Tier      string  `yaml:"tier"`
	Share     float64 `yaml:"share"`
	MaxWaitS  int64   `yaml:"max_wait_s"`
	LowRisk   bool    `yaml:"low_risk"`
	Protected bool    `yaml:"protected"`
}

type fileQuota struct {
	Project             string `yaml:"project"`
	Pool                string `yaml:"pool"`
	NominalMilli        int64  `yaml:"nominal_milli"`
	BorrowingLimitMilli int64  `yaml:"borrowing_limit_milli"`
}

type fileRecovery struct {
	Tiers               []string `yaml:"tiers"`
	Probability         float64  `yaml:"probability"`
	CheckpointIntervalS int64    `yaml:"checkpoint_interval_s"`
	VerifiedResumes     int      `yaml:"verified_resumes"`
}

// toFile renders c in the policy file's shape, the starting point a file's
// fields are decoded over.
func toFile(c Config) fileConfig {
	p := c.Policy
	f := fileConfig{
		Version:     p.Version,
		TierBase:    map[string]float64{},
		Aging:       fileAging{p.Aging.Enabled, p.Aging.StepPoints, p.Aging.IntervalSeconds, p.Aging.CapPoints},
		FairShare:   fileFairShare{p.FairShare.Enabled, p.FairShare.Weight, p.FairShare.HalfLifeSeconds},
		Reservation: fileReservation{p.Reservation.Enabled, p.Reservation.Depth},
		Preemption: filePreemption{p.Preemption.Enabled, p.Preemption.MinRuntimeSeconds, p.Preemption.MaxPreemptions,
			p.Preemption.WindowSeconds, p.Preemption.SaveRestoreSeconds, p.Preemption.GraceSeconds,
			p.Preemption.RequireVerifiedResume, p.Preemption.ReleaseWithoutCheckpoint},
		Pool: c.PoolName, Stage: string(c.Stage), Projects: c.Projects, Seed: c.Seed,
		Recovery: fileRecovery{Probability: c.Recovery.Probability,
			CheckpointIntervalS: c.Recovery.CheckpointIntervalSeconds, VerifiedResumes: c.Recovery.VerifiedResumes},
		CycleIntervalS: c.CycleIntervalSeconds, StarvationFactor: c.StarvationFactor,
	}
	for t, v := range p.TierBase {
		f.TierBase[t.String()] = v
	}
	for _, q := range c.Queues {
		f.Queues = append(f.Queues, fileQueue{q.Name, q.Tier.String(), q.ServiceShare, int64(q.MaxWait / time.Second), q.LowRisk, q.Protected})
	}
	for _, q := range c.Quotas {
		f.Quotas = append(f.Quotas, fileQuota{q.Project, q.Pool, q.NominalMilli, q.BorrowingLimitMilli})
	}
	for _, t := range c.Recovery.Tiers {
		f.Recovery.Tiers = append(f.Recovery.Tiers, t.String())
	}
	return f
}

// LoadConfig reads a YAML policy file over DefaultConfig. Unknown fields, YAML
// syntax errors, values of the wrong type and invalid values are errors that
// name the file and the field (and the line where YAML reports one). When the
// file sets no version, the policy version is "file:" plus the first 12 hex
// digits of the SHA-256 of the file, so two different files never share one.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("policy file %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig is LoadConfig on the file's bytes; its errors name the field
// but not the file.
func ParseConfig(data []byte) (Config, error) {
	f := toFile(DefaultConfig())
	f.Version = ""
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, explainYAMLError(data, err)
	}
	if f.Version == "" {
		f.Version = fmt.Sprintf("file:%x", sha256.Sum256(data))[:len("file:")+12]
	}
	return fromFile(f)
}

var yamlLine = regexp.MustCompile(`line (\d+): `)

// explainYAMLError adds the dotted path of the field at each line yaml.v3
// names ("line 7: cannot unmarshal …" becomes "line 7 (preemption.window_s):
// cannot unmarshal …"), since yaml.v3 reports type errors by line only.
func explainYAMLError(data []byte, err error) error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return err
	}
	msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
		line, _ := strconv.Atoi(yamlLine.FindStringSubmatch(m)[1])
		if path := fieldAtLine(&root, line, ""); path != "" {
			return fmt.Sprintf("line %d (%s): ", line, path)
		}
		return m
	})
	return errors.New(strings.TrimPrefix(msg, "yaml: "))
}

// fieldAtLine returns the dotted path of the deepest key or list item (of
// mappings or lists) on line of the document under n, or "" when none is
// there. yaml.v3 gives no column, so on a line holding several keys the first
// one is named.
func fieldAtLine(n *yaml.Node, line int, prefix string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := fieldAtLine(c, line, prefix); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			path := strings.TrimPrefix(prefix+"."+key.Value, ".")
			if p := fieldAtLine(val, line, path); p != "" {
				return p
			}
			if key.Line == line {
				return path
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if c.Kind == yaml.ScalarNode {
				continue // a scalar item is named by its list's key
			}
			path := fmt.Sprintf("%s[%d]", prefix, i)
			if p := fieldAtLine(c, line, path); p != "" {
				return p
			}
			if c.Line == line {
				return path
			}
		}
	}
	return ""
}

// fieldError is an invalid value, named by its dotted field path.
func fieldError(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// fromFile validates f and turns it into a Config.
func fromFile(f fileConfig) (Config, error) {
	c := Config{PoolName: f.Pool, Projects: f.Projects, Seed: f.Seed,
		CycleIntervalSeconds: f.CycleIntervalS, StarvationFactor: f.StarvationFactor}
	var err error
	if c.Policy, err = policyFromFile(f); err != nil {
		return Config{}, err
	}
	if c.Queues, err = queuesFromFile(f.Queues); err != nil {
		return Config{}, err
	}
	if c.Quotas, err = quotasFromFile(f.Quotas, f.Pool); err != nil {
		return Config{}, err
	}
	if c.Recovery, err = recoveryFromFile(f.Recovery); err != nil {
		return Config{}, err
	}
	c.Stage = vocab.AutomationStage(f.Stage)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks the settings the simulator relies on; errors name the
// policy file's field. It is run on every loaded file and by Run, so a Config
// built in code is held to the same rules: a queue named after each tier
// with that tier, a known stage, a non-empty pool, at least one project, a
// timer period and checkpoint interval of at least 1 s, a recovery
// probability in 0..1 and a positive starvation factor.
func (c Config) Validate() error {
	for _, t := range vocab.Tiers {
		i := slices.IndexFunc(c.Queues, func(q scheduling.Queue) bool { return q.Name == t.String() })
		if i < 0 {
			return fieldError("queues", "no queue named %q (trace jobs go to the queue named after their tier)", t)
		}
		if c.Queues[i].Tier != t {
			return fieldError(fmt.Sprintf("queues[%d].tier", i), "queue %q has tier %s, want %s", t, c.Queues[i].Tier, t)
		}
	}
	r := c.Recovery
	switch {
	case !slices.Contains([]vocab.AutomationStage{vocab.StageObserve, vocab.StageTrial, vocab.StageAutomate}, c.Stage):
		return fieldError("stage", "%q is not observe, trial or automate", c.Stage)
	case c.PoolName == "":
		return fieldError("pool", "is empty")
	case c.Projects < 1:
		return fieldError("projects", "%d, want at least 1", c.Projects)
	case c.CycleIntervalSeconds < 1:
		return fieldError("cycle_interval_s", "%d, want at least 1", c.CycleIntervalSeconds)
	case !(c.StarvationFactor > 0):
		return fieldError("starvation_factor", "%v, want > 0", c.StarvationFactor)
	case !(r.Probability >= 0 && r.Probability <= 1):
		return fieldError("recovery.probability", "%v is outside 0..1", r.Probability)
	case r.CheckpointIntervalSeconds < 1:
		return fieldError("recovery.checkpoint_interval_s", "%d, want at least 1", r.CheckpointIntervalSeconds)
	case r.VerifiedResumes < 0:
		return fieldError("recovery.verified_resumes", "%d is negative", r.VerifiedResumes)
	}
	return nil
}

func policyFromFile(f fileConfig) (scheduling.Policy, error) {
	p := scheduling.Policy{Version: f.Version, TierBase: map[vocab.Tier]float64{},
		Aging:       scheduling.AgingPolicy{Enabled: f.Aging.Enabled, StepPoints: f.Aging.StepPoints, IntervalSeconds: f.Aging.IntervalS, CapPoints: f.Aging.CapPoints},
		FairShare:   scheduling.FairSharePolicy{Enabled: f.FairShare.Enabled, Weight: f.FairShare.Weight, HalfLifeSeconds: f.FairShare.HalfLifeS},
		Reservation: scheduling.ReservationPolicy{Enabled: f.Reservation.Enabled, Depth: f.Reservation.Depth},
		Preemption: scheduling.PreemptionPolicy{Enabled: f.Preemption.Enabled, MinRuntimeSeconds: f.Preemption.MinRuntimeS,
			MaxPreemptions: f.Preemption.MaxPreemptions, WindowSeconds: f.Preemption.WindowS,
			SaveRestoreSeconds: f.Preemption.SaveRestoreS, GraceSeconds: f.Preemption.GraceS,
			RequireVerifiedResume: f.Preemption.RequireVerifiedResume, ReleaseWithoutCheckpoint: f.Preemption.ReleaseWithoutCheckpoint},
	}
	for _, name := range slices.Sorted(maps.Keys(f.TierBase)) {
		t, err := vocab.ParseTier(name)
		if err != nil {
			return p, fieldError("tier_base."+name, "%v", err)
		}
		p.TierBase[t] = f.TierBase[name]
	}
	nonNeg := []struct {
		field string
		v     float64
	}{
		{"aging.step_points", p.Aging.StepPoints}, {"aging.interval_s", p.Aging.IntervalSeconds},
		{"aging.cap_points", p.Aging.CapPoints}, {"fair_share.weight", p.FairShare.Weight},
		{"fair_share.half_life_s", p.FairShare.HalfLifeSeconds}, {"reservation.depth", float64(p.Reservation.Depth)},
		{"preemption.min_runtime_s", p.Preemption.MinRuntimeSeconds},
		{"preemption.max_preemptions", float64(p.Preemption.MaxPreemptions)},
		{"preemption.window_s", p.Preemption.WindowSeconds}, {"preemption.save_restore_s", p.Preemption.SaveRestoreSeconds},
		{"preemption.grace_s", p.Preemption.GraceSeconds},
	}
	for _, n := range nonNeg {
		if n.v < 0 {
			return p, fieldError(n.field, "%v is negative", n.v)
		}
	}
	if p.Aging.Enabled && p.Aging.IntervalSeconds == 0 {
		return p, fieldError("aging.interval_s", "is 0 with aging enabled, want > 0")
	}
	return p, nil
}

func queuesFromFile(fq []fileQueue) ([]scheduling.Queue, error) {
	var queues []scheduling.Queue
	for i, q := range fq {
		field := fmt.Sprintf("queues[%d]", i)
		t, err := vocab.ParseTier(q.Tier)
		switch {
		case q.Name == "":
			return nil, fieldError(field+".name", "is empty")
		case err != nil:
			return nil, fieldError(field+".tier", "%v", err)
		case q.Share < 0:
			return nil, fieldError(field+".share", "%v is negative", q.Share)
		case q.MaxWaitS < 0:
			return nil, fieldError(field+".max_wait_s", "%d is negative", q.MaxWaitS)
		}
		for j := range queues {
			if queues[j].Name == q.Name {
				return nil, fieldError(field+".name", "%q repeats queues[%d]", q.Name, j)
			}
		}
		queues = append(queues, scheduling.Queue{Name: q.Name, Tier: t, ServiceShare: q.Share,
			MaxWait: time.Duration(q.MaxWaitS) * time.Second, LowRisk: q.LowRisk, Protected: q.Protected})
	}
	return queues, nil
}

func quotasFromFile(fq []fileQuota, pool string) ([]scheduling.Quota, error) {
	var quotas []scheduling.Quota
	for i, q := range fq {
		field := fmt.Sprintf("quotas[%d]", i)
		if q.Pool == "" {
			q.Pool = pool
		}
		switch {
		case q.Project == "":
			return nil, fieldError(field+".project", "is empty")
		case q.NominalMilli < 0:
			return nil, fieldError(field+".nominal_milli", "%d is negative", q.NominalMilli)
		case q.BorrowingLimitMilli < 0:
			return nil, fieldError(field+".borrowing_limit_milli", "%d is negative", q.BorrowingLimitMilli)
		}
		quotas = append(quotas, scheduling.Quota{Project: q.Project, Pool: q.Pool,
			NominalMilli: q.NominalMilli, BorrowingLimitMilli: q.BorrowingLimitMilli})
	}
	return quotas, nil
}

func recoveryFromFile(f fileRecovery) (RecoveryRule, error) {
	r := RecoveryRule{Probability: f.Probability, CheckpointIntervalSeconds: f.CheckpointIntervalS, VerifiedResumes: f.VerifiedResumes}
	for i, name := range f.Tiers {
		t, err := vocab.ParseTier(name)
		if err != nil {
			return r, fieldError(fmt.Sprintf("recovery.tiers[%d]", i), "%v", err)
		}
		r.Tiers = append(r.Tiers, t)
	}
	return r, nil
}
