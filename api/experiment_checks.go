package api

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/scheduling"
)

// pastStart is the FieldError on start when the spec's start is earlier
// than now less one scheduling cycle (the slack for a client's clock and
// the request's way): the workflow would measure a baseline and switch at
// once while the spec says otherwise. No start (start now) is fine.
//
// Without a start, a stated baseline window must have ended by now (with
// the same slack): otherwise it would overlap the candidate's window, and
// Spec.Validate, which has no clock, compares baseline.to with an explicit
// start only.
func pastStart(spec *experiment.Spec, now time.Time, cycle time.Duration) []experiment.FieldError {
	if spec.Start == nil {
		if to := spec.Baseline.To; to != nil && to.After(now.Add(cycle)) {
			return []experiment.FieldError{{Field: "baseline.to", Message: to.UTC().Format(time.RFC3339) +
				" is after the start (now " + now.UTC().Format(time.RFC3339) + "): the baseline must end before the candidate's window begins"}}
		}
		return nil
	}
	if !spec.Start.Before(now.Add(-cycle)) {
		return nil
	}
	return []experiment.FieldError{{Field: "start", Message: spec.Start.UTC().Format(time.RFC3339) +
		" is in the past (now " + now.UTC().Format(time.RFC3339) + "); omit it to start now"}}
}

// unknownQueues returns a FieldError for each queue the spec names that
// is not a stored queue (store.ListQueues, the policy's queues): on
// scope.queues[i], and, when the scope lists no queue (every queue
// watched), on expected.queue and rollback[i].queue. With queues listed,
// Spec.Validate already requires a target queue to be one of them, each
// of which is checked here. Blank names are Spec.Validate's to report.
func (s *Server) unknownQueues(ctx context.Context, spec *experiment.Spec) ([]experiment.FieldError, error) {
	type named struct{ field, queue string }
	var names []named
	for i, q := range spec.Scope.Queues {
		names = append(names, named{fmt.Sprintf("scope.queues[%d]", i), q})
	}
	if len(spec.Scope.Queues) == 0 {
		names = append(names, named{"expected.queue", spec.Expected.Queue})
		for i, c := range spec.Rollback {
			names = append(names, named{fmt.Sprintf("rollback[%d].queue", i), c.Queue})
		}
	}
	names = slices.DeleteFunc(names, func(n named) bool { return strings.TrimSpace(n.queue) == "" })
	if len(names) == 0 {
		return nil, nil
	}
	queues, err := s.store.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	known := make([]string, len(queues))
	for i, q := range queues {
		known[i] = q.Name
	}
	slices.Sort(known)
	var out []experiment.FieldError
	for _, n := range names {
		if !slices.ContainsFunc(queues, func(q scheduling.Queue) bool { return q.Name == n.queue }) {
			out = append(out, experiment.FieldError{Field: n.field,
				Message: fmt.Sprintf("queue %q is not a stored queue (the policy's queues: %s)", n.queue, strings.Join(known, ", "))})
		}
	}
	return out, nil
}
