package workflows_test

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/workflows"
)

// TestReplayRecordedHistories replays every history in testdata/ (recorded
// from real runs by `GPUGOV_RECORD_HISTORIES=1 go test -run OnDevServer
// ./workflows/`) against the current workflow code. A change that alters the
// commands a workflow issues for the same history — reordered activities, a
// signal sent differently, a new timer — fails here with a nondeterminism
// error, before it can break workflows that are running.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no recorded histories in testdata/; run %s=1 go test -run OnDevServer ./workflows/", recordEnv)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			workflows.RegisterServiceWorkflows(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(quietLogger(), f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
