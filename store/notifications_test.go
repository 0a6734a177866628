package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// jobNotes lists a job's notifications in delivery order as "kind" or
// "kind:reason" for wait reasons.
func jobNotes(t *testing.T, s *store.Store, jobID string) []string {
	t.Helper()
	ns, err := s.ListNotifications(context.Background(), store.NotificationFilter{JobID: jobID})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(ns))
	for i := len(ns) - 1; i >= 0; i-- { // newest first → oldest first
		k := string(ns[i].Kind)
		if r, ok := ns[i].Data["reason"].(string); ok && ns[i].Kind == vocab.NotifyWaitReason {
			k += ":" + r
		}
		out = append(out, k)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCycleWritesNotificationsWithItsTransitions: the cycle's transaction
// writes job.placed per placement and job.wait_reason only when the reason
// becomes spec, quota or environment (not when only its detail changes, not
// for capacity reasons); a replayed cycle writes nothing again; the
// project comes from the job.
func TestCycleWritesNotificationsWithItsTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{testPool("p", 1, 2)}})
	a := submit(t, s, "vision", "p", 1, 1000)
	b := submit(t, s, "vision", "p", 1, 1000)
	wait := func(r vocab.WaitReason, d string) scheduling.WaitStatus {
		return scheduling.WaitStatus{JobID: b.ID, Reason: r, Detail: d}
	}
	node, gpu := storetest.NodeName("p", 0), storetest.GPUName("p", 0, 0)
	cycles := []*scheduling.Result{
		{Placements: []scheduling.Placement{place(a.ID, "p", node, 1000, gpu)}, Waiting: []scheduling.WaitStatus{wait(vocab.ReasonQuotaExhausted, "quota 1 GPU, using 1")}},
		{Waiting: []scheduling.WaitStatus{wait(vocab.ReasonQuotaExhausted, "quota 1 GPU, using 1 (detail changed)")}},
		{Waiting: []scheduling.WaitStatus{wait(vocab.ReasonCapacityBusy, "busy")}},
		{Waiting: []scheduling.WaitStatus{wait(vocab.ReasonNoMatchingCapacity, "no node has 9 GPUs")}},
		{Waiting: []scheduling.WaitStatus{wait(vocab.ReasonEnvironmentNotReady, "dataset not ready")}},
	}
	for i, res := range cycles {
		at := t0.Add(time.Duration(i) * time.Minute)
		res.At = at
		if _, err := s.ApplyCycle(ctx, "c"+string(rune('0'+i)), res, at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ApplyCycle(ctx, "c0", cycles[0], t0); err != nil { // a retried activity
		t.Fatal(err)
	}
	if got, want := jobNotes(t, s, a.ID), []string{"job.placed"}; !equal(got, want) {
		t.Errorf("job a: %q, want %q", got, want)
	}
	want := []string{"job.wait_reason:quota_exhausted", "job.wait_reason:no_matching_capacity", "job.wait_reason:environment_not_ready"}
	if got := jobNotes(t, s, b.ID); !equal(got, want) {
		t.Errorf("job b: %q, want %q", got, want)
	}
	ns, err := s.ListNotifications(ctx, store.NotificationFilter{Project: "vision"})
	if err != nil || len(ns) != 4 {
		t.Fatalf("project notifications: %d, %v", len(ns), err)
	}
	last := ns[0]
	if last.Project != "vision" || last.State != vocab.NotificationPending || last.Attempts != 0 ||
		last.Data["previous_reason"] != "no_matching_capacity" || last.Data["next_action"] == "" || !last.CreatedAt.Equal(t0.Add(4*time.Minute)) {
		t.Errorf("last notification = %+v", last)
	}
	placed := ns[2]
	if placed.Kind != vocab.NotifyPlaced || placed.Data["node"] != node || placed.Data["allocation_id"] == "" {
		t.Errorf("placed notification = %+v", placed)
	}
	// One cycle writes in result order: the wait of b (applied first) precedes a's placement.
	if ns[3].Kind != vocab.NotifyWaitReason || ns[3].Seq > ns[2].Seq {
		t.Errorf("seq order: wait %+v, placement %+v", ns[3], ns[2])
	}
	if _, err := s.ListNotifications(ctx, store.NotificationFilter{State: "lost"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("unknown state filter: %v, want ErrInvalid", err)
	}
}

// TestNotificationDeliveryStates walks the outbox's states: a sweep makes
// the pending rows of projects without a webhook unrouted and names the
// routed projects with pending rows; attempts are counted with their
// status and error; a 2xx delivers; dead keeps the last error; final rows
// change no more; retention prunes final rows only.
func TestNotificationDeliveryStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{testPool("p", 1, 4)}})
	var placements []scheduling.Placement
	for i, project := range []string{"vision", "vision", "drill"} {
		j := submit(t, s, project, "p", 1, 1000)
		placements = append(placements, place(j.ID, "p", storetest.NodeName("p", 0), 1000, storetest.GPUName("p", 0, i)))
	}
	if _, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{At: t0, Placements: placements}, t0); err != nil {
		t.Fatal(err)
	}
	sw, err := s.SweepNotifications(ctx, []string{"vision", "nlp"}, t0.Add(-time.Hour), t0)
	if err != nil || !equal(sw.Projects, []string{"vision"}) || sw.Unrouted != 1 || sw.Pruned != 0 {
		t.Fatalf("sweep = %+v, %v", sw, err)
	}
	drill, _ := s.ListNotifications(ctx, store.NotificationFilter{Project: "drill"})
	if len(drill) != 1 || drill[0].State != vocab.NotificationUnrouted || drill[0].FinishedAt == nil || drill[0].LastError == "" {
		t.Fatalf("drill = %+v", drill)
	}
	pend, err := s.PendingNotifications(ctx, "vision", 10)
	if err != nil || len(pend) != 2 || pend[0].Seq > pend[1].Seq {
		t.Fatalf("pending = %+v, %v", pend, err)
	}
	first, second := pend[0].ID, pend[1].ID
	st, err := s.RecordNotificationAttempt(ctx, first, store.NotificationAttempt{At: t0, Status: 500, Error: "webhook answered 500: boom"})
	if err != nil || st != vocab.NotificationPending {
		t.Fatalf("failed attempt: %s, %v", st, err)
	}
	if st, err = s.RecordNotificationAttempt(ctx, first, store.NotificationAttempt{At: t0.Add(time.Second), Status: 204, Delivered: true}); err != nil || st != vocab.NotificationDelivered {
		t.Fatalf("delivered attempt: %s, %v", st, err)
	}
	n, _ := s.GetNotification(ctx, first)
	if n.Attempts != 2 || n.LastStatus == nil || *n.LastStatus != 204 || n.LastError != "" || !n.FinishedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("delivered = %+v", n)
	}
	if st, _ = s.RecordNotificationAttempt(ctx, first, store.NotificationAttempt{At: t0, Status: 500, Error: "late"}); st != vocab.NotificationDelivered {
		t.Fatalf("an attempt after delivery changed it: %s", st)
	}
	if _, err := s.RecordNotificationAttempt(ctx, second, store.NotificationAttempt{At: t0, Error: "connection refused"}); err != nil {
		t.Fatal(err)
	}
	if st, err = s.FinishNotification(ctx, second, vocab.NotificationDead, "", t0.Add(time.Minute)); err != nil || st != vocab.NotificationDead {
		t.Fatalf("dead: %s, %v", st, err)
	}
	n, _ = s.GetNotification(ctx, second)
	if n.LastError != "connection refused" || n.LastStatus != nil || n.Attempts != 1 {
		t.Fatalf("dead letter = %+v", n)
	}
	if st, _ = s.FinishNotification(ctx, first, vocab.NotificationDead, "x", t0); st != vocab.NotificationDelivered {
		t.Fatalf("dead-lettering a delivered notification changed it: %s", st)
	}
	if _, err := s.FinishNotification(ctx, second, vocab.NotificationPending, "", t0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("finish as pending: %v, want ErrInvalid", err)
	}
	if _, err := s.GetNotification(ctx, "n-none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	dead, _ := s.ListNotifications(ctx, store.NotificationFilter{State: vocab.NotificationDead})
	if len(dead) != 1 || dead[0].ID != second {
		t.Fatalf("dead list = %+v", dead)
	}
	// Retention: every row is final; those final before the cut go.
	sw, err = s.SweepNotifications(ctx, []string{"vision"}, t0.Add(30*time.Second), t0.Add(time.Hour))
	if err != nil || sw.Pruned != 2 || len(sw.Projects) != 0 {
		t.Fatalf("prune = %+v, %v", sw, err)
	}
	left, _ := s.ListNotifications(ctx, store.NotificationFilter{})
	if len(left) != 1 || left[0].ID != second {
		t.Fatalf("left after prune = %+v", left)
	}
}

// TestGovernanceNoticesWriteNotificationsOnce: a preemption notice, a
// reclaim notice and an observed resume each write one notification for
// the victim's (owner's) project, however often the step is retried.
func TestGovernanceNoticesWriteNotificationsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{testPool("p", 1, 2)}})
	victim := submit(t, s, "vision", "p", 1, 1000)
	trigger := submit(t, s, "serving", "p", 2, 1000)
	node := storetest.NodeName("p", 0)
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{At: t0,
		Placements: []scheduling.Placement{place(victim.ID, "p", node, 1000, storetest.GPUName("p", 0, 0))}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	alloc := out.Placed[0].AllocationID
	run, err := s.MarkRunning(ctx, victim.ID, alloc, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	out, err = s.ApplyCycle(ctx, "c2", &scheduling.Result{At: t0.Add(time.Minute), Preemptions: []scheduling.PreemptionProposal{{
		ForJobID: trigger.ID, Pool: "p", Node: node, Act: true, Reason: "production needs it",
		Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc, GPUs: 1}}}}}, t0.Add(time.Minute))
	if err != nil || len(out.Preemptions) != 1 {
		t.Fatalf("preemption: %+v %v", out, err)
	}
	pid := out.Preemptions[0].PreemptionID
	for range 2 {
		if _, err := s.NoticePreemption(ctx, pid, "preempt/"+victim.ID+"/"+run, t0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := s.NotifyResumed(ctx, store.ResumeObserved{PreemptionID: pid, JobID: victim.ID, RunID: "r-next", FromStep: 40,
			SavedStep: 40, Correct: true, At: t0.Add(5 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	r, _, err := s.OpenReclaim(ctx, store.NewReclaim{
		Evidence: governance.Evidence{AllocationID: alloc, JobID: victim.ID, Project: "vision", Queue: "train", Pool: "p", Node: node, GPUs: 1},
		Finding:  governance.Finding{Class: vocab.ClassIdle, Basis: "0% GPU for 30 min"},
		Decision: governance.ModeDecision{Mode: vocab.ModeNotify, Configured: vocab.ModeNotify, Stage: vocab.StageAutomate},
		At:       t0.Add(6 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.NoticeReclaim(ctx, r.ID, t0.Add(20*time.Minute), t0.Add(6*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"job.placed", "job.preemption_notice", "job.resumed", "job.reclaim_notice"}
	if got := jobNotes(t, s, victim.ID); !equal(got, want) {
		t.Fatalf("victim notifications %q, want %q", got, want)
	}
	ns, _ := s.ListNotifications(ctx, store.NotificationFilter{JobID: victim.ID})
	if ns[0].Data["reclaim_id"] != r.ID || ns[0].Data["keep"] != "POST /v1/reclaims/"+r.ID+"/keep" ||
		ns[1].Data["resumed_correctly"] != true || ns[2].Data["for_job_id"] != trigger.ID {
		t.Fatalf("notification data: %+v / %+v / %+v", ns[0].Data, ns[1].Data, ns[2].Data)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM notifications WHERE job_id = $1`, trigger.ID); n != 0 {
		t.Fatalf("the trigger job got %d notifications", n)
	}
}
