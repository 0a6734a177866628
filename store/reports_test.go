package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// reportEnv is a store on a fresh database with pool "p": node p-a100 with
// two A100s and node p-h100 with one H100, and queue "train".
func reportEnv(t *testing.T) *store.Store {
	t.Helper()
	gpu := func(uuid, model string) scheduling.GPU {
		return scheduling.GPU{UUID: uuid, Model: model, MemoryMiB: 81920, Healthy: true}
	}
	pool := scheduling.Pool{Name: "p", Available: true, Stage: vocab.StageAutomate, Nodes: []scheduling.Node{
		{Name: "p-a100", Schedulable: true, GPUs: []scheduling.GPU{gpu("GPU-a0", "A100"), gpu("GPU-a1", "A100")}},
		{Name: "p-h100", Schedulable: true, GPUs: []scheduling.GPU{gpu("GPU-h0", "H100")}},
	}}
	q := scheduling.Queue{Name: "train", Tier: vocab.TierStandard, ServiceShare: 2, MaxWait: 90 * time.Minute}
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{pool}, Queues: []scheduling.Queue{q}})
	return s
}

// reportFlow drives jobs through the store's own methods, as the scheduler
// and job workflows do, so that the test sees what they write.
type reportFlow struct {
	t     *testing.T
	s     *store.Store
	cycle int
}

func (f *reportFlow) submit(at time.Time, gpus int, jobType string) string {
	f.t.Helper()
	j, _, err := f.s.CreateJob(context.Background(), &store.NewJob{
		Project: "vision", Queue: "train", Tier: vocab.TierStandard, SubmitTime: at,
		Request: scheduling.ResourceRequest{GPUs: gpus, Pool: "p", Labels: map[string]string{store.JobTypeLabel: jobType}},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return j.ID
}

// apply stores one scheduling cycle at at: the job waits for reason, or is
// placed on node with GPUs uuids when reason is empty. It returns the
// allocation of a placement.
func (f *reportFlow) apply(at time.Time, job string, reason vocab.WaitReason, node string, uuids ...string) string {
	f.t.Helper()
	f.cycle++
	res := &scheduling.Result{At: at}
	if reason != "" {
		res.Waiting = []scheduling.WaitStatus{{JobID: job, Reason: reason, Detail: "test", Rank: 1}}
	} else {
		p := scheduling.Placement{JobID: job, Pool: "p", Node: node, Rank: 1}
		for _, u := range uuids {
			p.GPUs = append(p.GPUs, scheduling.GPUShare{UUID: u, Milli: scheduling.MilliPerGPU})
		}
		res.Placements = []scheduling.Placement{p}
	}
	out, err := f.s.ApplyCycle(context.Background(), fmt.Sprintf("report-c%d", f.cycle), res, at)
	if err != nil {
		f.t.Fatal(err)
	}
	if reason == "" {
		if len(out.Placed) != 1 {
			f.t.Fatalf("placement of %s refused: %+v", job, out.Conflicts)
		}
		return out.Placed[0].AllocationID
	}
	return ""
}

// run marks the placed job running on alloc at start and, unless end is
// zero, finishes the run at end with outcome.
func (f *reportFlow) run(job, alloc string, start, end time.Time, outcome vocab.RunOutcome) {
	f.t.Helper()
	ctx := context.Background()
	runID, err := f.s.MarkRunning(ctx, job, alloc, 0, start)
	if err != nil {
		f.t.Fatal(err)
	}
	if !end.IsZero() {
		if err := f.s.FinishRun(ctx, job, runID, outcome, "test", end); err != nil {
			f.t.Fatal(err)
		}
	}
}

// TestLoadReportInputFromStoreFlows checks what LoadReportInput reads from
// rows the store's own methods wrote: job ends (jobs.ended_at, kept by the
// trigger of migration 00060), every run of a job, cancellation while
// waiting, wait events in the window, releases with their node's models, and
// that a job which ended before the window is left out. CancelJob stamps the
// wall clock, so the history is laid out in the hours before now.
func TestLoadReportInputFromStoreFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reportEnv(t)
	f := &reportFlow{t: t, s: s}
	base := time.Now().UTC().Truncate(time.Minute).Add(-6 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }

	// old ran and ended before the window, which starts at base+60m.
	old := f.submit(at(0), 1, "batch")
	f.run(old, f.apply(at(1), old, "", "p-a100", "GPU-a0"), at(2), at(30), vocab.RunSucceeded)

	// a waits (capacity_busy), runs, is preempted, waits (quota_exhausted),
	// runs again on the H100 and succeeds.
	a := f.submit(at(50), 1, "training")
	f.apply(at(55), a, vocab.ReasonCapacityBusy, "")
	f.run(a, f.apply(at(70), a, "", "p-a100", "GPU-a0"), at(71), at(120), vocab.RunPreempted)
	f.apply(at(125), a, vocab.ReasonQuotaExhausted, "")
	f.run(a, f.apply(at(150), a, "", "p-h100", "GPU-h0"), at(151), at(200), vocab.RunSucceeded)

	// b waits held and is cancelled now, while waiting.
	b := f.submit(at(90), 2, "notebook")
	f.apply(at(95), b, vocab.ReasonHeld, "")
	if err := s.CancelJob(ctx, b, "alice", "not needed"); err != nil {
		t.Fatal(err)
	}
	cancelled := time.Now().UTC()

	// c is still running.
	c := f.submit(at(100), 1, "")
	f.run(c, f.apply(at(110), c, "", "p-a100", "GPU-a1"), at(112), time.Time{}, "")

	now := cancelled.Add(time.Minute)
	window := queuereport.Window{From: at(60), To: now.Add(time.Hour)}
	in, err := s.LoadReportInput(ctx, window, now)
	if err != nil {
		t.Fatal(err)
	}

	jobs := map[string]queuereport.Job{}
	for _, j := range in.Jobs {
		jobs[j.ID] = j
	}
	if _, ok := jobs[old]; ok || len(jobs) != 3 {
		t.Fatalf("jobs %v: want a, b and c, not the one that ended before the window", jobIDs(in.Jobs))
	}
	ja, jb, jc := jobs[a], jobs[b], jobs[c]
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: jobs %+v, %+v, %+v", what, ja, jb, jc)
		}
	}
	check("a: fields", ja.Queue == "train" && ja.Tier == vocab.TierStandard && ja.Pool == "p" &&
		ja.Project == "vision" && ja.JobType == "training" && ja.State == "succeeded" && ja.Request.GPUs == 1 &&
		ja.SubmitTime.Equal(at(50)))
	check("a: first start and end", timeIs(ja.FirstStart, at(71)) && timeIs(ja.End, at(200)) && !ja.Cancelled)
	check("b: cancelled while waiting", jb.Cancelled && jb.CancelledWhileWaiting && jb.FirstStart == nil &&
		jb.End != nil && jb.End.Sub(cancelled).Abs() < 5*time.Second && jb.JobType == "notebook")
	check("c: running", jc.State == "running" && timeIs(jc.FirstStart, at(112)) && jc.End == nil && jc.JobType == "")

	runs := map[string][]string{}
	for _, r := range in.Runs {
		end := "open"
		if r.End != nil {
			end = r.End.Sub(base).String()
		}
		runs[r.JobID] = append(runs[r.JobID], fmt.Sprintf("%s-%s %d", r.Start.Sub(base), end, r.GPUMilli))
	}
	if got, want := fmt.Sprint(runs[a], runs[b], runs[c]), "[1h11m0s-2h0m0s 1000 2h31m0s-3h20m0s 1000] [] [1h52m0s-open 1000]"; got != want {
		t.Errorf("runs of a, b, c: %s, want %s", got, want)
	}
	if !runsGroupedInJobOrder(in) {
		t.Errorf("runs and wait events are not grouped by job in the order of Jobs")
	}

	var events []string
	for _, e := range in.WaitEvents {
		events = append(events, string(e.Reason))
	}
	// Each first evaluation after a submit or requeue adds not_yet_evaluated
	// (ApplyCycle): a's after its requeue, b's and c's; a's first one ended
	// before the window.
	if got := strings.Join(events, ","); !sameSet(got, "capacity_busy,quota_exhausted,held,not_yet_evaluated,not_yet_evaluated,not_yet_evaluated") {
		t.Errorf("wait events %s", got)
	}
	var releases []string
	for _, r := range in.Releases {
		releases = append(releases, fmt.Sprintf("%s %s %s %d", r.At.Sub(base), r.Pool, strings.Join(r.Models, "|"), r.GPUMilli))
	}
	if got := strings.Join(releases, "; "); !sameSet(got, "2h0m0s p A100 1000; 3h20m0s p H100 1000") {
		t.Errorf("releases %s", got)
	}
	if len(in.Targets) != 1 || in.Targets[0] != (queuereport.QueueTarget{Queue: "train", ServiceShare: 2, MaxWait: 90 * time.Minute}) {
		t.Errorf("targets %+v", in.Targets)
	}

	r, err := queuereport.Compute(*in, queuereport.Options{Window: window, Now: now, GroupBy: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	// Initial waits started in the window: a 21 min; a requeue wait 31 min;
	// b cancelled while waiting.
	// Not yet evaluated in the window: a 120–125, b 90–95, c 100–110.
	if r.Total.Started != 2 || r.Total.RequeueStarts != 1 || r.Total.CancelledWhileWaiting != 1 ||
		r.Total.WaitReasonSeconds["quota_exhausted"] != 25*60 || r.Total.WaitReasonSeconds["not_yet_evaluated"] != 20*60 {
		t.Errorf("report total %+v", r.Total)
	}
}

// TestLoadReportInputRejectsBadWindows checks the window errors.
func TestLoadReportInputRejectsBadWindows(t *testing.T) {
	t.Parallel()
	s := reportEnv(t)
	now := time.Now()
	for _, c := range []struct {
		w    queuereport.Window
		want string
	}{
		{queuereport.Window{To: now}, "from and to are required"},
		{queuereport.Window{From: now, To: now.Add(-time.Hour)}, "must be after"},
		{queuereport.Window{From: now.Add(-91 * 24 * time.Hour), To: now}, "longer than"},
		{queuereport.Window{From: now.Add(time.Hour), To: now.Add(2 * time.Hour)}, "before window.from"},
	} {
		if _, err := s.LoadReportInput(context.Background(), c.w, now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("window %v: error %v, want %q", c.w, err, c.want)
		}
	}
}

// TestJobsEndedAtTrigger checks migration 00060's trigger on every path that
// makes a job final: FinishRun, ReleasePlacement and CancelJob each stamp
// ended_at with the transition's time, and a later updated_at bump does
// not move it.
func TestJobsEndedAtTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reportEnv(t)
	f := &reportFlow{t: t, s: s}
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	finished := f.submit(base, 1, "")
	alloc := f.apply(base.Add(time.Minute), finished, "", "p-a100", "GPU-a0")
	runID, err := s.MarkRunning(ctx, finished, alloc, 0, base.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, finished, runID, vocab.RunFailed, "exit 1", base.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A late checkpoint of the ended run is refused (its allocation was
	// released); a later update of the row bumps updated_at to now().
	if err := s.RecordCheckpoint(ctx, finished, runID, scheduling.Checkpoint{At: base.Add(11 * time.Minute), Step: 10}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("late checkpoint of an ended run: %v, want a conflict", err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET updated_at = now() WHERE id = $1`, finished); err != nil {
		t.Fatal(err)
	}
	released := f.submit(base, 1, "")
	alloc = f.apply(base.Add(time.Minute), released, "", "p-a100", "GPU-a1")
	if err := s.ReleasePlacement(ctx, released, alloc, vocab.RunCancelled, "launch failed", base.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	waiting := f.submit(base, 1, "")
	live := f.submit(base, 1, "")
	if err := s.CancelJob(ctx, waiting, "alice", "no longer needed"); err != nil {
		t.Fatal(err)
	}
	for job, want := range map[string]time.Time{
		finished: base.Add(10 * time.Minute), released: base.Add(3 * time.Minute), waiting: time.Now(), live: {},
	} {
		var ended *time.Time
		if err := s.Pool().QueryRow(ctx, `SELECT ended_at FROM jobs WHERE id = $1`, job).Scan(&ended); err != nil {
			t.Fatal(err)
		}
		switch {
		case want.IsZero() && ended != nil:
			t.Errorf("live job has ended_at %v", ended)
		case !want.IsZero() && (ended == nil || ended.Sub(want).Abs() > 5*time.Second):
			t.Errorf("job %s ended_at %v, want %v", job, ended, want)
		}
	}
}

func timeIs(p *time.Time, want time.Time) bool { return p != nil && p.Equal(want) }

func jobIDs(jobs []queuereport.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// runsGroupedInJobOrder reports whether runs and wait events come grouped by
// job in the order of in.Jobs, as LoadReportInput promises.
func runsGroupedInJobOrder(in *queuereport.Input) bool {
	pos := map[string]int{}
	for i, j := range in.Jobs {
		pos[j.ID] = i
	}
	last := -1
	for _, r := range in.Runs {
		if pos[r.JobID] < last {
			return false
		}
		last = pos[r.JobID]
	}
	last = -1
	for _, e := range in.WaitEvents {
		if pos[e.JobID] < last {
			return false
		}
		last = pos[e.JobID]
	}
	return true
}

// sameSet reports whether two separator-joined lists hold the same items.
func sameSet(got, want string) bool {
	sep := ","
	if strings.Contains(want, "; ") {
		sep = "; "
	}
	g, w := strings.Split(got, sep), strings.Split(want, sep)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}
