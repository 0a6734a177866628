package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

func TestMigrateUpFromEmptyDownAndUpAgain(t *testing.T) {
	t.Parallel()
	s, url := newStore(t)
	ctx := context.Background()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, store.Migrations(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	sources := p.ListSources()
	latest := sources[len(sources)-1].Version
	if n := queryInt(t, s, `SELECT max(version_id) FROM goose_db_version`); n != latest {
		t.Fatalf("schema version %d after migrate, want the latest embedded migration %d", n, latest)
	}
	applied, err := store.MigrateUp(ctx, url)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second migrate applied %v, err %v; want nothing", applied, err)
	}
	// Every Down section must undo its Up so that Up works again.
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`); n != 0 {
		t.Fatalf("%d tables left after down", n)
	}
	if applied, err := store.MigrateUp(ctx, url); err != nil || len(applied) != len(sources) {
		t.Fatalf("up again applied %v, err %v; want all %d", applied, err, len(sources))
	}
}

func TestOpenUnreachableNamesTheServer(t *testing.T) {
	t.Parallel()
	_, err := store.Open(context.Background(), "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2")
	if err == nil || !contains(err.Error(), "cannot reach PostgreSQL at 127.0.0.1:1/nowhere") {
		t.Fatalf("err = %v, want one naming the server", err)
	}
}

// TestMissingDatabaseIsNamedNotCreated: Open, Migrate and RequireDatabase on
// a URL whose database does not exist return a *store.MissingDatabaseError
// naming it (the password masked) and leave the server without it.
func TestMissingDatabaseIsNamedNotCreated(t *testing.T) {
	storetest.SkipShort(t)
	t.Parallel()
	ctx := context.Background()
	name := fmt.Sprintf("gpugov_missing_%d", time.Now().UnixNano())
	admin, err := pgx.ParseConfig(storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	// A password the server (trust auth) ignores, to see that it is masked.
	url := fmt.Sprintf("postgres://%s:s3cret@%s:%d/%s?sslmode=disable", admin.User, admin.Host, admin.Port, name)
	check := func(what string, err error) {
		t.Helper()
		var missing *store.MissingDatabaseError
		if !errors.As(err, &missing) || missing.Database != name {
			t.Fatalf("%s: err = %v, want a MissingDatabaseError for %s", what, err, name)
		}
		if msg := err.Error(); !contains(msg, "does not exist") || !contains(msg, "gpugov migrate --database-url") || contains(msg, "s3cret") {
			t.Fatalf("%s: %q", what, msg)
		}
	}
	_, err = store.Open(ctx, url)
	check("Open", err)
	check("Migrate", store.Migrate(ctx, url))
	check("RequireDatabase", store.RequireDatabase(ctx, url))
	check("RequireDatabase again", store.RequireDatabase(ctx, url)) // still missing: nothing created it
}

func contains(s, sub string) bool { return len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0) }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestCreateJobIdempotencyKey(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	nj := &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard, IdempotencyKey: "k1",
		Request:       scheduling.ResourceRequest{GPUs: 2, Pool: "p", GPUModels: []string{"A100-SXM4-80GB"}},
		Prerequisites: []scheduling.Prerequisite{{Name: "image", Ready: false, Message: "pulling"}},
		Command:       []string{"train.py", "--epochs", "3"}, Env: map[string]string{"SEED": "1"}, RunSeconds: 600,
		SubmitTime: t0}
	first, created, err := s.CreateJob(ctx, nj)
	if err != nil || !created {
		t.Fatalf("first create: created=%v err=%v", created, err)
	}
	again, created, err := s.CreateJob(ctx, nj)
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("retry: id %s created=%v err=%v; want %s, false", again.ID, created, err, first.ID)
	}
	if first.State != vocab.JobSubmitted || first.Request.GPUs != 2 || first.Command[2] != "3" ||
		first.Env["SEED"] != "1" || first.Prerequisites[0].Message != "pulling" || !first.SubmitTime.Equal(t0) {
		t.Fatalf("stored job differs from submission: %+v", first)
	}
	other := *nj
	other.Project = "nlp"
	if j, created, err := s.CreateJob(ctx, &other); err != nil || !created || j.ID == first.ID {
		t.Fatalf("same key in another project must create: created=%v err=%v", created, err)
	}
	noKey := *nj
	noKey.IdempotencyKey = ""
	a, _, _ := s.CreateJob(ctx, &noKey)
	b, _, _ := s.CreateJob(ctx, &noKey)
	if a.ID == b.ID {
		t.Fatal("jobs without a key must not be deduplicated")
	}
	audit, err := s.AuditFor(ctx, first.ID, 0)
	if err != nil || len(audit) != 1 || audit[0].Action != "submit" || audit[0].Actor != "vision" {
		t.Fatalf("audit of %s = %+v, %v; want one submit by vision", first.ID, audit, err)
	}

	// Racing submissions with one key create exactly one job.
	race := *nj
	race.IdempotencyKey = "race"
	var wg sync.WaitGroup
	ids := make([]string, 8)
	createdCount := make([]bool, 8)
	for i := range ids {
		wg.Go(func() {
			j, c, err := s.CreateJob(ctx, &race)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i], createdCount[i] = j.ID, c
		})
	}
	wg.Wait()
	n := 0
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("racing submissions got different jobs %s and %s", ids[0], ids[i])
		}
		if createdCount[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d racing submissions reported created, want 1", n)
	}
}

func TestCreateJobsBulkDeduplicates(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	existing, _, err := s.CreateJob(ctx, &store.NewJob{Project: "a", Queue: "q", IdempotencyKey: "x",
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(project, key string) *store.NewJob {
		return &store.NewJob{Project: project, Queue: "q", IdempotencyKey: key, Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}}
	}
	ids, err := s.CreateJobs(ctx, []*store.NewJob{mk("a", "x"), mk("a", "y"), mk("a", "y"), mk("b", "x"), mk("a", "")})
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != existing.ID || ids[1] != ids[2] || ids[3] == existing.ID || ids[4] == "" {
		t.Fatalf("ids %v: want [%s, y, y, new, new]", ids, existing.ID)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM jobs`); n != 4 {
		t.Fatalf("%d jobs stored, want 4", n)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM audit_log WHERE action = 'submit'`); n != 4 {
		t.Fatalf("%d submit audits, want 4", n)
	}
}

func TestApplyCycleIsIdempotentByCycleID(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 4)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	a := submit(t, s, "vision", "p", 2, 0)
	b := submit(t, s, "vision", "p", 1, 0)
	node := pool.Nodes[0]
	res := &scheduling.Result{PolicyVersion: "v1", At: t0,
		Placements: []scheduling.Placement{place(a.ID, "p", node.Name, 1000, node.GPUs[0].UUID, node.GPUs[1].UUID)},
		Waiting: []scheduling.WaitStatus{{JobID: b.ID, Reason: vocab.ReasonReservedForHigherPriority,
			Detail: "2 free GPUs reserved", BlockingJobID: a.ID, Rank: 2}},
		Preemptions: []scheduling.PreemptionProposal{{ForJobID: b.ID, Pool: "p", Act: false, Reason: "observe only"}},
	}
	first, err := s.ApplyCycle(ctx, "cycle-1", res, t0)
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed || len(first.Placed) != 1 || len(first.Conflicts) != 0 || first.WaitTransitions != 1 {
		t.Fatalf("first apply: %+v", first)
	}
	counts := func() [5]int64 {
		return [5]int64{
			queryInt(t, s, `SELECT count(*) FROM allocations`), queryInt(t, s, `SELECT count(*) FROM allocation_gpus`),
			queryInt(t, s, `SELECT count(*) FROM wait_events`), queryInt(t, s, `SELECT count(*) FROM decisions`),
			queryInt(t, s, `SELECT count(*) FROM audit_log`)}
	}
	before := counts()
	again, err := s.ApplyCycle(ctx, "cycle-1", res, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Placed[0].AllocationID != first.Placed[0].AllocationID || again.WaitTransitions != 1 {
		t.Fatalf("replay: %+v, want the stored outcome %+v", again, first)
	}
	if after := counts(); after != before {
		t.Fatalf("replay changed rows: %v -> %v", before, after)
	}
	job, _ := s.GetJob(ctx, a.ID)
	if job.State != vocab.JobPlaced || job.Explanation.Placed == nil || job.Explanation.Placed.Node != node.Name {
		t.Fatalf("placed job: %+v", job)
	}
	if n := queryInt(t, s, `SELECT used_milli FROM gpu_usage WHERE gpu_uuid = $1`, node.GPUs[0].UUID); n != 1000 {
		t.Fatalf("gpu_usage %d, want 1000", n)
	}
	if audits, _ := s.AuditFor(ctx, a.ID, 0); len(audits) != 2 || audits[1].Action != "place" || audits[1].Actor != vocab.ActorScheduler {
		t.Fatalf("audit of placed job: %+v", audits)
	}

	// Racing replays of a new cycle apply it once.
	c := submit(t, s, "vision", "p", 1, 0)
	res2 := &scheduling.Result{Placements: []scheduling.Placement{place(c.ID, "p", node.Name, 1000, node.GPUs[2].UUID)}}
	var wg sync.WaitGroup
	replays := make([]bool, 4)
	for i := range replays {
		wg.Go(func() {
			out, err := s.ApplyCycle(ctx, "cycle-2", res2, t0)
			if err != nil {
				t.Error(err)
				return
			}
			replays[i] = out.Replayed
		})
	}
	wg.Wait()
	fresh := 0
	for _, r := range replays {
		if !r {
			fresh++
		}
	}
	if fresh != 1 || queryInt(t, s, `SELECT count(*) FROM allocations WHERE job_id = $1`, c.ID) != 1 {
		t.Fatalf("concurrent same-ID cycles: %d applied, want 1", fresh)
	}
}

func TestWaitEventsOnlyOnTransitions(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	j := submit(t, s, "vision", "p", 1, 0)
	wait := func(cycle string, at time.Time, reason vocab.WaitReason, detail string, rank int) {
		t.Helper()
		_, err := s.ApplyCycle(ctx, cycle, &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: j.ID,
			Reason: reason, Detail: detail, Rank: rank, ReEvaluate: "when 1 GPU is free"}}}, at)
		if err != nil {
			t.Fatal(err)
		}
	}
	wait("c1", t0, vocab.ReasonCapacityBusy, "0 of 1 free", 3)
	wait("c2", t0.Add(time.Minute), vocab.ReasonCapacityBusy, "0 of 1 free", 2) // rank only: no transition
	events, err := s.JobWaitEvents(ctx, j.ID)
	if err != nil || len(events) != 1 || events[0].EndedAt != nil || events[0].NextAction == "" {
		t.Fatalf("after an unchanged cycle: %+v, %v; want one open event with a next action", events, err)
	}
	if job, _ := s.GetJob(ctx, j.ID); job.State != vocab.JobWaiting || job.Explanation.Rank != 2 ||
		job.Reason != vocab.ReasonCapacityBusy {
		t.Fatalf("explanation not refreshed: %+v", job)
	}
	wait("c3", t0.Add(2*time.Minute), vocab.ReasonCapacityBusy, "0 of 1 free; 1 releasing", 2) // detail changed: same event
	wait("c4", t0.Add(3*time.Minute), vocab.ReasonQuotaExhausted, "vision uses 8000 of 8000 milli", 2)
	events, _ = s.JobWaitEvents(ctx, j.ID)
	if len(events) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(events), events)
	}
	if events[0].EndedAt == nil || !events[0].EndedAt.Equal(t0.Add(3*time.Minute)) || !events[0].StartedAt.Equal(t0) ||
		events[0].Detail != "0 of 1 free; 1 releasing" {
		t.Fatalf("capacity_busy event %+v, want t0 to +3 min with the latest detail", events[0])
	}
	if events[1].EndedAt != nil || events[1].Reason != vocab.ReasonQuotaExhausted {
		t.Fatalf("current event %+v", events[1])
	}
	// The partial unique index refuses a second open event whoever writes it.
	_, err = s.Pool().Exec(ctx, `INSERT INTO wait_events (job_id, reason, started_at) VALUES ($1, 'held', now())`, j.ID)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "wait_events_one_open_per_job" {
		t.Fatalf("second open wait event: err %v, want a unique violation", err)
	}
	// A status for a job that is no longer pending writes nothing.
	gone := submit(t, s, "vision", "p", 1, 0)
	if err := s.CancelJob(ctx, gone.ID, "alice", "duplicate"); err != nil {
		t.Fatal(err)
	}
	stale, err := s.ApplyCycle(ctx, "c4b", &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: gone.ID,
		Reason: vocab.ReasonCapacityBusy}}}, t0.Add(4*time.Minute))
	if err != nil || stale.StaleWaits != 1 || stale.WaitTransitions != 0 {
		t.Fatalf("wait status of a cancelled job: %+v, %v", stale, err)
	}
	if got, _ := s.GetJob(ctx, gone.ID); got.State != vocab.JobCancelled || got.Reason != "" {
		t.Fatalf("cancelled job changed by a stale wait status: %+v", got)
	}
	// Placement closes the open event and carries the wait into accrued aging.
	out, err := s.ApplyCycle(ctx, "c5", &scheduling.Result{Placements: []scheduling.Placement{
		place(j.ID, "p", pool.Nodes[0].Name, 1000, pool.Nodes[0].GPUs[0].UUID)}}, t0.Add(5*time.Minute))
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place: %+v, %v", out, err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM wait_events WHERE job_id = $1 AND ended_at IS NULL`, j.ID); n != 0 {
		t.Fatalf("%d open events after placement", n)
	}
	if job, _ := s.GetJob(ctx, j.ID); job.AccruedAgingS != 300 || job.Reason != "" {
		t.Fatalf("accrued aging %v reason %q, want 300 s and none", job.AccruedAgingS, job.Reason)
	}
}

func TestPlacementConflictsAreReportedNotGranted(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 2)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	n := pool.Nodes[0]
	a, b, c := submit(t, s, "x", "p", 1, 600), submit(t, s, "x", "p", 1, 500), submit(t, s, "x", "p", 1, 400)
	held := submit(t, s, "x", "p", 1, 100)
	if _, err := s.SetHold(ctx, held.ID, true, "alice", "data not ready"); err != nil {
		t.Fatal(err)
	}
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{Placements: []scheduling.Placement{
		place(a.ID, "p", n.Name, 600, n.GPUs[0].UUID),
		place(b.ID, "p", n.Name, 500, n.GPUs[0].UUID), // 600 + 500 > 1000
		place(c.ID, "p", n.Name, 400, n.GPUs[0].UUID), // 600 + 400 fits exactly
		place(held.ID, "p", n.Name, 100, n.GPUs[1].UUID),
		place(a.ID, "p", n.Name, 100, n.GPUs[1].UUID), // same job twice
		place(b.ID, "p", n.Name, 500, "GPU-unknown"),
	}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Placed) != 2 || out.Placed[0].JobID != a.ID || out.Placed[1].JobID != c.ID {
		t.Fatalf("placed %+v, want a and c", out.Placed)
	}
	if len(out.Conflicts) != 4 || out.Conflicts[0].JobID != b.ID || out.Conflicts[1].JobID != held.ID {
		t.Fatalf("conflicts %+v", out.Conflicts)
	}
	if got := queryInt(t, s, `SELECT used_milli FROM gpu_usage WHERE gpu_uuid = $1`, n.GPUs[0].UUID); got != 1000 {
		t.Fatalf("GPU 0 usage %d, want exactly 1000", got)
	}
}

func TestBackstopRefusesOverGrantByAnyWriter(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	gpu := pool.Nodes[0].GPUs[0].UUID
	a, b := submit(t, s, "x", "p", 1, 0), submit(t, s, "x", "p", 1, 0)
	if _, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{Placements: []scheduling.Placement{
		place(a.ID, "p", pool.Nodes[0].Name, 1000, gpu)}}, t0); err != nil {
		t.Fatal(err)
	}
	// A "buggy writer" that skips the locking protocol still cannot grant the GPU twice.
	_, err := s.Pool().Exec(ctx, `
		WITH al AS (INSERT INTO allocations (id, job_id, pool, node, granted_at) VALUES ('a-bug', $1, 'p', $2, now()) RETURNING id)
		INSERT INTO allocation_gpus (allocation_id, gpu_uuid, milli) SELECT id, $3, 1 FROM al`,
		b.ID, pool.Nodes[0].Name, gpu)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "gpu_usage_used_milli_check" {
		t.Fatalf("over-grant by raw SQL: err %v, want the gpu_usage check violation", err)
	}
	// Nor grant a GPU that is not in the inventory.
	_, err = s.Pool().Exec(ctx, `
		WITH al AS (INSERT INTO allocations (id, job_id, pool, node, granted_at) VALUES ('a-bug', $1, 'p', 'n', now()) RETURNING id)
		INSERT INTO allocation_gpus (allocation_id, gpu_uuid, milli) SELECT id, 'GPU-ghost', 1 FROM al`, b.ID)
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		t.Fatalf("grant of unknown GPU: err %v, want a foreign key violation", err)
	}
}

func TestFinishRunReleasesCapacityOnce(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 2)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	n := pool.Nodes[0]
	a, b := submit(t, s, "vision", "p", 2, 0), submit(t, s, "nlp", "p", 1, 0)
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{Placements: []scheduling.Placement{
		place(a.ID, "p", n.Name, 1000, n.GPUs[0].UUID, n.GPUs[1].UUID)}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	alloc := out.Placed[0].AllocationID
	runID, err := s.MarkRunning(ctx, a.ID, alloc, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.MarkRunning(ctx, a.ID, alloc, 0, t0); err != nil || again != runID {
		t.Fatalf("MarkRunning retry: %s, %v; want %s", again, err, runID)
	}
	if _, err := s.MarkRunning(ctx, b.ID, alloc, 0, t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("MarkRunning on another job's allocation: %v, want ErrConflict", err)
	}
	busy, _ := s.ApplyCycle(ctx, "c2", &scheduling.Result{Placements: []scheduling.Placement{
		place(b.ID, "p", n.Name, 1000, n.GPUs[0].UUID)}}, t0)
	if len(busy.Conflicts) != 1 {
		t.Fatalf("placement on a busy GPU: %+v", busy)
	}
	end := t0.Add(time.Hour)
	if err := s.FinishRun(ctx, a.ID, runID, vocab.RunSucceeded, "exit 0", end); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, a.ID, runID, vocab.RunSucceeded, "exit 0", end.Add(time.Hour)); err != nil {
		t.Fatalf("FinishRun retry: %v", err)
	}
	if used := queryInt(t, s, `SELECT coalesce(sum(used_milli), 0) FROM gpu_usage`); used != 0 {
		t.Fatalf("gpu_usage %d after release, want 0", used)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM allocations WHERE released_at = $1`, end); n != 1 {
		t.Fatal("allocation not released at the run's end")
	}
	// 2 GPUs for 1 h, decayed with a 7-day half-life: 2·h/ln2·(1-2^(-1h/h)).
	h := store.DefaultUsageHalfLife.Seconds()
	want := 2 * h / math.Ln2 * (1 - math.Exp2(-3600/h))
	var usage float64
	if err := s.Pool().QueryRow(ctx, `SELECT decayed_gpu_seconds FROM project_usage WHERE project = 'vision'`).Scan(&usage); err != nil {
		t.Fatal(err)
	}
	if math.Abs(usage-want) > 1e-6 || want < 7180 || want > 7200 {
		t.Fatalf("usage %.4f GPU-s, want %.4f (charged once)", usage, want)
	}
	if job, _ := s.GetJob(ctx, a.ID); job.State != vocab.JobSucceeded {
		t.Fatalf("job state %s", job.State)
	}
	freed, err := s.ApplyCycle(ctx, "c3", &scheduling.Result{Placements: []scheduling.Placement{
		place(b.ID, "p", n.Name, 1000, n.GPUs[0].UUID)}}, end)
	if err != nil || len(freed.Placed) != 1 {
		t.Fatalf("placement after release: %+v, %v", freed, err)
	}
}

func TestPreemptedRunRequeuesKeepingAging(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	n := pool.Nodes[0]
	victim, winner := submit(t, s, "x", "p", 1, 0), submit(t, s, "y", "p", 1, 0)
	out, _ := s.ApplyCycle(ctx, "c1", &scheduling.Result{Placements: []scheduling.Placement{
		place(victim.ID, "p", n.Name, 1000, n.GPUs[0].UUID)}}, t0.Add(10*time.Minute))
	alloc := out.Placed[0].AllocationID
	run, err := s.MarkRunning(ctx, victim.ID, alloc, 0, t0.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cp := scheduling.Checkpoint{At: t0.Add(40 * time.Minute), Step: 300, Location: "s3://ckpt/300"}
	if err := s.RecordCheckpoint(ctx, victim.ID, run, cp); err != nil {
		t.Fatal(err)
	}
	// A late retry of an older checkpoint is answered stale and changes nothing.
	if err := s.RecordCheckpoint(ctx, victim.ID, run, scheduling.Checkpoint{At: t0.Add(20 * time.Minute), Step: 100}); !errors.Is(err, store.ErrStaleCheckpoint) {
		t.Fatalf("older checkpoint: %v, want it stale", err)
	}
	out, err = s.ApplyCycle(ctx, "c2", &scheduling.Result{
		Waiting: []scheduling.WaitStatus{{JobID: winner.ID, Reason: vocab.ReasonCapacityBusy, Detail: "0 free"}},
		Preemptions: []scheduling.PreemptionProposal{{ForJobID: winner.ID, Pool: "p", Node: n.Name, Act: true,
			Reason: "production job blocked", Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc, GPUs: 1}}}},
	}, t0.Add(time.Hour))
	if err != nil || len(out.Preemptions) != 1 {
		t.Fatalf("preemption not started: %+v, %v", out, err)
	}
	// The same proposal in the next cycle does not start a second preemption.
	out2, err := s.ApplyCycle(ctx, "c3", &scheduling.Result{Preemptions: []scheduling.PreemptionProposal{{ForJobID: winner.ID,
		Act: true, Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc}}}}}, t0.Add(time.Hour))
	if err != nil || len(out2.Preemptions) != 0 {
		t.Fatalf("second proposal: %+v, %v", out2, err)
	}
	snap, err := s.LoadSnapshot(ctx, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Pending[0].PreemptionInProgress; len(got) != 1 || got[0] != victim.ID {
		t.Fatalf("PreemptionInProgress %v", got)
	}
	if got := snap.Running[0].Recovery.LastCheckpoint; got == nil || got.Step != 300 || !got.At.Equal(cp.At) {
		t.Fatalf("running job checkpoint %+v, want step 300", got)
	}
	at := t0.Add(61 * time.Minute)
	if err := s.FinishRun(ctx, victim.ID, run, vocab.RunPreempted, "checkpointed at step 300", at); err != nil {
		t.Fatal(err)
	}
	job, _ := s.GetJob(ctx, victim.ID)
	if job.State != vocab.JobWaiting || !job.WaitingSince.Equal(at) || job.AccruedAgingS != 600 {
		t.Fatalf("requeued job: state %s since %v aging %v; want waiting since %v with 600 s", job.State,
			job.WaitingSince, job.AccruedAgingS, at)
	}
	if job.Recovery.LastCheckpoint == nil || job.Recovery.LastCheckpoint.Step != 300 {
		t.Fatalf("job recovery lost the checkpoint: %+v", job.Recovery)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM preemptions WHERE ended_at IS NULL`); n != 0 {
		t.Fatalf("%d preemptions still open after the victim's release", n)
	}
	// Next run resumes from the checkpoint; the snapshot reports the preemption for anti-thrash.
	preemptionID := out.Preemptions[0].PreemptionID
	out, _ = s.ApplyCycle(ctx, "c4", &scheduling.Result{Placements: []scheduling.Placement{
		place(victim.ID, "p", n.Name, 1000, n.GPUs[0].UUID)}}, at)
	run2, err := s.MarkRunning(ctx, victim.ID, out.Placed[0].AllocationID, 300, at)
	if err != nil {
		t.Fatal(err)
	}
	// The verify-resume step records the resume at the saved step, seen
	// progressing past it; a retry counts it once, for the job and as
	// evidence of its recovery profile.
	resumed, step := true, int64(300)
	for range 2 {
		if _, err := s.FinishPreemption(ctx, preemptionID, store.PreemptionResume{Outcome: vocab.PreemptionCompleted,
			ResumedRunID: run2, ResumedFromStep: &step, ResumedCorrectly: &resumed, Progressed: true, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	snap, _ = s.LoadSnapshot(ctx, at)
	rj := snap.Running[0]
	if len(rj.RecentPreemptions) != 1 || !rj.RecentPreemptions[0].Equal(at) || rj.Recovery.VerifiedResumes != 1 ||
		rj.Recovery.LastCheckpoint != nil || rj.Recovery.ProfileVerifiedResumes != 1 || rj.Recovery.ProfileFailedResumes != 0 {
		t.Fatalf("running after resume: %+v", rj)
	}
}

func TestCancelAndHold(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	waiting, running := submit(t, s, "x", "p", 1, 0), submit(t, s, "x", "p", 1, 0)
	out, _ := s.ApplyCycle(ctx, "c1", &scheduling.Result{
		Placements: []scheduling.Placement{place(running.ID, "p", pool.Nodes[0].Name, 1000, pool.Nodes[0].GPUs[0].UUID)},
		Waiting:    []scheduling.WaitStatus{{JobID: waiting.ID, Reason: vocab.ReasonCapacityBusy}}}, t0)
	// A repeated hold is idempotent (as Slurm's scontrol hold): it changes
	// nothing and says so, and its audit entry records changed=false.
	for i, want := range []bool{true, false} {
		changed, err := s.SetHold(ctx, waiting.ID, true, "alice", "dataset broken")
		if err != nil || changed != want {
			t.Fatalf("hold #%d: changed %v %v, want changed %v", i+1, changed, err, want)
		}
	}
	if _, err := s.SetHold(ctx, running.ID, true, "alice", "too late"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("hold on a placed job: %v, want ErrConflict", err)
	}
	if r, _ := s.GetJob(ctx, running.ID); r.Held {
		t.Fatal("a refused hold marked the placed job held")
	}
	for range 2 {
		if err := s.CancelJob(ctx, waiting.ID, "alice", "not needed"); err != nil {
			t.Fatal(err)
		}
		if err := s.CancelJob(ctx, running.ID, "bob", "wrong config"); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := s.GetJob(ctx, waiting.ID)
	r, _ := s.GetJob(ctx, running.ID)
	if w.State != vocab.JobCancelled || r.State != vocab.JobPlaced || !r.CancelRequested {
		t.Fatalf("after cancel: waiting %s, placed %s (requested %v)", w.State, r.State, r.CancelRequested)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM wait_events WHERE job_id = $1 AND ended_at IS NULL`, waiting.ID); n != 0 {
		t.Fatal("cancelled job kept an open wait event")
	}
	actions := map[string]int{}
	var holds []any
	for _, id := range []string{waiting.ID, running.ID} {
		entries, _ := s.AuditFor(ctx, id, 0)
		for _, e := range entries {
			actions[e.Action]++
			if e.Action == "hold" {
				holds = append(holds, e.Evidence["changed"])
			}
		}
	}
	if actions["hold"] != 2 || actions["cancel"] != 1 || actions["cancel_requested"] != 1 {
		t.Fatalf("audit actions %v, want two holds (one a no-op), one cancel and cancel_requested", actions)
	}
	if fmt.Sprint(holds) != "[true false]" {
		t.Fatalf("hold audit evidence changed = %v, want [true false] (the repeat changed nothing)", holds)
	}
	if _, err := s.SetHold(ctx, waiting.ID, false, "alice", ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("hold on a cancelled job: %v, want ErrConflict", err)
	}
	if err := s.ReleasePlacement(ctx, running.ID, out.Placed[0].AllocationID, vocab.RunCancelled, "cancelled", t0); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetJob(ctx, running.ID); r.State != vocab.JobCancelled {
		t.Fatalf("after release: %s", r.State)
	}
	if _, err := s.GetJob(ctx, "j-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob of unknown id: %v", err)
	}
	if err := s.CancelJob(ctx, "j-missing", "a", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CancelJob of unknown id: %v", err)
	}
}

// TestRequeueOfCancelRequestedJobCancels: a job cancelled while placed has
// only a cancel requested; when its placement is then released as requeued
// (SignalPlacements found no workflow to signal yet, so the workflow never
// heard of the cancel either), the job is cancelled, not put back to wait:
// waiting with a cancel requested, every cycle that placed it was refused
// ("job has a cancel requested") and it waited for good without a reason
// (found by `make load`, 2026-12-03).
func TestRequeueOfCancelRequestedJobCancels(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	j := submit(t, s, "x", "p", 1, 0)
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{
		Placements: []scheduling.Placement{place(j.ID, "p", pool.Nodes[0].Name, 1000, pool.Nodes[0].GPUs[0].UUID)}}, t0)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place: %+v %v", out, err)
	}
	if err := s.CancelJob(ctx, j.ID, "load", "a share is cancelled"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleasePlacement(ctx, j.ID, out.Placed[0].AllocationID, vocab.RunRequeued,
		"job workflow could not be signalled", t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetJob(ctx, j.ID)
	if got.State != vocab.JobCancelled {
		t.Fatalf("requeue of a job with a cancel requested: state %s, want cancelled", got.State)
	}
	// A requeue without a cancel requested still waits.
	k := submit(t, s, "x", "p", 1, 0)
	out, err = s.ApplyCycle(ctx, "c2", &scheduling.Result{
		Placements: []scheduling.Placement{place(k.ID, "p", pool.Nodes[0].Name, 1000, pool.Nodes[0].GPUs[0].UUID)}}, t0.Add(2*time.Second))
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place the second job: %+v %v", out, err)
	}
	if err := s.ReleasePlacement(ctx, k.ID, out.Placed[0].AllocationID, vocab.RunRequeued, "", t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetJob(ctx, k.ID); got.State != vocab.JobWaiting {
		t.Fatalf("plain requeue: state %s, want waiting", got.State)
	}
}

func TestListJobsFiltersAndPages(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	var want []string
	for i := range 7 {
		project := "a"
		if i%2 == 1 {
			project = "b"
		}
		j := submit(t, s, project, "p", 1, 0)
		if project == "a" {
			want = append(want, j.ID)
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		jobs, next, err := s.ListJobs(ctx, store.JobFilter{Project: "a", State: vocab.JobSubmitted, Limit: 3, AfterID: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if next == "" {
			break
		}
		if pages > 3 {
			t.Fatal("pagination does not end")
		}
		cursor = next
	}
	if len(got) != len(want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("listed %v, want %v", got, want)
		}
	}
	if jobs, _, _ := s.ListJobs(ctx, store.JobFilter{Reason: vocab.ReasonHeld}); len(jobs) != 0 {
		t.Fatalf("reason filter matched %d jobs", len(jobs))
	}
}

func TestPolicyVersions(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.ActivePolicyVersion(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no active version: %v", err)
	}
	for _, h := range []string{"h1", "h2"} {
		if err := s.SavePolicyVersion(ctx, h, []byte(`{"aging": {"cap": 3000}}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SavePolicyVersion(ctx, "h1", []byte(`{ "aging":{"cap":3000} }`)); err != nil {
		t.Fatalf("same body re-saved: %v", err)
	}
	if err := s.SavePolicyVersion(ctx, "h1", []byte(`{"aging": {"cap": 1}}`)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("changed body: %v, want ErrConflict", err)
	}
	for _, h := range []string{"h1", "h2", "h2"} {
		if err := s.ActivatePolicyVersion(ctx, h, "ops", "experiment"); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := s.ActivePolicyVersion(ctx); err != nil || p.Hash != "h2" {
		t.Fatalf("active %+v, %v", p, err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM audit_log WHERE action = 'activate_policy'`); n != 2 {
		t.Fatalf("%d activation audits, want 2", n)
	}
}
