package console

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestTemplatesRenderEveryField executes the job, preemption and reclaim
// templates with every optional part present (the branches the store
// fixture of the handler tests does not reach: overtake, suggestions,
// releases, placement, runs, checkpoints, resume evidence, decided and
// disputed reclaims), so that a type error in a rarely taken branch fails
// here and not as a 500 in front of a viewer.
func TestTemplatesRenderEveryField(t *testing.T) {
	c, err := New(nil, nil, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	yes := true
	job := api.Job{ID: "j-1", Project: "vision", Queue: "train", Tier: "standard", State: vocab.JobWaiting, Held: true,
		Resources: api.ResourceSpec{GPUs: 2, GPUModels: []string{"A100"}, Pool: "p"}, SubmittedAt: now, WaitingSince: at(0),
		Recovery:      api.Recovery{Checkpointable: true, CheckpointIntervalSeconds: 60, LastCheckpoint: &api.Checkpoint{At: now, Step: 7}},
		Prerequisites: []api.PrerequisiteSpec{{Name: "data", Ready: true}},
		Wait:          &api.Wait{Reason: "capacity_busy", Detail: "d", NextAction: "n", ReEvaluate: "r", BlockingJobID: "j-2", Since: now},
		Explanation: &api.Explanation{Rank: 2, Pool: "p", Priority: api.Priority{Score: 10, AgingCapped: true, MinShareBoost: "boost"},
			Placed:      &api.PlacedOn{Pool: "p", Node: "n", GPUs: []api.GPUShare{{UUID: "g", Milli: 1000}}, Borrowed: true},
			Suggestions: []api.Suggestion{{Text: "ask for 1 GPU"}}, Releases: []api.ExpectedRelease{{JobID: "j-3", Milli: 1000, ExpectedEnd: now}},
			EvaluatedAt: at(0), NextEvaluation: &api.NextEvaluation{At: now, Kind: "timer", Estimate: true},
			Overtake: &api.Overtake{AheadJobID: "j-4", GapPoints: 3, At: at(time.Minute)}},
		LastRun:      &api.Run{Number: 1, StartedAt: now, EndedAt: at(time.Minute), Outcome: "preempted", Detail: "x"},
		LastDecision: &api.LastDecision{Action: "left_waiting", Reason: "capacity_busy", At: now, Since: now, Detail: "d", Policy: "abcdef0123456789"},
	}
	p := api.Preemption{ID: "p-1", Kind: "preemption", State: "released", Outcome: "completed", Pool: "p", ForJobID: "j-5", VictimJobID: "j-1",
		RunID: "r-1", GPUs: 1, RunStartedAt: at(-time.Hour), CheckpointAtNotice: &api.Checkpoint{At: now, Step: 5},
		SavedCheckpoint: &api.Checkpoint{At: *at(time.Second), Step: 6, Location: "s3://x"}, CheckpointInGrace: &yes, StartedAt: now,
		NotifiedAt: at(0), SavedAt: at(time.Second), ReleasedAt: at(2 * time.Second), RescheduledAt: at(3 * time.Second),
		ResumedAt: at(4 * time.Second), PassedAt: at(5 * time.Second), ResumedRunID: "r-2", ResumedFromStep: i(6), ResumedCorrectly: &yes,
		LostSeconds: f(1), SaveRestoreSeconds: f(2), RecomputeSeconds: f(3), EffectiveLossGPUSeconds: f(6), Failures: []string{"none"},
		ResumeVerified: &yes, Candidates: []api.PreemptionCandidate{{JobID: "j-1", Chosen: true, Gate: "ok"}}}
	jd := jobData{Job: job, Preemptions: []api.Preemption{p}, Events: api.WaitEventList{Events: []api.WaitEvent{{Reason: "capacity_busy", StartedAt: now, EndedAt: at(time.Minute)}}}}
	jd.Timeline = jobTimeline(&jd, now.Add(time.Hour))
	rc := api.Reclaim{ID: "rc-1", JobID: "j-1", WorkflowID: "reclaim/a", Mode: "notify", ConfiguredMode: "automate", NoticeAt: at(0), NoticeDeadline: at(time.Hour),
		DecidedBy: "root", DecidedAt: at(time.Minute), ReleasedAt: at(time.Minute), Disputed: true, DisputeBy: "alice", DisputeRejectedBy: "olga"}
	rc2 := rc
	rc2.ID, rc2.DecidedBy, rc2.ReleasedAt = "rc-2", "", nil
	viewer := api.Principal{Name: "olga", Project: "platform", Role: vocab.RoleOperator}
	s := &session{principal: viewer, csrf: "tok"}
	for name, d := range map[string]any{
		"job":        jd,
		"preemption": preemptionData{P: p, Steps: preemptionSteps(&p), Workflow: "http://t/x"},
		"reclaims":   reclaimsData{Report: api.ReclaimReport{Reclaims: []api.Reclaim{rc, rc2}}, Links: map[string]string{"reclaim/a": "http://t/r"}},
		"queue": queueData{Tiers: []tierChart{{Tier: "standard", Objectives: []string{"train: 2 h"},
			Chart: histogramSVG("wait-histogram", "t", []histSeries{{Bins: []queuereport.HistogramBin{{LowS: 0, HighS: f(1), Count: 3}, {LowS: 1, Count: 1}}}}, 0.5)}},
			Waiting: waitingList{Truncated: true, Jobs: []waitingJob{{Job: job, Reason: "capacity_busy", Since: at(0), Next: &api.NextEvaluation{At: now, Kind: "timer"}}}}},
	} {
		rec := httptest.NewRecorder()
		c.render(rec, httptest.NewRequest(http.MethodGet, "/ui/x", nil), http.StatusOK, name, c.newPage(s, name, name, d))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "</html>") {
			t.Errorf("%s: %d %s", name, rec.Code, rec.Body)
		}
	}
}
