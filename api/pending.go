package api

import (
	"context"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// PendingJobs lists, on Store, the jobs whose JobWorkflow may not have been
// started: those in state submitted or waiting (a job without a workflow may
// already have been through a scheduling cycle). It implements
// workflows.PendingJobs for workflows.ReconcileJobWorkflows, with the same
// attributes a submission starts the workflow with.
type PendingJobs struct {
	Store Store
	// PageSize bounds each ListJobs page; ≤ 0 means the store's default.
	PageSize int
}

// EachPendingJob calls fn with every pending job, page by page, state by
// state; it returns the first ListJobs error.
func (p PendingJobs) EachPendingJob(ctx context.Context, fn func(jobID string, attrs temporalx.JobAttributes)) error {
	for _, state := range []vocab.JobState{vocab.JobSubmitted, vocab.JobWaiting} {
		f := store.JobFilter{State: state, Limit: p.PageSize}
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
