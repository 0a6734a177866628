package vocab

import "slices"

// ResumeEvidenceKind is where a resume of a job was observed
// (resume_evidence.kind): every observed resume, verified or not, is
// evidence for the job's recovery profile (docs/design.md §1 "recovery
// profile", §5 "The evidence rule").
type ResumeEvidenceKind string

// The resume evidence kinds.
const (
	// EvidencePreemption: the next run after a preemption, checked by the
	// PreemptionWorkflow's VerifyResume step.
	EvidencePreemption ResumeEvidenceKind = "preemption"
	// EvidenceCrash: a run attempt retried after its executor crashed or its
	// node agent restarted, resuming from the run's last checkpoint.
	EvidenceCrash ResumeEvidenceKind = "crash"
	// EvidenceDrill: the next run after a resume drill (a preemption without
	// a beneficiary, started by an operator or the policy).
	EvidenceDrill ResumeEvidenceKind = "drill"
)

// ResumeEvidenceKinds lists every resume evidence kind.
var ResumeEvidenceKinds = []ResumeEvidenceKind{EvidencePreemption, EvidenceCrash, EvidenceDrill}

// Valid reports whether k is one of ResumeEvidenceKinds.
func (k ResumeEvidenceKind) Valid() bool { return slices.Contains(ResumeEvidenceKinds, k) }

// ResumeOutcome is what one observed resume showed (resume_evidence.outcome).
type ResumeOutcome string

// The resume outcomes.
const (
	// ResumeVerified: the next run (or attempt) started at the saved step and
	// progressed past it.
	ResumeVerified ResumeOutcome = "verified"
	// ResumeFailed: it started at the saved step but did not progress past
	// it (it failed, or was not seen passing it within the bound), or no
	// next run was seen.
	ResumeFailed ResumeOutcome = "failed"
	// ResumeWrongStep: it started from another step than the saved one.
	ResumeWrongStep ResumeOutcome = "wrong_step"
)

// ResumeOutcomes lists every resume outcome.
var ResumeOutcomes = []ResumeOutcome{ResumeVerified, ResumeFailed, ResumeWrongStep}

// Valid reports whether o is one of ResumeOutcomes.
func (o ResumeOutcome) Valid() bool { return slices.Contains(ResumeOutcomes, o) }
