package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// ReconcileResult counts what one ReconcileJobWorkflows pass did.
type ReconcileResult struct {
	Checked int // pending jobs whose workflow start was (re)requested
	Failed  int // of those, starts that failed; they are tried again next pass
}

// ReconcileJobWorkflows keeps DESIGN.md invariant 3 for submissions answered
// 202: it asks Temporal to start the JobWorkflow of every pending job (state
// submitted or waiting — a job without a workflow may already have been
// through a scheduling cycle). StartJob is idempotent, so jobs whose workflow
// exists are left as they are; the cost is one Temporal call per pending job.
// serve runs it periodically. pageSize bounds each ListJobs page (≤ 0 means
// the store's default). It returns the counts and an error joining the store
// error, if any, with the first failed start.
func ReconcileJobWorkflows(ctx context.Context, st Store, wf Workflows, pageSize int) (ReconcileResult, error) {
	var res ReconcileResult
	var firstStartErr error
	for _, state := range []vocab.JobState{vocab.JobSubmitted, vocab.JobWaiting} {
		f := store.JobFilter{State: state, Limit: pageSize}
		for {
			jobs, next, err := st.ListJobs(ctx, f)
			if err != nil {
				return res, errors.Join(fmt.Errorf("reconcile job workflows: %w", err), firstStartErr)
			}
			for i := range jobs {
				j := &jobs[i]
				res.Checked++
				attrs := jobAttributes(j)
				if err := wf.StartJob(ctx, j.ID, attrs); err != nil {
					res.Failed++
					if firstStartErr == nil {
						firstStartErr = fmt.Errorf("reconcile job workflows: job %s: %w", j.ID, err)
					}
				}
			}
			if next == "" {
				break
			}
			f.AfterID = next
		}
	}
	return res, firstStartErr
}
