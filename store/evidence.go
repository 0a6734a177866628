package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/vocab"
)

// A recovery profile (docs/design.md §1) names the jobs whose save and
// resume are expected to behave alike: "<project>/<name>". Evidence — every
// observed resume, verified or not — accumulates per profile, and a new job
// inherits its profile's record: the preemption gate reads the profile's,
// not the job's own count (§5 "The evidence rule").

// MaxProfileNameLength bounds a declared recovery.profile and the name part
// ProfileOf derives from a command, in bytes.
const MaxProfileNameLength = 128

// profileNamePattern is what a declared recovery.profile must look like: a
// name as node and pool names are (letters, digits, '.', '_', '-'; starting
// with a letter or digit), without '/': the project part is always the
// job's own.
var profileNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidProfileName reports whether name may be declared as a job's
// recovery.profile: 1..MaxProfileNameLength bytes of letters, digits, '.',
// '_' and '-', starting with a letter or digit.
func ValidProfileName(name string) bool { return profileNamePattern.MatchString(name) }

// SimulatedProfileName is the name part of the default profile of a job
// without a command (run on the simulated executor for run_seconds).
const SimulatedProfileName = "simulated"

// ProfileOf is the job's recovery profile: project + "/" + declared when the
// job declares recovery.profile, else project + "/" + the base name of its
// command's first word (gpugov's job spec has no image; the program stands
// for it: ["/opt/venv/bin/python", "train.py"] gives "python"), with
// characters outside [A-Za-z0-9._-] replaced by '_' and cut to
// MaxProfileNameLength bytes ("command" if nothing is left), else project +
// "/simulated" for a job without a command. The project part keeps one
// project's evidence from being borrowed or spoiled by another's jobs.
// Migration 00250 gives the jobs stored before it the same default.
func ProfileOf(project, declared string, command []string) string {
	if declared != "" {
		return project + "/" + declared
	}
	if len(command) == 0 {
		return project + "/" + SimulatedProfileName
	}
	word := strings.TrimRight(command[0], "/")
	if i := strings.LastIndexByte(word, '/'); i >= 0 {
		word = word[i+1:]
	}
	b := []byte(word)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > MaxProfileNameLength {
		b = b[:MaxProfileNameLength]
	}
	if len(b) == 0 {
		return project + "/command"
	}
	return project + "/" + string(b)
}

// ResumeEvidence is one observed resume of a job: where it was seen (Kind)
// and what it showed (Outcome), at At. Key identifies its source — the
// preemption ID for a preemption or drill, "crash/<run ID>" for a crashed
// run's retried attempt — so that a retried writer stores it once. Profile
// "" means the job's own recovery profile (jobs.recovery.profile). Detail
// says what was seen, for people.
type ResumeEvidence struct {
	Key     string
	JobID   string
	Profile string
	Kind    vocab.ResumeEvidenceKind
	Outcome vocab.ResumeOutcome
	At      time.Time
	Detail  string
}

// RecordResumeEvidence stores one observed resume for its recovery profile.
// It is idempotent by Key: a second call with a stored key changes nothing
// and returns nil (the first record is kept). Errors: a missing key, job or
// time, or an unknown kind or outcome (*ValidationError naming the field),
// an unknown job (ErrNotFound), or database errors.
func (s *Store) RecordResumeEvidence(ctx context.Context, e ResumeEvidence) error {
	switch {
	case e.Key == "":
		return fmt.Errorf("store: record resume evidence: %w", invalidf("key", "key is required"))
	case e.JobID == "":
		return fmt.Errorf("store: record resume evidence %s: %w", e.Key, invalidf("job_id", "job_id is required"))
	case !e.Kind.Valid():
		return fmt.Errorf("store: record resume evidence %s: %w", e.Key,
			invalidf("kind", "kind %q is not one of %v", e.Kind, vocab.ResumeEvidenceKinds))
	case !e.Outcome.Valid():
		return fmt.Errorf("store: record resume evidence %s: %w", e.Key,
			invalidf("outcome", "outcome %q is not one of %v", e.Outcome, vocab.ResumeOutcomes))
	case e.At.IsZero():
		return fmt.Errorf("store: record resume evidence %s: %w", e.Key, invalidf("at", "at is required"))
	}
	return recordResumeEvidence(ctx, s.pool, e)
}

// recordResumeEvidence is RecordResumeEvidence's insert on q (the pool or a
// transaction), its input already checked.
func recordResumeEvidence(ctx context.Context, q querier, e ResumeEvidence) error {
	var exists bool
	err := q.QueryRow(ctx, `
		WITH j AS (SELECT id, coalesce(nullif($3, ''), recovery->>'profile', project || '/simulated') AS profile
			FROM jobs WHERE id = $2),
		ins AS (INSERT INTO resume_evidence (key, job_id, profile, kind, outcome, at, detail)
			SELECT $1, j.id, j.profile, $4, $5, $6, $7 FROM j
			ON CONFLICT (key) DO NOTHING)
		SELECT EXISTS (SELECT 1 FROM j)`,
		e.Key, e.JobID, e.Profile, e.Kind, e.Outcome, e.At, e.Detail).Scan(&exists)
	if err != nil {
		return fmt.Errorf("store: record resume evidence %s: %w", e.Key, err)
	}
	if !exists {
		return fmt.Errorf("store: record resume evidence %s: job %s: %w", e.Key, e.JobID, ErrNotFound)
	}
	return nil
}

// ProfileRecord is a recovery profile's record over a window: its verified
// resumes, its failed and wrong-step ones (Failed), the failure rate
// Failed / (Verified + Failed) (nil when no resume was observed), and the
// time of the latest observed resume (nil when none).
type ProfileRecord struct {
	Profile     string
	Verified    int
	Failed      int
	FailureRate *float64
	Last        *time.Time
}

// ProfileEvidence returns the record of profile over the window ending at
// now: the resumes observed at a time in (now − window, now]; window ≤ 0
// means every resume up to now. A profile without evidence has a zero
// record. Errors are database errors.
func (s *Store) ProfileEvidence(ctx context.Context, profile string, window time.Duration, now time.Time) (*ProfileRecord, error) {
	var from *time.Time
	if window > 0 {
		f := now.Add(-window)
		from = &f
	}
	out := &ProfileRecord{Profile: profile}
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE outcome = 'verified'), count(*) FILTER (WHERE outcome <> 'verified'), max(at)
		FROM resume_evidence WHERE profile = $1 AND at <= $2 AND ($3::timestamptz IS NULL OR at > $3)`,
		profile, now, from).Scan(&out.Verified, &out.Failed, &out.Last)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: evidence of profile %s: %w", profile, err)
	}
	out.Last = utcPtr(out.Last)
	if n := out.Verified + out.Failed; n > 0 {
		r := float64(out.Failed) / float64(n)
		out.FailureRate = &r
	}
	return out, nil
}

// ResumeEvidenceOf lists the resumes observed for job jobID, oldest first.
// Errors are database errors.
func (s *Store) ResumeEvidenceOf(ctx context.Context, jobID string) ([]ResumeEvidence, error) {
	var out []ResumeEvidence
	err := forEachRow(ctx, s.pool, `SELECT key, job_id, profile, kind, outcome, at, detail FROM resume_evidence
		WHERE job_id = $1 ORDER BY at, key`, []any{jobID}, func(rows pgx.Rows) error {
		var e ResumeEvidence
		if err := rows.Scan(&e.Key, &e.JobID, &e.Profile, &e.Kind, &e.Outcome, &e.At, &e.Detail); err != nil {
			return err
		}
		e.At = e.At.UTC()
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: resume evidence of job %s: %w", jobID, err)
	}
	return out, nil
}
