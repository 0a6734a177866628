package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// This file holds the action flows a wait reason implies (docs/design.md §3,
// "Act on a wait"): setting a prerequisite ready or not ready
// (environment_not_ready) and amending a waiting job's resource request
// (no_matching_capacity, fragmented). Each is one transaction that changes
// the job and appends its audit entry with the before and after values.

// ErrNoPrerequisite is matched (errors.Is) by the error SetPrerequisite
// returns when the job has no prerequisite of that name; it also matches
// ErrNotFound.
var ErrNoPrerequisite = fmt.Errorf("no such prerequisite: %w", ErrNotFound)

// Audit actions of this file.
const (
	AuditSetPrerequisite = "set_prerequisite" // evidence: name, state, before/after {ready, message}
	AuditAmendResources  = "amend_resources"  // evidence: state, before/after resource request documents
)

// SetPrerequisite sets the named prerequisite of a pending (submitted or
// waiting) job ready or not ready with message, and audits it (action
// AuditSetPrerequisite, actor actor, evidence before and after) in the same
// transaction. It reports whether anything changed: setting the values the
// prerequisite already has changes and audits nothing, so retries are safe.
// The next scheduling cycle sees the change (job_queue.prereq_triples is kept
// by the jobs trigger). Errors: an empty name or actor (ErrInvalid), an
// unknown job (ErrNotFound), an unknown prerequisite (ErrNoPrerequisite, the
// message naming it), a job that is not pending (ErrConflict), or database
// errors, wrapped with "set prerequisite".
func (s *Store) SetPrerequisite(ctx context.Context, jobID, name string, ready bool, message, actor string) (bool, error) {
	if err := required("name", name, "actor", actor); err != nil {
		return false, fmt.Errorf("store: set prerequisite: %w", err)
	}
	changed := false
	err := s.inTx(ctx, "set prerequisite "+name+" of "+jobID, func(tx pgx.Tx) error {
		changed = false
		var state vocab.JobState
		var docs []prerequisiteDoc
		err := tx.QueryRow(ctx, `SELECT state, prerequisites FROM jobs WHERE id = $1 FOR NO KEY UPDATE`, jobID).
			Scan(&state, &docs)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %s: %w", jobID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		i := prerequisiteIndex(docs, name)
		switch {
		case i < 0:
			return fmt.Errorf("job %s has no prerequisite %q: %w", jobID, name, ErrNoPrerequisite)
		case !state.Pending():
			return fmt.Errorf("job is %s, not pending (submitted or waiting): %w", state, ErrConflict)
		}
		before := docs[i]
		after := prerequisiteDoc{Name: name, Ready: ready, Message: message}
		if before == after {
			return nil
		}
		docs[i] = after
		now := time.Now()
		if _, err := tx.Exec(ctx, `UPDATE jobs SET prerequisites = $2, updated_at = $3 WHERE id = $1`,
			jobID, mustJSON(docs), now); err != nil {
			return err
		}
		changed = true
		verb := "not ready"
		if ready {
			verb = "ready"
		}
		return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: AuditSetPrerequisite, Subject: jobID,
			Reason: fmt.Sprintf("prerequisite %s set %s: %s", name, verb, message),
			Evidence: map[string]any{"name": name, "state": string(state),
				"before": map[string]any{"ready": before.Ready, "message": before.Message},
				"after":  map[string]any{"ready": after.Ready, "message": after.Message}}})
	})
	if err != nil {
		return false, err
	}
	return changed, nil
}

// AmendJob replaces the resource request of a job that has not been placed
// (submitted or waiting) with req, keeping its submit time, its current
// wait's start and the aging credit it carried over (docs/design.md §3,
// "Act on a wait"), and audits it (action AuditAmendResources, evidence before and
// after) in the same transaction. It reports whether anything changed: the
// request it already has changes and audits nothing. The job gets a new
// job_queue.seq in the same transaction, so that LoadSnapshot's cache of
// job data, keyed by seq, reads the new request on its next load. The caller
// validates req (the API validates it exactly like a submission); the store
// refuses only a request without pool or with fewer than one GPU, and one
// that moves the job to another pool (the job's workflow and its search
// attributes are the submitted pool's): ErrInvalid naming the field
// ("resources.pool", "resources.gpus"). Other errors: an unknown job
// (ErrNotFound), a placed, running or final job (ErrConflict), database
// errors, all wrapped with "amend job".
func (s *Store) AmendJob(ctx context.Context, jobID string, req scheduling.ResourceRequest, actor, reason string) (bool, error) {
	if err := required("resources.pool", req.Pool, "actor", actor); err != nil {
		return false, fmt.Errorf("store: amend job: %w", err)
	}
	if req.GPUs < 1 {
		return false, fmt.Errorf("store: amend job: %w", invalidf("resources.gpus", "resources.gpus must be ≥ 1, got %d", req.GPUs))
	}
	changed := false
	err := s.inTx(ctx, "amend job "+jobID, func(tx pgx.Tx) error {
		changed = false
		var state vocab.JobState
		var doc requestDoc
		err := tx.QueryRow(ctx, `SELECT state, request FROM jobs WHERE id = $1 FOR NO KEY UPDATE`, jobID).Scan(&state, &doc)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %s: %w", jobID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if !state.Pending() {
			return fmt.Errorf("job is %s; only a submitted or waiting job can be amended: %w", state, ErrConflict)
		}
		if doc.Pool != req.Pool {
			return invalidf("resources.pool", "cannot be amended (job %s is in pool %q, not %q): "+
				"cancel it and submit again to change pools", jobID, doc.Pool, req.Pool)
		}
		after := toRequestDoc(req)
		if after.Topology == "" {
			after.Topology = string(scheduling.TopologyAny)
		}
		if reflect.DeepEqual(normRequestDoc(doc), normRequestDoc(after)) {
			return nil
		}
		now := time.Now()
		if _, err := tx.Exec(ctx, `UPDATE jobs SET request = $2, updated_at = $3 WHERE id = $1`,
			jobID, mustJSON(after), now); err != nil {
			return err
		}
		// A new seq makes the snapshot cache, which holds each live job's
		// request under its seq, load the amended request.
		if _, err := tx.Exec(ctx, `UPDATE job_queue SET seq = DEFAULT WHERE job_id = $1`, jobID); err != nil {
			return err
		}
		changed = true
		return appendAuditTx(ctx, tx, AuditEntry{At: now, Actor: actor, Action: AuditAmendResources, Subject: jobID,
			Reason: reason, Evidence: map[string]any{"state": string(state), "before": doc, "after": after}})
	})
	if err != nil {
		return false, err
	}
	return changed, nil
}

// normRequestDoc makes two request documents comparable: empty and nil
// models and labels are the same, as are topology "" and "any".
func normRequestDoc(d requestDoc) requestDoc {
	if len(d.GPUModels) == 0 {
		d.GPUModels = nil
	}
	if len(d.Labels) == 0 {
		d.Labels = nil
	}
	if d.Topology == "" {
		d.Topology = string(scheduling.TopologyAny)
	}
	return d
}

// prerequisiteIndex returns the index of the prerequisite called name, or -1.
func prerequisiteIndex(docs []prerequisiteDoc, name string) int {
	for i, d := range docs {
		if d.Name == name {
			return i
		}
	}
	return -1
}
