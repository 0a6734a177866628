package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

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

// versionedHistories are the recorded histories that take the new branch of
// a workflow.GetVersion change (version 1): the file, the change ID and the
// workflow it is of. TestReplayVersionedBranches replays each and checks it
// still holds the change's marker, so that a re-recording which no longer
// reaches the branch fails instead of silently dropping its coverage.
var versionedHistories = []struct{ file, changeID string }{
	// JobWorkflow: a run lost after a cancel ends cancelled, not failed
	// (TestLostRunAfterCancelOnDevServer).
	{"job-cancelled-run-lost.json", "lost-run-stops"},
	// SchedulerWorkflow: the cycle that opened a preemption names its
	// workflow per preemption (TestPreemptionOnDevServer).
	{"scheduler-opened-preemption.json", "preemption-id-per-preemption"},
	// SchedulerWorkflow: placements signalled by the SignalPlacements
	// activity (TestEndToEndOnDevServer, TestPreemptionOnDevServer); the
	// *-external-signals.json histories keep the SignalExternalWorkflow branch.
	{"scheduler-continued-as-new.json", "placed-signals-by-activity"},
	{"scheduler-opened-preemption.json", "placed-signals-by-activity"},
	// SchedulerWorkflow of a shard other than "default", beside another
	// shard's (TestShardsOnDevServer).
	{"scheduler-shard-s2.json", "placed-signals-by-activity"},
}

// TestReplayVersionedBranches replays the histories of versionedHistories
// against the current workflow code and checks each records its change ID
// at version 1.
func TestReplayVersionedBranches(t *testing.T) {
	for _, v := range versionedHistories {
		t.Run(v.file, func(t *testing.T) {
			f := filepath.Join("testdata", v.file)
			h, err := client.HistoryFromJSON(mustOpen(t, f), client.HistoryJSONOptions{})
			if err != nil {
				t.Fatalf("read %s: %v", f, err)
			}
			if !hasVersionMarker(t, h, v.changeID, 1) {
				t.Fatalf("%s records no %q version 1 marker: it does not take the change's branch", f, v.changeID)
			}
			r := worker.NewWorkflowReplayer()
			workflows.RegisterServiceWorkflows(r)
			if err := r.ReplayWorkflowHistory(quietLogger(), h); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

// mustOpen opens path for reading until the test ends.
func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// hasVersionMarker reports whether h records workflow.GetVersion's marker
// (MarkerRecorded "Version", details change-id and version) for changeID at
// version want.
func hasVersionMarker(t *testing.T, h *historypb.History, changeID string, want workflow.Version) bool {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	for _, e := range h.GetEvents() {
		m := e.GetMarkerRecordedEventAttributes()
		if m == nil || m.GetMarkerName() != "Version" {
			continue
		}
		var id string
		var v workflow.Version
		d := m.GetDetails()
		if err := dc.FromPayloads(d["change-id"], &id); err != nil {
			t.Fatalf("version marker change-id: %v", err)
		}
		if err := dc.FromPayloads(d["version"], &v); err != nil {
			t.Fatalf("version marker version: %v", err)
		}
		if id == changeID && v == want {
			return true
		}
	}
	return false
}
