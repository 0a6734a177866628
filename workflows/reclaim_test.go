package workflows_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/workflows"
)

// TestReclaimWorkflowModes runs ReclaimWorkflow (time skipping) on an
// allocation whose run failed without releasing it, once per mode.
func TestReclaimWorkflowModes(t *testing.T) {
	keep := temporalx.ReclaimDecisionSignal{Actor: "vision", Reason: "debugging the failure"}
	confirm := temporalx.ReclaimDecisionSignal{Actor: "olga", Reason: "approved"}
	cases := []struct {
		name     string
		mode     vocab.ReclaimMode
		stage    vocab.AutomationStage
		signal   string
		arg      temporalx.ReclaimDecisionSignal
		state    vocab.ReclaimState
		released bool
	}{
		{"report records only", vocab.ModeAuto, vocab.StageObserve, "", keep, vocab.ReclaimReported, false},
		{"auto releases at once", vocab.ModeAuto, vocab.StageAutomate, "", keep, vocab.ReclaimReleased, true},
		{"notify then keep is a dispute", vocab.ModeNotify, vocab.StageAutomate, temporalx.SignalReclaimKeep, keep, vocab.ReclaimKept, false},
		{"notify without objection releases", vocab.ModeNotify, vocab.StageAutomate, "", keep, vocab.ReclaimReleased, true},
		{"confirm releases on approval", vocab.ModeConfirm, vocab.StageAutomate, temporalx.SignalReclaimConfirm, confirm, vocab.ReclaimReleased, true},
		{"confirm expires without approval", vocab.ModeConfirm, vocab.StageAutomate, "", keep, vocab.ReclaimExpired, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := newGovStore(t, 1, tc.stage)
			alloc := failRunHoldingGPUs(t, st, expQueue, 0, "failed")
			cfg := policy.Default()
			cfg.Reclaim.Enabled = true
			cfg.Reclaim.Rules = []policy.ModeRule{{Queue: expQueue, Mode: tc.mode}}
			env := newPreemptEnv(t, st, scheduling.DefaultPolicy(), cfg)
			if tc.signal != "" {
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(tc.signal, tc.arg) }, time.Minute)
			}

			env.ExecuteWorkflow(workflows.ReclaimWorkflowName, &workflows.ReclaimInput{AllocationID: alloc})

			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var res workflows.ReclaimResult
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			wantMode := tc.mode
			if tc.stage == vocab.StageObserve {
				wantMode = vocab.ModeReport
			}
			if vocab.ReclaimState(res.State) != tc.state || res.Mode != string(wantMode) || res.Class != string(vocab.ClassFailed) {
				t.Fatalf("result %+v, want state %s in mode %s", res, tc.state, wantMode)
			}
			if allocationReleased(t, st, alloc) != tc.released {
				t.Fatalf("allocation released = %v, want %v", !tc.released, tc.released)
			}
			r, err := st.GetReclaim(context.Background(), res.ReclaimID)
			if err != nil {
				t.Fatal(err)
			}
			if r.Disputed != (tc.state == vocab.ReclaimKept) || (tc.released && r.GPUsReleased != 1) || r.Basis == "" {
				t.Fatalf("record %+v", r)
			}
			if tc.mode == vocab.ModeNotify && (r.NoticeAt == nil || countRows(t, st,
				`SELECT count(*) FROM audit_log WHERE subject = $1 AND action = 'reclaim_notice'`, r.JobID) != 1) {
				t.Fatalf("notify mode without a notice: %+v", r)
			}
			if tc.signal == temporalx.SignalReclaimConfirm && r.DecidedBy != "olga" {
				t.Fatalf("confirmed by %q, want olga", r.DecidedBy)
			}
			want := map[string]string{temporalx.QueueKey.GetName(): expQueue,
				temporalx.TierKey.GetName(): vocab.TierExperiment.String(), temporalx.PoolKey.GetName(): testPool}
			if got := env.upserted(); !maps.Equal(got, want) {
				t.Fatalf("search attributes %v, want %v", got, want)
			}
		})
	}
}

// TestReclaimWorkflowSkipsReleasedAllocation: an allocation released by its
// own job before the reclaim acted is not reclaimable; nothing is recorded.
func TestReclaimWorkflowSkipsReleasedAllocation(t *testing.T) {
	st := newGovStore(t, 1, vocab.StageAutomate)
	alloc := failRunHoldingGPUs(t, st, expQueue, 0, "failed")
	if _, err := st.Pool().Exec(context.Background(), `UPDATE allocation_gpus SET active = false WHERE allocation_id = $1;
		`, alloc); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(context.Background(), `UPDATE allocations SET released_at = now() WHERE id = $1`, alloc); err != nil {
		t.Fatal(err)
	}
	cfg := policy.Default()
	cfg.Reclaim.Enabled = true
	env := newPreemptEnv(t, st, scheduling.DefaultPolicy(), cfg)
	env.ExecuteWorkflow(workflows.ReclaimWorkflowName, &workflows.ReclaimInput{AllocationID: alloc})
	var res workflows.ReclaimResult
	if err := env.GetWorkflowResult(&res); err != nil || res.State != "not-reclaimable" {
		t.Fatalf("result %+v (%v), want not-reclaimable", res, err)
	}
	if n := countRows(t, st, `SELECT count(*) FROM reclaims`); n != 0 {
		t.Fatalf("%d reclaims recorded, want none", n)
	}
}
