package workflows

// ExperimentWorkflowName is the workflow type name of ExperimentWorkflow.
const ExperimentWorkflowName = "ExperimentWorkflow"

// ExperimentInput names the stored experiment an ExperimentWorkflow runs.
type ExperimentInput struct {
	ID string
}
