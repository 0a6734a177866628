package scheduling

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// starvationRun drives Plan with a one-minute virtual clock over horizon: node
// "a" has 8 GPUs, node "b" 4; a key-project job needing 1 GPU for 10 minutes
// arrives every minute (about 10 GPUs busy, so "a" never drains by itself),
// and one standard job needs all 8 GPUs of one node for an hour from the
// start. It returns when the big job started, or false if it never did.
func starvationRun(t *testing.T, p *Policy, horizon time.Duration) (time.Duration, bool) {
	t.Helper()
	pool := mkPool("p", mkNode("a", 8, "A100", 81920, 0), mkNode("b", 4, "A100", 81920, 0))
	big := mkJob("big", vocab.TierStandard, 8, "p", 0)
	big.Request.Topology = TopologySameNode
	pending := []PendingJob{big}
	type run struct {
		job RunningJob
		end time.Time
	}
	var running []run
	for step := 0; time.Duration(step)*time.Minute <= horizon; step++ {
		now := t0.Add(time.Duration(step) * time.Minute)
		small := mkJob(fmt.Sprintf("small-%04d", step), vocab.TierKeyProject, 1, "p", 0)
		small.SubmitTime, small.WaitingSince = now, now
		pending = append(pending, small)
		kept := running[:0]
		for _, r := range running {
			if now.Before(r.end) {
				kept = append(kept, r)
			}
		}
		running = kept
		s := &Snapshot{Pools: []Pool{pool}, Pending: pending}
		for _, r := range running {
			withRunning(s, r.job)
		}
		res := Plan(s, p, now)
		if err := checkInvariants(s, p, res); err != nil {
			t.Fatalf("at %v: %v", now.Sub(t0), err)
		}
		placed := map[string]bool{}
		for _, pl := range res.Placements {
			placed[pl.JobID] = true
			rj := RunningJob{ID: pl.JobID, Tier: vocab.TierKeyProject, StartedAt: now,
				Allocation: Allocation{ID: "alloc-" + pl.JobID, JobID: pl.JobID, Pool: pl.Pool, Node: pl.Node, GPUs: pl.GPUs}}
			if pl.JobID == "big" {
				return now.Sub(t0), true
			}
			running = append(running, run{rj, now.Add(10 * time.Minute)})
		}
		left := pending[:0]
		for _, j := range pending {
			if !placed[j.ID] {
				left = append(left, j)
			}
		}
		pending = left
	}
	return 0, false
}

// TestStarvation checks that reservation plus bounded aging bound the wait of
// a large job against a steady stream of small higher-tier jobs, and that
// either mechanism alone, or neither, lets it starve for the whole horizon.
// Tiers are 500 points apart here, so 50 minutes of aging (100 points per 10
// minutes) lift the big job level with fresh small jobs (ties go to the
// earlier submit); its reservation then keeps node a's released GPUs until
// all 8 are free, at most 10 minutes later.
func TestStarvation(t *testing.T) {
	tests := []struct {
		name         string
		reserve, age bool
		bound        time.Duration // 0: must never start
	}{
		{"reservation and aging", true, true, 70 * time.Minute},
		{"aging only", false, true, 0},
		{"reservation only", true, false, 0},
		{"neither", false, false, 0},
	}
	const horizon = 8 * time.Hour
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			p.TierBase = map[vocab.Tier]float64{vocab.TierExperiment: 0, vocab.TierStandard: 10000, vocab.TierKeyProject: 10500, vocab.TierProduction: 30000}
			p.Preemption.Enabled = false
			p.Reservation.Enabled, p.Aging.Enabled = tc.reserve, tc.age
			waited, started := starvationRun(t, p, horizon)
			switch {
			case tc.bound > 0 && (!started || waited > tc.bound):
				t.Fatalf("big job started=%v after %v, want within %v", started, waited, tc.bound)
			case tc.bound == 0 && started:
				t.Fatalf("big job started after %v; expected it to starve for %v", waited, horizon)
			}
			t.Logf("started=%v after %v", started, waited)
		})
	}
}
