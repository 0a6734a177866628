package philly

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace"
)

func goodFiles() Files {
	return Files{Jobs: "testdata/jobs_good.csv", VCs: "testdata/vcs_good.csv", Recorded: "testdata/recorded_good.csv"}
}

// TestReadGood reads the small fixture and checks every converted field:
// times read as UTC wall clock, the epoch at the first submit's midnight,
// the pool and quotas from the VC sizes, requests by size, and the recorded
// waits joined to their rows (the unmatched one kept apart).
func TestReadGood(t *testing.T) {
	src, err := Read(goodFiles(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Jobs) != 5 || src.Nodes != 3 || src.GPUsPerNode != 8 || len(src.Recorded) != 3 {
		t.Fatalf("jobs %d, nodes %d, gpus/node %d, recorded %d", len(src.Jobs), src.Nodes, src.GPUsPerNode, len(src.Recorded))
	}
	if got := src.Jobs[0].Submit; !got.Equal(time.Date(2017, 10, 1, 10, 0, 5, 0, time.UTC)) || got.Location() != time.UTC {
		t.Errorf("submit %v, want 2017-10-01 10:00:05 UTC", got)
	}
	tr, err := src.Trace(trace.Options{Pool: "philly"})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC); !tr.Epoch.Equal(want) {
		t.Errorf("epoch %v, want %v", tr.Epoch, want)
	}
	if len(tr.Pool.Nodes) != 3 || len(tr.Pool.Nodes[2].GPUs) != 8 || tr.Pool.Name != "philly" || !tr.OwnProjects {
		t.Fatalf("pool %+v", tr.Pool.Name)
	}
	wantQ := []scheduling.Quota{{Project: "vca", Pool: "philly", NominalMilli: 8000}, {Project: "vcb", Pool: "philly", NominalMilli: 16000}}
	if len(tr.Quotas) != 2 || tr.Quotas[0] != wantQ[0] || tr.Quotas[1] != wantQ[1] {
		t.Errorf("quotas %+v, want %+v", tr.Quotas, wantQ)
	}
	type want struct {
		submit, run int64
		gpus        int
		topo        scheduling.Topology
		recorded    int64 // -1: none
	}
	wants := []want{
		{36005, 100, 1, scheduling.TopologyAny, -1},
		{36000, 3600, 4, scheduling.TopologySameNode, 30},
		{35940, 600, 8, scheduling.TopologySameNode, 600},
		{86400, 60, 16, scheduling.TopologyWholeNodes, -1}, // 12 GPUs rounded up to two whole nodes
		{86460, 30, 2, scheduling.TopologySameNode, -1},
	}
	for i, w := range wants {
		j := tr.Jobs[i]
		rec := int64(-1)
		if j.HasRecordedWait {
			rec = j.RecordedWait
		}
		if j.Submit != w.submit || j.RunSeconds != w.run || j.Spec.Request.GPUs != w.gpus || j.Spec.Request.Topology != w.topo ||
			rec != w.recorded || !j.Scheduled || j.Spec.Tier != Tier || j.Spec.Queue != "standard" || j.Spec.Project != src.Jobs[i].VC {
			t.Errorf("job %d: %+v, want %+v", i, j, w)
		}
	}
	if len(tr.RecordedElsewhere) != 1 || tr.RecordedElsewhere[0] != (trace.RecordedWait{Project: "", GPUs: 8, WaitS: 100}) {
		t.Errorf("recorded elsewhere %+v", tr.RecordedElsewhere)
	}
	if !strings.Contains(strings.Join(tr.Assumptions, "\n"), "1 jobs belong to VCs without a size") {
		t.Errorf("assumptions do not count the job of vcz:\n%s", strings.Join(tr.Assumptions, "\n"))
	}
}

// TestReadOptions checks the sizing options: fewer GPUs per node shrink the
// quotas and turn an 8-GPU job into whole nodes; a pool smaller than the
// VCs is refused, naming the option.
func TestReadOptions(t *testing.T) {
	src, err := Read(goodFiles(), Options{GPUsPerNode: 4, Nodes: 10})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := src.Trace(trace.Options{Pool: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Pool.Nodes) != 10 || tr.Quotas[1].NominalMilli != 8000 || tr.Jobs[2].Spec.Request.Topology != scheduling.TopologyWholeNodes {
		t.Errorf("nodes %d, quota of vcb %d, 8-GPU topology %s", len(tr.Pool.Nodes), tr.Quotas[1].NominalMilli, tr.Jobs[2].Spec.Request.Topology)
	}
	if _, err := Read(goodFiles(), Options{Nodes: 2}); err == nil || !strings.Contains(err.Error(), "nodes 2 is fewer than the 3 nodes") {
		t.Errorf("nodes 2: %v", err)
	}
	if _, err := Read(goodFiles(), Options{GPUsPerNode: -1}); err == nil || !strings.Contains(err.Error(), "GPUs per node -1") {
		t.Errorf("gpus per node -1: %v", err)
	}
}

// TestReadMalformed checks that each malformed fixture stops the read with
// "file:line: what is wrong", naming the column.
func TestReadMalformed(t *testing.T) {
	cases := []struct {
		files Files
		want  string
	}{
		{Files{Jobs: "testdata/jobs_bad_time.csv"}, `testdata/jobs_bad_time.csv:3: timestamp "2017-10-01 25:00:00" is not a time`},
		{Files{Jobs: "testdata/jobs_bad_duration.csv"}, "testdata/jobs_bad_duration.csv:2: duration 100.5 is not a whole number of seconds"},
		{Files{Jobs: "testdata/jobs_bad_gpus.csv"}, "testdata/jobs_bad_gpus.csv:2: num_gpus 0 is below 1"},
		{Files{Jobs: "testdata/jobs_bad_gputime.csv"}, "testdata/jobs_bad_gputime.csv:2: gpu_time 100.0 is not duration × num_gpus = 200"},
		{Files{Jobs: "testdata/jobs_bad_vc.csv"}, "testdata/jobs_bad_vc.csv:2: cluster is empty"},
		{Files{Jobs: "testdata/jobs_bad_fields.csv"}, "testdata/jobs_bad_fields.csv:2: 4 fields, want 5"},
		{Files{Jobs: "testdata/jobs_bad_header.csv"}, `testdata/jobs_bad_header.csv:1: header is "timestamp,duration,gpus,gpu_time,cluster"`},
		{Files{VCs: "testdata/vcs_dup.csv"}, `testdata/vcs_dup.csv:3: vc "vca" repeats the row of line 2`},
		{Files{VCs: "testdata/vcs_zero.csv"}, "testdata/vcs_zero.csv:2: node num 0 is below 1"},
		{Files{Recorded: "testdata/recorded_bad_delay.csv"}, "testdata/recorded_bad_delay.csv:2: queue_delay_seconds 31 is not first_start_time − submitted_time = 30"},
		{Files{Recorded: "testdata/recorded_bad_order.csv"}, "testdata/recorded_bad_order.csv:2: first_start_time 2017-10-01 09:00:30 is before submitted_time"},
	}
	for _, c := range cases {
		f := goodFiles()
		if c.files.Jobs != "" {
			f.Jobs = c.files.Jobs
		}
		if c.files.VCs != "" {
			f.VCs = c.files.VCs
		}
		if c.files.Recorded != "" {
			f.Recorded = c.files.Recorded
		}
		_, err := Read(f, Options{})
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want prefix %q", c.files, err, c.want)
		}
	}
}

// TestSkipInvalid checks that --skip-invalid drops and counts bad job rows.
func TestSkipInvalid(t *testing.T) {
	f := goodFiles()
	f.Jobs = "testdata/jobs_bad_time.csv"
	src, err := Read(f, Options{SkipInvalid: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Jobs) != 1 || src.Skipped.Count != 1 || !strings.HasPrefix(src.Skipped.Messages[0], "testdata/jobs_bad_time.csv:3: ") {
		t.Errorf("jobs %d, skipped %+v", len(src.Jobs), src.Skipped)
	}
}
