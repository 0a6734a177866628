package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/queuereport/reporttest"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// reportFixture is queuereport's hand-computed fixture (reporttest): the
// endpoint must give the same report from the same records stored in
// PostgreSQL.
type reportFixture = reporttest.Fixture

// fixtureStates maps the fixture's state labels to stored job states.
var fixtureStates = map[string]vocab.JobState{
	"completed": vocab.JobSucceeded, "pending": vocab.JobWaiting,
	"running": vocab.JobRunning, "cancelled": vocab.JobCancelled,
}

// loadReportFixture reads the fixture with its state labels replaced by the
// stored states, so that the pure computation and the database agree on
// what State holds.
func loadReportFixture(t *testing.T) reportFixture {
	t.Helper()
	f := reporttest.LoadFixture(t)
	for i := range f.Input.Jobs {
		st, ok := fixtureStates[f.Input.Jobs[i].State]
		if !ok {
			t.Fatalf("fixture job %s: state %q has no stored equivalent", f.Input.Jobs[i].ID, f.Input.Jobs[i].State)
		}
		f.Input.Jobs[i].State = string(st)
	}
	return f
}

// newReportEnv is an API server on a fresh database holding the fixture's
// records, written as the store writes them: jobs (with ended_at), one
// allocation per run on a node whose GPU model is the one the fixture's
// release of that run names, and wait events. Its clock is the fixture's now.
func newReportEnv(t *testing.T, f reportFixture) *testEnv {
	t.Helper()
	var queues []scheduling.Queue
	for _, q := range f.Input.Targets {
		queues = append(queues, scheduling.Queue{Name: q.Queue, Tier: vocab.TierStandard, ServiceShare: q.ServiceShare, MaxWait: q.MaxWait,
			MinShare: q.MinShare, MaxShare: q.MaxShare})
	}
	st, dbURL := storetest.NewStore(t, storetest.Fixture{Pools: fixturePools(), Queues: queues})
	storeFixtureRecords(t, st, f.Input)
	wf := &recordingWorkflows{}
	srv := New(StoreFrom(st), wf, testTokens(t), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	srv.now = func() time.Time { return f.Options.Now }
	return &testEnv{t: t, url: dbURL, store: st, wf: wf, server: srv}
}

// fixturePools holds, per fixture pool and GPU model, one node of four GPUs
// named <pool>-<model>.
func fixturePools() []scheduling.Pool {
	return storetest.ModelPools([]string{"p1", "p2"}, []string{"A100", "H100"}, vocab.StageObserve, 4)
}

// storeFixtureRecords inserts the fixture's jobs, runs (as allocations with
// their GPUs, and runs) and wait events.
func storeFixtureRecords(t *testing.T, st *store.Store, in queuereport.Input) {
	t.Helper()
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", strings.Fields(sql)[2], err)
		}
	}
	jobs := map[string]queuereport.Job{}
	for _, j := range in.Jobs {
		jobs[j.ID] = j
		req, _ := json.Marshal(map[string]any{"gpus": j.Request.GPUs, "gpu_milli": j.Request.GPUMilli,
			"gpu_models": j.Request.Models, "pool": j.Pool, "labels": map[string]string{store.JobTypeLabel: j.JobType}})
		updated := j.SubmitTime
		if j.End != nil {
			updated = *j.End
		}
		exec(`INSERT INTO jobs (id, project, queue, tier, request, state, submit_time, waiting_since, updated_at, ended_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9)`,
			j.ID, j.Project, j.Queue, j.Tier.String(), req, j.State, j.SubmitTime, updated, j.End)
	}
	nextGPU := map[string]int{} // per node: the next GPU for a run still holding its GPUs
	runNumber := map[string]int{}
	for i, r := range in.Runs {
		j := jobs[r.JobID]
		node := j.Pool + "-" + releaseModel(in.Releases, j.Pool, r.End)
		alloc, run := fmt.Sprintf("a-%02d", i), fmt.Sprintf("r-%02d", i)
		runNumber[r.JobID]++
		exec(`INSERT INTO allocations (id, job_id, run_id, pool, node, granted_at, released_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			alloc, r.JobID, run, j.Pool, node, r.Start, r.End)
		for g := range j.Request.GPUs {
			gpu := fmt.Sprintf("GPU-%s-%d", node, g)
			if r.End == nil {
				gpu = fmt.Sprintf("GPU-%s-%d", node, nextGPU[node])
				nextGPU[node]++
			}
			exec(`INSERT INTO allocation_gpus (allocation_id, gpu_uuid, ord, milli, active) VALUES ($1, $2, $3, $4, $5)`,
				alloc, gpu, g, j.Request.DemandMilli()/int64(j.Request.GPUs), r.End == nil)
		}
		exec(`INSERT INTO runs (id, job_id, run_number, allocation_id, started_at, ended_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			run, r.JobID, runNumber[r.JobID], alloc, r.Start, r.End)
	}
	for _, e := range in.WaitEvents {
		exec(`INSERT INTO wait_events (job_id, reason, started_at, ended_at) VALUES ($1, $2, $3, $4)`,
			e.JobID, string(e.Reason), e.Start, e.End)
	}
}

// releaseModel returns the model of the fixture release of pool at end, the
// GPUs the run ending then freed; A100 for a run still running.
func releaseModel(releases []queuereport.Release, pool string, end *time.Time) string {
	for _, r := range releases {
		if end != nil && r.Pool == pool && r.At.Equal(*end) && len(r.Models) == 1 {
			return r.Models[0]
		}
	}
	return "A100"
}

// getJSON calls a report route and decodes the 200 answer into v.
func (e *testEnv) getJSON(path, token string, v any) {
	e.t.Helper()
	r := e.do(http.MethodGet, path, token, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	r.decode(e.t, v)
}

// fixtureQuery is the fixture's window as from/to parameters.
func fixtureQuery(f reportFixture) string {
	return "from=" + url.QueryEscape(f.Options.Window.From.Format(time.RFC3339)) +
		"&to=" + url.QueryEscape(f.Options.Window.To.Format(time.RFC3339))
}

// TestQueueReportEqualsPureComputation is the equality test: the
// fixture's records stored in PostgreSQL and read through GET
// /v1/reports/queues give exactly (1e-9 relative) the report that
// queuereport.Compute gives on the fixture in memory, and the fixture's
// hand-computed expectation. The database path drops J0 (ended before the
// window) and the release before the window; the numbers must not move.
func TestQueueReportEqualsPureComputation(t *testing.T) {
	t.Parallel()
	f := loadReportFixture(t)
	env := newReportEnv(t, f)
	var got any
	env.getJSON("/v1/reports/queues?"+fixtureQuery(f), tokOps, &got)

	pure, err := queuereport.Compute(f.Input, f.Options)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range reporttest.Diff("report", reporttest.AsJSON(t, pure), got) {
		t.Error("endpoint vs Compute:", d)
	}
	var expected map[string]any
	if err := json.Unmarshal(f.Expected, &expected); err != nil {
		t.Fatal(err)
	}
	for _, sj := range expected["starving"].([]any) { // the expectation writes the fixture's own labels
		m := sj.(map[string]any)
		m["state"] = string(fixtureStates[m["state"].(string)])
	}
	for _, d := range reporttest.Diff("report", expected, got) {
		t.Error("endpoint vs fixture expectation:", d)
	}
	if len(pure.Groups) != 4 || pure.Total.Jobs != 10 || len(pure.Starving) != 1 {
		t.Fatalf("fixture report has %d groups, %d jobs, %d starving: the fixture changed", len(pure.Groups), pure.Total.Jobs, len(pure.Starving))
	}
}

// TestReportViewsAndComparison checks that the wait-reason view (with its
// reason shares per pool), the starvation view and the comparison carry the
// report's own numbers.
func TestReportViewsAndComparison(t *testing.T) {
	t.Parallel()
	f := loadReportFixture(t)
	env := newReportEnv(t, f)
	pure, err := queuereport.Compute(f.Input, queuereport.Options{Window: f.Options.Window, Now: f.Options.Now, GroupBy: []string{"queue"}})
	if err != nil {
		t.Fatal(err)
	}
	q := fixtureQuery(f) + "&group_by=queue"

	var reasons WaitReasonReport
	env.getJSON("/v1/reports/wait-reasons?"+q, tokOps, &reasons)
	if len(reasons.Groups) != 2 || fmt.Sprint(reasons.Total.WaitReasonSeconds) != fmt.Sprint(pure.Total.WaitReasonSeconds) ||
		fmt.Sprint(reasons.Groups[1].WaitReasonSeconds) != fmt.Sprint(pure.Groups[1].WaitReasonSeconds) ||
		reasons.Total.StillWaiting != pure.Total.StillWaiting {
		t.Errorf("wait reasons %+v, want the report's %+v", reasons, pure.Total.WaitReasonSeconds)
	}
	var sum float64
	for _, v := range pure.Total.WaitReasonSeconds {
		sum += v
	}
	if reasons.Total.TotalSeconds != sum || fmt.Sprint(reasons.GroupBy) != "[queue]" {
		t.Errorf("total seconds %v, want %v; group_by %v", reasons.Total.TotalSeconds, sum, reasons.GroupBy)
	}
	// The reason shares are per pool though the report is grouped by queue.
	for _, d := range reporttest.Diff("reason_shares", reporttest.AsJSON(t, pure.ReasonShares), reporttest.AsJSON(t, reasons.ReasonShares)) {
		t.Error("wait-reasons view:", d)
	}
	if len(reasons.ReasonShares) != 2 || reasons.ReasonShares[0].Verdict != "pool p1: main problem is fragmentation and spec — 66.7% of waiting GPU-seconds (fragmented 66.7%)" {
		t.Errorf("reason shares %+v", reasons.ReasonShares)
	}

	var starv StarvationReport
	env.getJSON("/v1/reports/starvation?"+q, tokOps, &starv)
	if len(starv.Starving) != 1 || starv.Starving[0].JobID != "J3" || starv.Total.StarvingJobs != pure.Total.StarvingJobs ||
		starv.Groups[0].OvertakenJobs != pure.Groups[0].OvertakenJobs || starv.StarvationReleases != queuereport.DefaultStarvationReleases {
		t.Errorf("starvation %+v", starv)
	}

	var cmp queuereport.Comparison
	w := f.Options.Window.From.Format(time.RFC3339) + "," + f.Options.Window.To.Format(time.RFC3339)
	earlier := f.Options.Window.From.Add(-10*time.Hour).Format(time.RFC3339) + "," + f.Options.Window.From.Format(time.RFC3339)
	env.getJSON("/v1/reports/compare?before="+url.QueryEscape(earlier)+"&after="+url.QueryEscape(w)+"&group_by=queue", tokOps, &cmp)
	if len(cmp.DefinitionMismatches) != 0 || len(cmp.Groups) != 2 || !cmp.After.From.Equal(f.Options.Window.From) {
		t.Fatalf("comparison %+v", cmp)
	}
	for _, m := range cmp.Total.Metrics {
		if m.Metric == "jobs" && (*m.Before != 2 || *m.After != 10 || *m.Delta != 8) { // J0 and J1 were there before
			t.Errorf("jobs metric %v → %v (Δ %v), want 2 → 10", *m.Before, *m.After, *m.Delta)
		}
	}
}

// TestReportSubmitterSeesOwnProject checks the project scope: a submitter's
// report is computed over its project's records only; an operator may ask
// for one project; a submitter may not ask for another's.
func TestReportSubmitterSeesOwnProject(t *testing.T) {
	t.Parallel()
	f := loadReportFixture(t)
	env := newReportEnv(t, f)
	for _, c := range []struct {
		token, query, project string
	}{{tokAlice, "", "vision"}, {tokOps, "&project=search", "search"}} {
		var got any
		env.getJSON("/v1/reports/queues?"+fixtureQuery(f)+c.query, c.token, &got)
		want, err := queuereport.Compute(*filterReportInput(&f.Input, c.project), f.Options)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range reporttest.Diff("report", reporttest.AsJSON(t, want), got) {
			t.Errorf("%s %s: %s", c.token, c.query, d)
		}
		if want.Total.Jobs == 0 || want.Total.Jobs >= 10 {
			t.Errorf("%s: the %s report has %d of the fixture's 10 jobs", c.token, c.project, want.Total.Jobs)
		}
	}
	if r := env.do(http.MethodGet, "/v1/reports/queues?project=vision", tokBob, nil); r.status != http.StatusForbidden {
		t.Errorf("submitter of speech asking for vision: %d %s", r.status, r.body)
	}
	if r := env.do(http.MethodGet, "/v1/reports/queues", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("no token: %d", r.status)
	}
}

// TestReportDefaultWindow checks that without from and to the report covers
// the 24 hours before now.
func TestReportDefaultWindow(t *testing.T) {
	t.Parallel()
	f := loadReportFixture(t)
	env := newReportEnv(t, f)
	var r queuereport.Report
	env.getJSON("/v1/reports/queues?group_by=", tokAlice, &r)
	now := f.Options.Now
	if !r.Options.Window.To.Equal(now) || !r.Options.Window.From.Equal(now.Add(-DefaultReportWindow)) ||
		len(r.Groups) != 0 || r.Total.Jobs == 0 {
		t.Errorf("default window %+v, %d groups, %d jobs", r.Options.Window, len(r.Groups), r.Total.Jobs)
	}
	env.getJSON("/v1/reports/queues?to=2026-01-05T06:00:00Z&group_by=project,queue", tokOps, &r)
	if !r.Options.Window.From.Equal(time.Date(2026, 1, 4, 6, 0, 0, 0, time.UTC)) || fmt.Sprint(r.Options.GroupBy) != "[queue project]" {
		t.Errorf("window from to-24h: %+v, group_by %v", r.Options.Window, r.Options.GroupBy)
	}
}

// TestReportBadParameters checks every bad parameter answers 400 malformed
// naming it, before the store is read.
func TestReportBadParameters(t *testing.T) {
	t.Parallel()
	f := loadReportFixture(t)
	env := newReportEnv(t, f)
	for _, c := range []struct{ path, field string }{
		{"/v1/reports/queues?group_by=queue,colour", "group_by"},
		{"/v1/reports/queues?group_by=queue,queue", "group_by"},
		{"/v1/reports/queues?from=yesterday", "from"},
		{"/v1/reports/queues?to=2026-13-01T00:00:00Z", "to"},
		{"/v1/reports/wait-reasons?from=2026-01-05T06:00:00Z&to=2026-01-05T05:00:00Z", "to"},
		{"/v1/reports/starvation?from=2025-09-01T00:00:00Z&to=2026-01-05T00:00:00Z", "from"},
		{"/v1/reports/queues?from=2026-01-06T00:00:00Z&to=2026-01-07T00:00:00Z", "from"},
		{"/v1/reports/compare?after=2026-01-05T00:00:00Z,2026-01-05T06:00:00Z", "before"},
		{"/v1/reports/compare?before=2026-01-04T00:00:00Z,2026-01-04T06:00:00Z&after=2026-01-05T00:00:00Z", "after"},
		{"/v1/reports/compare?before=2026-01-04T00:00:00Z,2026-01-03T06:00:00Z&after=2026-01-05T00:00:00Z,2026-01-05T06:00:00Z", "before"},
		{"/v1/reports/compare?before=2026-01-04T00:00:00Z,2026-01-04T06:00:00Z&after=2026-01-05T00:00:00Z,2026-01-05T06:00:00Z&group_by=tier,x", "group_by"},
	} {
		r := env.do(http.MethodGet, c.path, tokOps, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.path, r.status, r.body)
			continue
		}
		if e := r.apiError(t); e.Code != CodeMalformed || e.Field != c.field {
			t.Errorf("%s: error %+v, want malformed on %s", c.path, e, c.field)
		}
	}
	// A window too long for time.Duration is named by its ends, not by a
	// saturated duration ("the window is 2562047h47m16.854775807s long").
	r := env.do(http.MethodGet, "/v1/reports/queues?from=0001-01-01T00:00:00Z&to=2026-01-05T00:00:00Z", tokOps, nil)
	if want := "the window from 0001-01-01T00:00:00Z to 2026-01-05T00:00:00Z is longer than 90 days (at most 90 days may be read at once)"; r.status != http.StatusBadRequest ||
		r.apiError(t).Message != want {
		t.Errorf("year-1 window: %d %s, want 400 %q", r.status, r.body, want)
	}
}

// A bad RFC 3339 time in a query parameter is the same 400 malformed on
// every route: it was 400 on /v1/reports/queues?from= and 422 on
// /v1/audit?since=.
func TestQueryTimeErrorsAreOneCode(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, c := range []struct{ path, field string }{
		{"/v1/reports/queues?from=yesterday", "from"},
		{"/v1/audit?since=yesterday", "since"},
		{"/v1/audit?until=2026-13-01T00:00:00Z", "until"},
	} {
		r := e.do(http.MethodGet, c.path, tokOps, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.path, r.status, r.body)
			continue
		}
		if b := r.apiError(t); b.Code != CodeMalformed || b.Field != c.field || !strings.Contains(b.Message, "not an RFC 3339 time") {
			t.Errorf("%s: %+v, want malformed on %s", c.path, b, c.field)
		}
	}
}

// filterReportInput returns the records of project's jobs: its jobs, their
// runs and wait events; releases and queue targets are kept whole, since they
// name no job. in is not changed. It is the test's definition of a project's
// report, which the store computes from the project's records alone
// (store.LoadProjectReportInput reads the same records).
func filterReportInput(in *queuereport.Input, project string) *queuereport.Input {
	out := &queuereport.Input{Releases: in.Releases, Targets: in.Targets, Capacity: in.Capacity, ProjectWeights: in.ProjectWeights}
	keep := map[string]bool{}
	for _, j := range in.Jobs {
		if j.Project == project {
			keep[j.ID] = true
			out.Jobs = append(out.Jobs, j)
		}
	}
	for _, r := range in.Runs {
		if keep[r.JobID] {
			out.Runs = append(out.Runs, r)
		}
	}
	for _, e := range in.WaitEvents {
		if keep[e.JobID] {
			out.WaitEvents = append(out.WaitEvents, e)
		}
	}
	return out
}

// TestQueueReportWaitHistogram checks ?wait_histogram=true: every group
// carries every bin of queuereport.WaitHistogramEdges, the counts of a group
// add up to its wait samples (started) and match queuereport.Compute with
// the option, the bins hold the group's P50 and maximum where they fall; without
// the option no group carries one, and a bad value is 400 naming it.
func TestQueueReportWaitHistogram(t *testing.T) {
	t.Parallel()
	f := loadReportFixture(t)
	env := newReportEnv(t, f)
	var got queuereport.Report
	env.getJSON("/v1/reports/queues?"+fixtureQuery(f)+"&wait_histogram=true", tokOps, &got)
	opts := f.Options
	opts.WaitHistogram = true
	pure, err := queuereport.Compute(f.Input, opts)
	if err != nil {
		t.Fatal(err)
	}
	groups := append([]queuereport.Group{got.Total}, got.Groups...)
	pureGroups := append([]queuereport.Group{pure.Total}, pure.Groups...)
	if len(groups) != len(pureGroups) {
		t.Fatalf("%d groups, Compute %d", len(groups), len(pureGroups))
	}
	sampled := 0
	for i, g := range groups {
		if len(g.WaitHistogram) != len(queuereport.WaitHistogramEdges) {
			t.Fatalf("group %v: %d bins, want %d", g.Key, len(g.WaitHistogram), len(queuereport.WaitHistogramEdges))
		}
		n := 0
		for b, bin := range g.WaitHistogram {
			n += bin.Count
			if bin.Count != pureGroups[i].WaitHistogram[b].Count {
				t.Errorf("group %v bin %d: %d, Compute %d", g.Key, b, bin.Count, pureGroups[i].WaitHistogram[b].Count)
			}
		}
		if n != g.Started {
			t.Errorf("group %v: bins count %d waits, started %d", g.Key, n, g.Started)
		}
		if g.WaitMaxS != nil {
			sampled++
			last := -1
			for b, bin := range g.WaitHistogram {
				if bin.Count > 0 {
					last = b
				}
			}
			bin := g.WaitHistogram[last]
			if *g.WaitMaxS < bin.LowS || (bin.HighS != nil && *g.WaitMaxS >= *bin.HighS) {
				t.Errorf("group %v: max wait %g s is not in the last non-empty bin [%g, %v)", g.Key, *g.WaitMaxS, bin.LowS, bin.HighS)
			}
		}
	}
	if sampled == 0 {
		t.Fatal("no group has wait samples: the fixture changed")
	}
	var plain queuereport.Report
	env.getJSON("/v1/reports/queues?"+fixtureQuery(f), tokOps, &plain)
	if plain.Total.WaitHistogram != nil {
		t.Error("histogram without ?wait_histogram=true")
	}
	r := env.do(http.MethodGet, "/v1/reports/queues?wait_histogram=yes", tokOps, nil)
	if e := r.apiError(t); r.status != http.StatusBadRequest || e.Field != "wait_histogram" {
		t.Errorf("wait_histogram=yes: %d %+v, want 400 on wait_histogram", r.status, e)
	}
}
