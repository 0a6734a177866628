package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// ReconcileResult counts what one ReconcileJobWorkflows pass did.
type ReconcileResult struct {
	Checked int // pending jobs whose workflow start was (re)requested
	Failed  int // of those, starts that failed; they are tried again next pass
	Known   int // pending jobs skipped: the StartLedger holds their start
}

// ReconcileCancelledWithin is how far back the reconciler looks for jobs
// cancelled before their JobWorkflow was started (Client.CancelJob's
// signal-with-start failed, and the submission had been answered 202): one
// hour, far inside the shortest retention Temporal allows a namespace (one
// day), so a job listed again finds its closed workflow (reuse policy reject
// duplicate) and never gets a second one (docs/design.md §3 step 1
// "Submit").
const ReconcileCancelledWithin = time.Hour

// PendingJobs lists the jobs whose JobWorkflow may not have been started; the
// API implements it on its store (api.PendingJobs: the jobs in state
// submitted or waiting, and those cancelled within ReconcileCancelledWithin).
type PendingJobs interface {
	// EachPendingJob calls fn with every pending job's ID and attributes, and
	// returns the store's error, if any.
	EachPendingJob(ctx context.Context, fn func(jobID string, attrs temporalx.JobAttributes)) error
}

// ReconcileJobWorkflows keeps the durability invariant (docs/design.md) for
// submissions answered 202 and for background starts that failed or were
// lost with the process: it asks Temporal to start the JobWorkflow of every
// pending job that ledger does not hold (a nil ledger holds none). StartJob
// is idempotent, so jobs whose workflow exists are left as they are; the
// cost is one Temporal call per pending job not in the ledger — every
// pending job at a process's first pass, then those whose start is in doubt
// (StartLedger). serve runs it periodically, with the ledger its
// workflows.Client fills. It returns the counts and an error joining the
// store error, if any, with the first failed start.
func ReconcileJobWorkflows(ctx context.Context, jobs PendingJobs, wf JobStarter, ledger *StartLedger) (ReconcileResult, error) {
	var res ReconcileResult
	var firstStartErr error
	gen := ledger.beginPass()
	err := jobs.EachPendingJob(ctx, func(jobID string, attrs temporalx.JobAttributes) {
		if ledger.listed(jobID) {
			res.Known++
			return
		}
		res.Checked++
		if err := wf.StartJob(ctx, jobID, attrs); err != nil {
			res.Failed++
			if firstStartErr == nil {
				firstStartErr = fmt.Errorf("reconcile job workflows: job %s: %w", jobID, err)
			}
		}
	})
	if err != nil {
		return res, errors.Join(fmt.Errorf("reconcile job workflows: %w", err), firstStartErr)
	}
	ledger.endPass(gen)
	return res, firstStartErr
}
