package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

func TestProfileOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		declared string
		command  []string
		want     string
	}{
		{"trainer", []string{"python", "train.py"}, "vision/trainer"},
		{"", []string{"/opt/venv/bin/python3", "train.py"}, "vision/python3"},
		{"", []string{"./run me.sh"}, "vision/run_me.sh"},
		{"", []string{"/"}, "vision/command"},
		{"", nil, "vision/simulated"},
	}
	for _, c := range cases {
		if got := store.ProfileOf("vision", c.declared, c.command); got != c.want {
			t.Errorf("ProfileOf(vision, %q, %q) = %q, want %q", c.declared, c.command, got, c.want)
		}
	}
	for _, name := range []string{"trainer", "resnet-50.v2", "a"} {
		if !store.ValidProfileName(name) {
			t.Errorf("%q refused", name)
		}
	}
	for _, name := range []string{"", "other/trainer", "-x", "has space", string(make([]byte, 129))} {
		if store.ValidProfileName(name) {
			t.Errorf("%q accepted", name)
		}
	}
}

// TestResumeEvidenceByProfile records resumes of two jobs of one profile
// and one of another: the record counts a profile's resumes of every job
// inside the window only, a repeated key is stored once, and bad input is
// refused naming the field with nothing stored.
func TestResumeEvidenceByProfile(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	mk := func(project string, command []string, declared string) *store.Job {
		nj := &store.NewJob{Project: project, Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0, Command: command,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}, Recovery: scheduling.RecoveryEvidence{Checkpointable: true}}
		if declared != "" {
			nj.Recovery.Profile = store.ProfileOf(project, declared, command)
		}
		return storetest.Submit(t, s, nj)
	}
	a, b := mk("vision", []string{"python", "train.py"}, ""), mk("vision", []string{"/usr/bin/python", "eval.py"}, "")
	other := mk("vision", []string{"python"}, "resnet")
	if a.Recovery.Profile != "vision/python" || b.Recovery.Profile != "vision/python" || other.Recovery.Profile != "vision/resnet" {
		t.Fatalf("profiles %q %q %q", a.Recovery.Profile, b.Recovery.Profile, other.Recovery.Profile)
	}
	rec := func(key string, j *store.Job, kind vocab.ResumeEvidenceKind, outcome vocab.ResumeOutcome, at time.Time) {
		t.Helper()
		if err := s.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: key, JobID: j.ID, Kind: kind, Outcome: outcome, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	rec("p-1", a, vocab.EvidencePreemption, vocab.ResumeVerified, t0.Add(-40*24*time.Hour)) // outside a 30-day window
	rec("p-2", a, vocab.EvidencePreemption, vocab.ResumeVerified, t0.Add(-2*time.Hour))
	rec("crash/r-1", b, vocab.EvidenceCrash, vocab.ResumeVerified, t0.Add(-time.Hour))
	rec("d-1", b, vocab.EvidenceDrill, vocab.ResumeWrongStep, t0.Add(-30*time.Minute))
	rec("p-3", other, vocab.EvidencePreemption, vocab.ResumeFailed, t0.Add(-time.Minute))
	rec("p-2", b, vocab.EvidenceDrill, vocab.ResumeFailed, t0)                       // same key: kept as first stored
	rec("later", a, vocab.EvidencePreemption, vocab.ResumeFailed, t0.Add(time.Hour)) // after now: not counted

	window := 30 * 24 * time.Hour
	got, err := s.ProfileEvidence(ctx, "vision/python", window, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Verified != 2 || got.Failed != 1 || got.FailureRate == nil || *got.FailureRate != 1.0/3 ||
		got.Last == nil || !got.Last.Equal(t0.Add(-30*time.Minute)) {
		t.Fatalf("vision/python over 30 days: %+v", got)
	}
	if all, _ := s.ProfileEvidence(ctx, "vision/python", 0, t0); all.Verified != 3 || all.Failed != 1 {
		t.Fatalf("vision/python over all time: %+v", all)
	}
	if none, _ := s.ProfileEvidence(ctx, "nlp/python", window, t0); none.Verified != 0 || none.Failed != 0 || none.FailureRate != nil || none.Last != nil {
		t.Fatalf("profile without evidence: %+v", none)
	}
	if r, _ := s.ProfileEvidence(ctx, "vision/resnet", window, t0); r.Verified != 0 || r.Failed != 1 || *r.FailureRate != 1 {
		t.Fatalf("vision/resnet: %+v", r)
	}
	evs, err := s.ResumeEvidenceOf(ctx, b.ID)
	if err != nil || len(evs) != 2 || evs[0].Key != "crash/r-1" || evs[0].Kind != vocab.EvidenceCrash || evs[0].Profile != "vision/python" {
		t.Fatalf("evidence of b: %+v, %v", evs, err)
	}

	before := queryInt(t, s, `SELECT count(*) FROM resume_evidence`)
	bad := []struct {
		e     store.ResumeEvidence
		field string
	}{
		{store.ResumeEvidence{JobID: a.ID, Kind: vocab.EvidenceDrill, Outcome: vocab.ResumeVerified, At: t0}, "key"},
		{store.ResumeEvidence{Key: "x1", Kind: vocab.EvidenceDrill, Outcome: vocab.ResumeVerified, At: t0}, "job_id"},
		{store.ResumeEvidence{Key: "x2", JobID: a.ID, Kind: "restart", Outcome: vocab.ResumeVerified, At: t0}, "kind"},
		{store.ResumeEvidence{Key: "x3", JobID: a.ID, Kind: vocab.EvidenceDrill, Outcome: "ok", At: t0}, "outcome"},
		{store.ResumeEvidence{Key: "x4", JobID: a.ID, Kind: vocab.EvidenceDrill, Outcome: vocab.ResumeVerified}, "at"},
	}
	for _, c := range bad {
		var ve *store.ValidationError
		if err := s.RecordResumeEvidence(ctx, c.e); !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%+v: %v, want a validation error naming %s", c.e, err, c.field)
		}
	}
	err = s.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: "x5", JobID: "j-unknown", Kind: vocab.EvidenceDrill,
		Outcome: vocab.ResumeVerified, At: t0})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if after := queryInt(t, s, `SELECT count(*) FROM resume_evidence`); after != before {
		t.Errorf("refused input stored rows: %d → %d", before, after)
	}
}
