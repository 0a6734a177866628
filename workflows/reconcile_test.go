package workflows_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/workflows"
)

// listedJobs is a PendingJobs of fixed job IDs that fails with err after
// listing them; api.PendingJobs, the store's, is tested in api/.
type listedJobs struct {
	ids []string
	err error
}

func (l listedJobs) EachPendingJob(_ context.Context, fn func(string, temporalx.JobAttributes)) error {
	for _, id := range l.ids {
		fn(id, temporalx.JobAttributes{Queue: "train"})
	}
	return l.err
}

// A pass starts every pending job's workflow; failed starts are counted,
// the first is returned, and the next pass tries them again.
func TestReconcileStartsEveryPendingJob(t *testing.T) {
	jobs := listedJobs{ids: []string{"j-1", "j-2", "j-3"}}
	wf := &fakeStarter{failFor: map[string]bool{"j-1": true, "j-3": true}}
	res, err := workflows.ReconcileJobWorkflows(context.Background(), jobs, wf, nil)
	if !errors.Is(err, errStartRefused) || res != (workflows.ReconcileResult{Checked: 3, Failed: 2}) {
		t.Fatalf("while failing: %+v, %v", res, err)
	}
	wf.failFor = nil
	res, err = workflows.ReconcileJobWorkflows(context.Background(), jobs, wf, nil)
	if err != nil || res != (workflows.ReconcileResult{Checked: 3}) {
		t.Fatalf("after recovery: %+v, %v", res, err)
	}
	if got := wf.startedJobs(); !slices.Equal(got, []string{"j-2", "j-1", "j-2", "j-3"}) {
		t.Fatalf("started %v", got)
	}
	if wf.notified != 0 {
		t.Fatalf("reconciler woke the scheduler %d times; its timer finds the jobs", wf.notified)
	}
}

// A store error is returned joined with the first failed start.
func TestReconcileStoreError(t *testing.T) {
	storeDown := errors.New("store: connection refused")
	wf := &fakeStarter{failFor: map[string]bool{"j-1": true}}
	res, err := workflows.ReconcileJobWorkflows(context.Background(), listedJobs{ids: []string{"j-1"}, err: storeDown}, wf, nil)
	if !errors.Is(err, storeDown) || !errors.Is(err, errStartRefused) || res != (workflows.ReconcileResult{Checked: 1, Failed: 1}) {
		t.Fatalf("%+v, %v", res, err)
	}
}

// With a ledger, a pass starts only the pending jobs whose start it does not
// hold; it forgets the jobs no longer pending unless confirmed during the
// pass; a pass whose listing failed forgets nothing.
func TestReconcileSkipsConfirmedStarts(t *testing.T) {
	ledger := &workflows.StartLedger{}
	wf := &fakeStarter{failFor: map[string]bool{"j-2": true}, ledger: ledger}
	ctx := context.Background()
	res, err := workflows.ReconcileJobWorkflows(ctx, listedJobs{ids: []string{"j-1", "j-2", "j-3"}}, wf, ledger)
	if !errors.Is(err, errStartRefused) || res != (workflows.ReconcileResult{Checked: 3, Failed: 1}) {
		t.Fatalf("first pass: %+v, %v", res, err)
	}
	wf.failFor = nil
	res, err = workflows.ReconcileJobWorkflows(ctx, listedJobs{ids: []string{"j-1", "j-2", "j-3"}}, wf, ledger)
	if err != nil || res != (workflows.ReconcileResult{Checked: 1, Known: 2}) {
		t.Fatalf("second pass: %+v, %v", res, err)
	}
	// j-1 and j-2 finished; j-4 is new; the API confirms j-9 during the pass.
	wf.hook = func(string) { ledger.Confirm("j-9") }
	res, err = workflows.ReconcileJobWorkflows(ctx, listedJobs{ids: []string{"j-3", "j-4"}}, wf, ledger)
	if err != nil || res != (workflows.ReconcileResult{Checked: 1, Known: 1}) {
		t.Fatalf("third pass: %+v, %v", res, err)
	}
	for id, want := range map[string]bool{"j-1": false, "j-2": false, "j-3": true, "j-4": true, "j-9": true} {
		if got := ledger.Confirmed(id); got != want {
			t.Errorf("after the third pass, %s confirmed = %v, want %v", id, got, want)
		}
	}
	wf.hook = nil
	storeDown := errors.New("store: connection refused")
	if _, err := workflows.ReconcileJobWorkflows(ctx, listedJobs{err: storeDown}, wf, ledger); !errors.Is(err, storeDown) {
		t.Fatalf("failed listing: %v", err)
	}
	if ledger.Len() != 3 {
		t.Fatalf("a failed listing forgot starts: %d left, want 3", ledger.Len())
	}
	if got := wf.startedJobs(); !slices.Equal(got, []string{"j-1", "j-3", "j-2", "j-4"}) {
		t.Fatalf("started %v", got)
	}
}
