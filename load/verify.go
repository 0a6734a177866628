package load

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/store"
)

// settlementBatch is how many job IDs one store.JobSettlements query reads.
const settlementBatch = 2000

// drainPoll is the time between two looks at the unsettled jobs.
const drainPoll = 2 * time.Second

// describeRetries and describeRetryDelay bound the second looks at a
// workflow whose status disagrees with its job (a job's row is final an
// instant before its workflow completes).
const (
	describeRetries    = 5
	describeRetryDelay = 2 * time.Second
)

// settlements reads the state and reason of every ID, batched.
func (r *runner) settlements(ctx context.Context, ids []string) (map[string]store.JobSettlement, error) {
	out := make(map[string]store.JobSettlement, len(ids))
	for i := 0; i < len(ids); i += settlementBatch {
		rows, err := r.cfg.Store.JobSettlements(ctx, ids[i:min(len(ids), i+settlementBatch)])
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		for _, row := range rows {
			out[row.ID] = row
		}
	}
	return out, nil
}

// drain waits, up to Drain, until every accepted job is settled (its row is
// final, or pending with a wait reason) and the backlog has drained (no
// accepted job pending but those built to wait for good), and returns the
// last look; r.backlogLeft is then the pending jobs not built to wait. A
// backlog left at the bound is reported, not a failure: a pending job with
// its reason is settled.
func (r *runner) drain(ctx context.Context, ids []string) (map[string]store.JobSettlement, error) {
	deadline := time.Now().Add(r.cfg.Drain)
	for {
		rows, err := r.settlements(ctx, ids)
		if err != nil {
			return nil, err
		}
		unsettled, byState := unsettledOf(ids, rows)
		r.backlogLeft = r.backlogOf(ids, rows)
		if (unsettled == 0 && r.backlogLeft == 0) || !time.Now().Before(deadline) {
			return rows, nil
		}
		fmt.Fprintf(r.cfg.Progress, "load: %d of %d accepted jobs not settled yet (%s); backlog %d pending (not counting those built to wait)\n",
			unsettled, len(ids), counts(byState), r.backlogLeft)
		if !sleepUntil(ctx, time.Now().Add(drainPoll)) {
			return nil, ctx.Err()
		}
	}
}

// unsettledOf counts the ids whose row is missing or not settled, and those
// by state ("" for a missing row).
func unsettledOf(ids []string, rows map[string]store.JobSettlement) (int, map[string]int) {
	n, byState := 0, map[string]int{}
	for _, id := range ids {
		if row, ok := rows[id]; !ok || !row.Settled() {
			n++
			byState[string(row.State)]++
		}
	}
	return n, byState
}

// backlogOf counts the ids whose row is pending and that were not built to
// wait for good (r.waitsForGood).
func (r *runner) backlogOf(ids []string, rows map[string]store.JobSettlement) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range ids {
		if row, ok := rows[id]; ok && row.State.Pending() && !r.waitsForGood[id] {
			n++
		}
	}
	return n
}

// allSettled reports whether every id has a settled row.
func allSettled(ids []string, rows map[string]store.JobSettlement) bool {
	n, _ := unsettledOf(ids, rows)
	return n == 0
}

// verify checks every accepted job: its row exists and is settled, its
// workflow exists, and the workflow's status agrees with the job (running
// while the job waits, closed without failing once it ended). It fills rep's
// findings and state and reason counts.
func (r *runner) verify(ctx context.Context, ids []string, rows map[string]store.JobSettlement, rep *Report) error {
	rep.States, rep.Reasons = map[string]int{}, map[string]int{}
	for _, id := range ids {
		row, ok := rows[id]
		switch {
		case !ok:
			rep.MissingRows = append(rep.MissingRows, id)
			continue
		case !row.Settled():
			rep.Unsettled = append(rep.Unsettled, fmt.Sprintf("%s (%s, reason %q)", id, row.State, row.Reason))
		}
		rep.States[string(row.State)]++
		if row.State.Pending() {
			rep.Reasons[string(row.Reason)]++
		}
	}
	t0 := time.Now()
	statuses, missing, mismatched, err := r.describeAll(ctx, ids, rows)
	rep.VerifyTime = time.Since(t0)
	if err != nil {
		return err
	}
	rep.Workflows = statuses
	rep.MissingWorkflows = missing
	rep.WorkflowMismatch = mismatched
	sort.Strings(rep.MissingRows)
	sort.Strings(rep.MissingWorkflows)
	sort.Strings(rep.WorkflowMismatch)
	sort.Strings(rep.Unsettled)
	return nil
}

// describeAll describes job/<id> for every ID with VerifyConcurrency calls in
// flight. It returns the count per workflow status, the IDs without a
// workflow, and the jobs whose workflow still disagrees with the row after
// describeRetries second looks. A failure other than not-found is an error.
func (r *runner) describeAll(ctx context.Context, ids []string, rows map[string]store.JobSettlement) (map[string]int, []string, []string, error) {
	var (
		mu         sync.Mutex
		statuses   = map[string]int{}
		missing    []string
		mismatched []string
		firstErr   error
	)
	r.eachID(ctx, ids, func(id string) {
		st, problem, err := r.describeOne(ctx, id, rows[id])
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = err
			}
		case st == "":
			missing = append(missing, id)
		default:
			statuses[st]++
			if problem != "" {
				mismatched = append(mismatched, id+": "+problem)
			}
		}
	})
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return statuses, missing, mismatched, firstErr
}

// eachID calls fn for every id, VerifyConcurrency calls at a time, and
// returns when all calls returned; once ctx ends the ids not yet handed out
// are skipped. fn must do its own locking.
func (r *runner) eachID(ctx context.Context, ids []string, fn func(id string)) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range r.cfg.VerifyConcurrency {
		wg.Go(func() {
			for id := range work {
				fn(id)
			}
		})
	}
feed:
	for _, id := range ids {
		select {
		case work <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
}

// describeOne returns the status of job id's workflow ("" when Temporal has
// none) and a problem when it disagrees with the row, looked at again up to
// describeRetries times.
func (r *runner) describeOne(ctx context.Context, id string, row store.JobSettlement) (string, string, error) {
	for attempt := 0; ; attempt++ {
		d, err := r.cfg.Temporal.DescribeWorkflow(ctx, temporalx.JobWorkflowID(id), "")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return "", "", nil
		}
		if err != nil {
			return "", "", fmt.Errorf("load: describe workflow of job %s: %w", id, err)
		}
		st := d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
		problem := ""
		switch {
		case st == enums.WORKFLOW_EXECUTION_STATUS_FAILED || st == enums.WORKFLOW_EXECUTION_STATUS_TERMINATED ||
			st == enums.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
			problem = fmt.Sprintf("workflow %s with the job %s", st, row.State)
		case row.ID != "" && row.State.Final() && st == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
			problem = fmt.Sprintf("job %s but its workflow still runs", row.State)
		case row.ID != "" && !row.State.Final() && st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
			problem = fmt.Sprintf("job %s but its workflow is %s", row.State, st)
		}
		if problem == "" || attempt == describeRetries {
			return st.String(), problem, nil
		}
		if !sleepUntil(ctx, time.Now().Add(describeRetryDelay)) {
			return "", "", ctx.Err()
		}
		// The row may have moved on too (a job finishing between the looks).
		if fresh, err := r.cfg.Store.JobSettlements(ctx, []string{id}); err == nil && len(fresh) == 1 {
			row = fresh[0]
		}
	}
}
