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
	res, err := workflows.ReconcileJobWorkflows(context.Background(), jobs, wf)
	if !errors.Is(err, errStartRefused) || res != (workflows.ReconcileResult{Checked: 3, Failed: 2}) {
		t.Fatalf("while failing: %+v, %v", res, err)
	}
	wf.failFor = nil
	res, err = workflows.ReconcileJobWorkflows(context.Background(), jobs, wf)
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
	res, err := workflows.ReconcileJobWorkflows(context.Background(), listedJobs{ids: []string{"j-1"}, err: storeDown}, wf)
	if !errors.Is(err, storeDown) || !errors.Is(err, errStartRefused) || res != (workflows.ReconcileResult{Checked: 1, Failed: 1}) {
		t.Fatalf("%+v, %v", res, err)
	}
}
