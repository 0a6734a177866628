package api

import (
	"context"
	"time"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// PendingJobs lists, on Store, the jobs whose JobWorkflow may not have been
// started: those in state submitted or waiting (a job without a workflow may
// already have been through a scheduling cycle), and those cancelled within
// workflows.ReconcileCancelledWithin (a job cancelled before its workflow
// started; the workflow reads it cancelled and ends at once). It implements
// workflows.PendingJobs for workflows.ReconcileJobWorkflows, with the same
// attributes a submission starts the workflow with.
type PendingJobs struct {
	Store Store
	// PageSize bounds each ListJobs page; ≤ 0 means the store's default.
	PageSize int
	// Now is the clock of the cancelled jobs' horizon; nil means time.Now.
	Now func() time.Time
}

// EachPendingJob calls fn with every pending job and every job cancelled
// within workflows.ReconcileCancelledWithin, page by page, state by state;
// it returns the first ListJobs error.
func (p PendingJobs) EachPendingJob(ctx context.Context, fn func(jobID string, attrs temporalx.JobAttributes)) error {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	filters := []store.JobFilter{
		{State: vocab.JobSubmitted},
		{State: vocab.JobWaiting},
		{State: vocab.JobCancelled, UpdatedSince: now().Add(-workflows.ReconcileCancelledWithin)},
	}
	for _, f := range filters {
		f.Limit = p.PageSize
		for {
			jobs, next, err := p.Store.ListJobs(ctx, f)
			if err != nil {
				return err
			}
			for i := range jobs {
				fn(jobs[i].ID, jobs[i].WorkflowAttributes())
			}
			if next == "" {
				break
			}
			f.AfterID = next
		}
	}
	return nil
}
