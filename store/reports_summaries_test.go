package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/queuereport/reporttest"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// summaryEnv is a store with reporttest's pools (a node per GPU model in
// each, named <pool>-<model>) and queues.
func summaryEnv(t *testing.T) *store.Store {
	t.Helper()
	pools := storetest.ModelPools(reporttest.Pools, reporttest.Models, vocab.StageObserve, 4)
	var queues []scheduling.Queue
	for _, q := range reporttest.Queues {
		sq := scheduling.Queue{Name: q.Name, Tier: q.Tier}
		for _, tg := range reporttest.Targets {
			if tg.Queue == q.Name {
				sq.ServiceShare, sq.MaxWait = tg.ServiceShare, tg.MaxWait
			}
		}
		if sq.ServiceShare == 0 && sq.MaxWait == 0 && q.Name == "qd" {
			continue // a queue without a row: its jobs have no target
		}
		queues = append(queues, sq)
	}
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: pools, Queues: queues})
	return s
}

// insertRecords writes in's jobs, runs (an allocation each, on the node of
// the model its release names) and wait events as rows, as the store's
// methods leave them, with prefix before every ID.
func insertRecords(t *testing.T, s *store.Store, in queuereport.Input, prefix string) {
	t.Helper()
	for i := range in.Jobs {
		in.Jobs[i].ID = prefix + in.Jobs[i].ID
	}
	for i := range in.Runs {
		in.Runs[i].JobID = prefix + in.Runs[i].JobID
	}
	for i := range in.WaitEvents {
		in.WaitEvents[i].JobID = prefix + in.WaitEvents[i].JobID
	}
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql[:40], err)
		}
	}
	jobs := map[string]queuereport.Job{}
	for _, j := range in.Jobs {
		jobs[j.ID] = j
		req, _ := json.Marshal(map[string]any{"gpus": j.Request.GPUs, "gpu_milli": j.Request.GPUMilli,
			"gpu_models": j.Request.Models, "pool": j.Pool, "labels": map[string]string{store.JobTypeLabel: j.JobType}})
		exec(`INSERT INTO jobs (id, project, queue, tier, request, state, submit_time, waiting_since, updated_at, ended_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7::timestamptz, $7::timestamptz, coalesce($8::timestamptz, $7::timestamptz), $8::timestamptz)`,
			j.ID, j.Project, j.Queue, j.Tier.String(), req, j.State, j.SubmitTime, j.End)
	}
	number := map[string]int{}
	for i, r := range in.Runs {
		j := jobs[r.JobID]
		model := reporttest.Models[0]
		for _, rel := range in.Releases {
			if r.End != nil && rel.Pool == j.Pool && rel.At.Equal(*r.End) && rel.GPUMilli == r.GPUMilli {
				model = rel.Models[0]
			}
		}
		alloc, run := fmt.Sprintf("%sa-%04d", prefix, i), fmt.Sprintf("%sr-%04d", prefix, i)
		number[r.JobID]++
		exec(`INSERT INTO allocations (id, job_id, run_id, pool, node, granted_at, released_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			alloc, r.JobID, run, j.Pool, j.Pool+"-"+model, r.Start, r.End)
		exec(`INSERT INTO runs (id, job_id, run_number, allocation_id, started_at, ended_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			run, r.JobID, number[r.JobID], alloc, r.Start, r.End)
	}
	for _, e := range in.WaitEvents {
		exec(`INSERT INTO wait_events (job_id, reason, started_at, ended_at) VALUES ($1, $2, $3, $4)`, e.JobID, string(e.Reason), e.Start, e.End)
	}
}

// recordsReport is the report computed from every record of the window.
func recordsReport(t *testing.T, s *store.Store, o queuereport.Options) queuereport.Report {
	t.Helper()
	in, err := s.LoadReportInput(context.Background(), o.Window, o.Now)
	if err != nil {
		t.Fatal(err)
	}
	r, err := queuereport.Compute(*in, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func countRows(t *testing.T, s *store.Store, sql string) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestQueueReportFromSummariesEqualsRecords is the store's side of the
// summaries' contract: on random records spread over three days in the
// past, QueueReport (stored day and hour summaries merged with the window's
// ends computed from the records) gives exactly the report Compute gives on
// LoadReportInput's records, for windows aligned to days and hours or not,
// before and after late writes (records dated in summarised hours, an
// inventory change) that make stored summaries stale.
func TestQueueReportFromSummariesEqualsRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := summaryEnv(t)
	base := time.Now().UTC().Truncate(24 * time.Hour).Add(-5 * 24 * time.Hour)
	rng := rand.New(rand.NewPCG(6, 6))
	in := reporttest.RandomInput(rng, 400, base, 2*time.Minute) // submits over 2.8 days
	insertRecords(t, s, in, "")
	now := base.Add(4*24*time.Hour + 90*time.Minute)
	windows := []queuereport.Window{
		{From: base, To: now}, // everything: days, then hours, then the records
		{From: base.Add(7*time.Hour + 13*time.Minute), To: base.Add(50 * time.Hour)},  // unaligned ends
		{From: base.Add(24 * time.Hour), To: base.Add(48 * time.Hour)},                // one day
		{From: base.Add(30 * time.Hour), To: base.Add(30*time.Hour + 20*time.Minute)}, // within an hour
		{From: now.Add(-24 * time.Hour), To: now},                                     // the API's default window
	}
	check := func(stage string) {
		t.Helper()
		for _, w := range windows {
			for _, gb := range [][]string{nil, {queuereport.KeyQueue}, {}, {queuereport.KeyPool, queuereport.KeyTier}} {
				o := queuereport.Options{Window: w, Now: now, GroupBy: gb, StarvingLimit: queuereport.NoStarvingLimit}
				got, err := s.QueueReport(ctx, o, "")
				if err != nil {
					t.Fatalf("%s: %v", stage, err)
				}
				want := recordsReport(t, s, o)
				for _, d := range reporttest.DiffReports(t, want, got) {
					t.Errorf("%s, window %s – %s, group by %v: %s", stage, w.From.Format(time.RFC3339), w.To.Format(time.RFC3339), gb, d)
				}
				if t.Failed() {
					t.FailNow()
				}
			}
		}
	}
	check("first reports")
	if n := countRows(t, s, `SELECT count(*) FROM report_summaries WHERE kind = 'day'`); n < 3 {
		t.Fatalf("%d day summaries stored, want at least 3", n)
	}
	if r := recordsReport(t, s, queuereport.Options{Window: windows[0], Now: now}); r.Total.StarvingJobs == 0 || r.Total.JobsOverObjective == 0 ||
		r.Total.StuckJobs == 0 {
		t.Fatalf("the records make no starving job, none over its objective or none stuck: %+v", r.Total)
	}

	// Late writes: a second history in the summarised past, and a change of
	// an existing job, run and wait event.
	insertRecords(t, s, reporttest.RandomInput(rand.New(rand.NewPCG(7, 7)), 60, base.Add(20*time.Hour), time.Minute), "late-")
	if _, err := s.Pool().Exec(ctx, `UPDATE runs SET ended_at = started_at + interval '1 minute' WHERE id = 'r-0003'`); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM report_summary_stale`); n == 0 {
		t.Fatal("late writes left no stale mark")
	}
	check("after late writes")
	if n := countRows(t, s, `SELECT count(*) FROM report_summary_stale`); n != 0 {
		t.Errorf("%d stale marks left after the summaries were computed again", n)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE gpus SET model = 'B' WHERE node = 'p-A'`); err != nil {
		t.Fatal(err)
	}
	check("after an inventory change")
}

// TestQueueReportProjectScope checks a project's report: computed from that
// project's records only, it equals Compute over the whole input filtered to
// the project, and grouping by project (never summarised) equals the
// records' report.
func TestQueueReportProjectScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := summaryEnv(t)
	base := time.Now().UTC().Truncate(time.Hour).Add(-48 * time.Hour)
	in := reporttest.RandomInput(rand.New(rand.NewPCG(8, 8)), 150, base, time.Minute)
	insertRecords(t, s, in, "")
	now := base.Add(40 * time.Hour)
	o := queuereport.Options{Window: queuereport.Window{From: base, To: now}, Now: now}
	whole, err := s.LoadReportInput(ctx, o.Window, o.Now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.QueueReport(ctx, o, "vision")
	if err != nil {
		t.Fatal(err)
	}
	var own queuereport.Input
	own.Releases, own.Targets, own.Capacity = whole.Releases, whole.Targets, whole.Capacity
	keep := map[string]bool{}
	for _, j := range whole.Jobs {
		if j.Project == "vision" {
			keep[j.ID] = true
			own.Jobs = append(own.Jobs, j)
		}
	}
	for _, r := range whole.Runs {
		if keep[r.JobID] {
			own.Runs = append(own.Runs, r)
		}
	}
	for _, e := range whole.WaitEvents {
		if keep[e.JobID] {
			own.WaitEvents = append(own.WaitEvents, e)
		}
	}
	want, err := queuereport.Compute(own, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range reporttest.DiffReports(t, want, got) {
		t.Error("project vision:", d)
	}
	if got.Total.Jobs == 0 || got.Total.Jobs == want.Total.Jobs+1000 {
		t.Errorf("project report has %d jobs", got.Total.Jobs)
	}
	o.GroupBy = []string{queuereport.KeyProject, queuereport.KeyQueue}
	byProject, err := s.QueueReport(ctx, o, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range reporttest.DiffReports(t, recordsReport(t, s, o), byProject) {
		t.Error("group by project:", d)
	}
}
