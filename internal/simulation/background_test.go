package simulation

import (
	"bytes"
	"testing"

	"github.com/gpugov/gpugov/internal/trace/philly"
)

// bgScenario is a two-node Philly fixture (VCs vca and vcb of one 8-GPU
// node each) whose node sequence makes the first hour half busy: busy
// 0.5 × 16 = 8 GPUs, the trace's jobs would hold (1 × 3600 + 8 × 600) ÷
// 3600 = 2.33 of them, so the background holds 6 GPUs from 0 to 3600 s.
// vca's 1-GPU job arrives at 0 s; vcb's 8-GPU job (philly-3) at 630 s.
func bgScenario(t *testing.T, set func(*Config)) (wait int64, r *Report) {
	t.Helper()
	src, err := philly.Read(philly.Files{Jobs: "testdata/philly_bg_jobs.csv", VCs: "testdata/philly_bg_vcs.csv",
		NodeSequence: "testdata/philly_bg_nodeseq.csv"}, philly.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.PoolName, cfg.TraceQuotas, cfg.BackgroundStepS = "philly", true, 3600
	set(&cfg)
	r, err = Run(Input{Source: src}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range r.History.Placements {
		if p.JobID == "philly-3" {
			return int64(p.At.Sub(src.Epoch()).Seconds()) - 630, r
		}
	}
	t.Fatal("philly-3 never started")
	return 0, nil
}

// TestBackgroundOccupancy checks the options that shape the background's
// effect on an 8-GPU job, each by its hand-worked wait:
//
//	pack:                 the 6 GPUs go to node 0, node 1 stays whole: no wait
//	pack, period 60 s:    the arrival at 630 s waits for the pass at 660 s: 30 s
//	pack, by quota:       vcb's quota 8 − 6 × 8/16 = 5 GPUs until the background ends at 3600 s: 2970 s
//	random:               both nodes hold background GPUs, no node is whole until 3600 s: 2970 s
//	random, relax 1200 s: spreads over both nodes (9 free) at the timer cycle of 630 + 1200 s: 1200 s
func TestBackgroundOccupancy(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want int64
	}{
		{"pack", func(*Config) {}, 0},
		{"pack period", func(c *Config) { c.CyclePeriodSeconds = 60 }, 30},
		{"pack by quota", func(c *Config) { c.BackgroundByQuota = true }, 2970},
		{"random", func(c *Config) { c.BackgroundRandom = true }, 2970},
		{"random relax", func(c *Config) { c.BackgroundRandom, c.LocalityRelaxS = true, 1200 }, 1200},
	} {
		if got, _ := bgScenario(t, c.set); got != c.want {
			t.Errorf("%s: philly-3 waited %d s, want %d", c.name, got, c.want)
		}
	}
	// Without background_step_s the pool is free: no wait.
	if got, _ := bgScenario(t, func(c *Config) { c.BackgroundStepS = 0; c.BackgroundRandom = true }); got != 0 {
		t.Errorf("no background: waited %d s", got)
	}
}

// TestBackgroundDeterminism: the random placement is a function of the seed.
func TestBackgroundDeterminism(t *testing.T) {
	render := func() string {
		_, r := bgScenario(t, func(c *Config) { c.BackgroundRandom, c.LocalityRelaxS, c.CyclePeriodSeconds = true, 1200, 60 })
		var buf bytes.Buffer
		if err := r.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	first := render()
	for range 3 {
		if render() != first {
			t.Fatal("two runs with the same seed differ")
		}
	}
}
