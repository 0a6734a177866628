package temporalx

import "errors"

// ExperimentWorkflowID returns the workflow ID of a policy experiment:
// "experiment/<id>" (docs/design.md §3, experiments). It is also the actor
// of the policy switches the experiment makes (store.ExperimentWorkflowID).
func ExperimentWorkflowID(id string) string { return "experiment/" + id }

// SignalExperiment carries an admin's decision to a running
// ExperimentWorkflow (payload ExperimentDecision).
const SignalExperiment = "experiment"

// The actions of SignalExperiment.
const (
	// ExperimentAbort stops the experiment at any point; the baseline is
	// restored when the candidate was switched in.
	ExperimentAbort = "abort"
	// ExperimentPromote makes a kept candidate the new baseline (accepted
	// only while the experiment holds after a kept verdict).
	ExperimentPromote = "promote"
)

// ExperimentDecision is the payload of SignalExperiment.
type ExperimentDecision struct {
	Action string // ExperimentAbort or ExperimentPromote
	Actor  string // the admin, as the API's token names them
	Reason string
}

// ErrExperimentClosed is the error of a decision sent to an
// ExperimentWorkflow that has ended (or never started): nothing awaits it
// (workflows.SignalExperiment returns it; the API answers 409).
var ErrExperimentClosed = errors.New("the experiment workflow has ended")
