package e2e

import (
	"reflect"
	"slices"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/workflows"
)

// crashSteps names, for every activity of the workflows the crash tests
// cover, the test that SIGKILLs `gpugov serve` right after that activity's
// effect (crash_test.go, crash_governance_test.go). TestCrashCasesCoverEveryActivity enumerates the
// activities from the worker's registration, so an activity added to one of
// these workflows without a crash case fails it.
var crashSteps = map[string]string{
	"RunCycle":               "TestCrashAtEveryJobStep",
	"LoadJob":                "TestCrashAtEveryJobStep",
	"MarkRunning":            "TestCrashAtEveryJobStep",
	executor.RunActivityName: "TestCrashAtEveryJobStep",
	"FinishRun":              "TestCrashAtEveryJobStep",
	"CancelJob":              "TestCrashAtEveryJobStep",
	"ReleasePlacement":       "TestCrashAtEveryJobStep",
	"SignalPlacements":       "TestCrashAtEveryJobStep",
	"Notify":                 "TestCrashAtEveryPreemptionStep",
	"Checkpoint":             "TestCrashAtEveryPreemptionStep",
	"Release":                "TestCrashAtEveryPreemptionStep",
	"Reschedule":             "TestCrashAtEveryPreemptionStep",
	"VerifyResume":           "TestCrashAtEveryPreemptionStep",
	"Abort":                  "TestCrashAtEveryPreemptionStep",

	"ScanReclaims":      "TestCrashAtEveryReclaimStep",
	"AssessReclaim":     "TestCrashAtEveryReclaimStep",
	"ReleaseReclaimed":  "TestCrashAtEveryReclaimStep",
	"NotifyOwner":       "TestCrashAtEveryReclaimStep",
	"RecordDispute":     "TestCrashAtEveryReclaimStep",
	"AwaitConfirmation": "TestCrashAtEveryReclaimStep",
	"CloseReclaim":      "TestCrashAtEveryReclaimStep",

	"LoadExperiment":            "TestCrashAtEveryExperimentStep",
	"MeasureExperimentBaseline": "TestCrashAtEveryExperimentStep",
	"SwitchExperiment":          "TestCrashAtEveryExperimentStep",
	"CheckExperiment":           "TestCrashAtEveryExperimentStep",
	"FinishExperiment":          "TestCrashAtEveryExperimentStep",
	"PromoteExperiment":         "TestCrashAtEveryExperimentStep",
	"AbortExperiment":           "TestCrashAtEveryExperimentStep",
}

// crashCovered are the activity structs (activities.Register registers every
// exported method of each as an activity) whose workflows the crash tests
// cover: the scheduling cycle, JobWorkflow, PreemptionWorkflow,
// ReclaimWorkflow with the reclaim scan (crash_governance_test.go) and
// ExperimentWorkflow.
var crashCovered = []string{"*activities.Scheduler", "*activities.Jobs", "*activities.Preemptions",
	"*activities.Reclaims", "*activities.ExperimentActivities"}

// activityRecorder is a worker.ActivityRegistry that records activity names.
type activityRecorder struct {
	byStruct map[string][]string
}

func (r *activityRecorder) RegisterDynamicActivity(any, activity.DynamicRegisterOptions) {}
func (r *activityRecorder) RegisterActivityWithOptions(a any, o activity.RegisterOptions) {
	r.add(reflect.TypeOf(a).String(), o.Name)
}

func (r *activityRecorder) RegisterActivity(a any) {
	t := reflect.TypeOf(a)
	for i := range t.NumMethod() {
		r.add(t.String(), t.Method(i).Name)
	}
}

func (r *activityRecorder) add(owner, name string) {
	r.byStruct[owner] = append(r.byStruct[owner], name)
}

// TestCrashCasesCoverEveryActivity enumerates the activities the service
// worker registers (activities.Register, which
// workflows.RegisterServiceWorker calls) and the simulated
// executor's run, and checks that each activity of the covered workflows
// has a crash case in crashSteps, and that crashSteps names no activity
// that is not registered.
func TestCrashCasesCoverEveryActivity(t *testing.T) {
	rec := &activityRecorder{byStruct: map[string][]string{}}
	activities.Register(rec, activities.Deps{}) // the activity half of workflows.RegisterServiceWorker
	workflows.RegisterSimExecutorWorker(rec, &executor.SimulatedExecutor{})
	var want []string
	for _, owner := range crashCovered {
		names := rec.byStruct[owner]
		if len(names) == 0 {
			t.Fatalf("no activities registered by %s (registered: %v)", owner, rec.byStruct)
		}
		want = append(want, names...)
	}
	// The job's run is registered by name on the simulated executor's worker.
	for _, names := range rec.byStruct {
		if slices.Contains(names, executor.RunActivityName) {
			want = append(want, executor.RunActivityName)
		}
	}
	for _, name := range want {
		if crashSteps[name] == "" {
			t.Errorf("activity %s has no crash case in crashSteps", name)
		}
	}
	for name := range crashSteps {
		if !slices.Contains(want, name) {
			t.Errorf("crashSteps names %s, which the covered workflows do not register", name)
		}
	}
	t.Logf("%d activities, each with a crash case", len(want))
}
