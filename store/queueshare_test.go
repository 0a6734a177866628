package store_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestQueueSharesRoundTrip: a queue's min_share and max_share are stored,
// listed and loaded into the scheduling snapshot; an update replaces them;
// bad shares are refused naming the field with nothing stored, and the
// columns' CHECKs refuse what a direct writer might put there.
func TestQueueSharesRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	queues := []scheduling.Queue{
		{Name: "experiment", Tier: vocab.TierExperiment, ServiceShare: 1, MaxWait: time.Hour, LowRisk: true, MinShare: 0.25, MaxShare: 0.5},
		{Name: "production", Tier: vocab.TierProduction, ServiceShare: 4, MaxWait: time.Minute, Protected: true},
	}
	if err := s.UpsertQueues(ctx, queues); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, queues) {
		t.Fatalf("listed %+v, want %+v", got, queues)
	}
	snap, err := s.LoadSnapshot(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(snap.Queues, queues) {
		t.Fatalf("snapshot queues %+v, want %+v", snap.Queues, queues)
	}
	queues[0].MinShare, queues[0].MaxShare = 0.1, 0
	if err := s.UpsertQueues(ctx, queues[:1]); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ListQueues(ctx); got[0].MinShare != 0.1 || got[0].MaxShare != 0 {
		t.Fatalf("after update %+v, want min_share 0.1, no cap", got[0])
	}
	for _, tc := range []struct {
		q     scheduling.Queue
		field string
	}{
		{scheduling.Queue{Name: "bad", Tier: vocab.TierStandard, MinShare: 1.5}, "queues[1].min_share"},
		{scheduling.Queue{Name: "bad", Tier: vocab.TierStandard, MaxShare: -0.5}, "queues[1].max_share"},
		{scheduling.Queue{Name: "bad", Tier: vocab.TierStandard, MinShare: 0.5, MaxShare: 0.25}, "queues[1].max_share"},
	} {
		err := s.UpsertQueues(ctx, []scheduling.Queue{queues[1], tc.q})
		var ve *store.ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%+v: error %v, want a validation error naming %s", tc.q, err, tc.field)
		}
	}
	if n := queryInt(t, s, `SELECT count(*) FROM queues`); n != 2 {
		t.Errorf("%d queues after refused upserts, want 2", n)
	}
	for _, sql := range []string{
		`UPDATE queues SET min_share = 1.2 WHERE name = 'experiment'`,
		`UPDATE queues SET max_share = -0.1 WHERE name = 'experiment'`,
		`UPDATE queues SET min_share = 0.5, max_share = 0.2 WHERE name = 'experiment'`,
	} {
		if _, err := s.Pool().Exec(ctx, sql); err == nil {
			t.Errorf("%s: accepted, want a CHECK violation", sql)
		}
	}
}

// TestQueueReportPoolShares: the queue report reads the queues' min_share
// and max_share and the pools' usable GPUs from the database and reports
// each queue's delivered pool share beside them, alike through the stored
// summaries and through the records (a project's report).
func TestQueueReportPoolShares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reportEnv(t) // pool p: 3 usable GPUs; queue train
	if err := s.UpsertQueues(ctx, []scheduling.Queue{{Name: "train", Tier: vocab.TierStandard, ServiceShare: 2,
		MaxWait: 90 * time.Minute, MinShare: 0.5, MaxShare: 0.8}}); err != nil {
		t.Fatal(err)
	}
	f := &reportFlow{t: t, s: s}
	base := time.Now().UTC().Truncate(time.Hour).Add(-4 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	// One GPU for the whole first hour: a third of the pool.
	j := f.submit(at(0), 1, "training")
	f.run(j, f.apply(at(0), j, "", "p-a100", "GPU-a0"), at(0), at(60), vocab.RunSucceeded)
	opts := queuereport.Options{Window: queuereport.Window{From: at(0), To: at(60)}, Now: at(120),
		GroupBy: []string{queuereport.KeyQueue, queuereport.KeyPool}}
	for _, project := range []string{"", "vision"} {
		r, err := s.QueueReport(ctx, opts, project)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Groups) != 1 {
			t.Fatalf("project %q: groups %+v, want one", project, r.Groups)
		}
		g := r.Groups[0]
		if g.PoolShare == nil || *g.PoolShare < 1.0/3-1e-9 || *g.PoolShare > 1.0/3+1e-9 ||
			g.MinShare == nil || *g.MinShare != 0.5 || g.MaxShare == nil || *g.MaxShare != 0.8 {
			t.Errorf("project %q: pool_share %v min %v max %v, want 1/3 against 0.5 and 0.8", project, g.PoolShare, g.MinShare, g.MaxShare)
		}
	}
	// Grouped by project: the fair-share weights serve sets from the
	// policy are the targets; nlp's job only waited.
	if _, _, err := s.CreateJob(ctx, &store.NewJob{Project: "nlp", Queue: "train", Tier: vocab.TierStandard, SubmitTime: at(10),
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}}); err != nil {
		t.Fatal(err)
	}
	s.SetProjectWeights(map[string]float64{"vision": 2})
	opts.GroupBy = []string{queuereport.KeyProject}
	r, err := s.QueueReport(ctx, opts, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]float64{"vision": {1, 2.0 / 3}, "nlp": {0, 1.0 / 3}}
	if len(r.Groups) != 2 {
		t.Fatalf("groups %+v, want vision and nlp", r.Groups)
	}
	for _, g := range r.Groups {
		w := want[g.Key[queuereport.KeyProject]]
		if g.ProjectShare == nil || *g.ProjectShare != w[0] || g.ProjectTargetShare == nil || math.Abs(*g.ProjectTargetShare-w[1]) > 1e-12 {
			t.Errorf("%v: project share %v target %v, want %v", g.Key, g.ProjectShare, g.ProjectTargetShare, w)
		}
	}
}
