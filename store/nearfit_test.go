package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestWaitSuggestionsAndReleasesRoundTrip stores a cycle's nearest-fit
// suggestions and expected releases with the wait (jobs.explanation) and
// reads them back; the next cycle without them clears them.
func TestWaitSuggestionsAndReleasesRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 2)}); err != nil {
		t.Fatal(err)
	}
	j := submit(t, s, "vision", "p", 4, 0)
	sg := scheduling.Suggestion{Field: "gpus", Value: "2", Now: true, MatchingGPUs: 2, FreeGPUs: 2, Nodes: 1,
		Text: "fits now with gpus ≤ 2 anywhere in the pool: 2 matching GPUs, 2 free"}
	rel := scheduling.ExpectedRelease{JobID: "j-run", Milli: 1000, ExpectedEnd: t0.Add(90 * time.Minute)}
	apply := func(cycle string, w scheduling.WaitStatus) *store.Explanation {
		t.Helper()
		w.JobID, w.Rank = j.ID, 1
		if _, err := s.ApplyCycle(ctx, cycle, &scheduling.Result{Waiting: []scheduling.WaitStatus{w}}, t0); err != nil {
			t.Fatal(err)
		}
		job, err := s.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return job.Explanation
	}
	e := apply("c1", scheduling.WaitStatus{Reason: vocab.ReasonNoMatchingCapacity, Detail: "needs 4",
		Suggestions: []scheduling.Suggestion{sg}})
	if want := []store.SuggestionJ{store.SuggestionJ(sg)}; !reflect.DeepEqual(e.Suggestions, want) || e.Releases != nil {
		t.Fatalf("suggestions %+v releases %+v, want %+v and none", e.Suggestions, e.Releases, want)
	}
	e = apply("c2", scheduling.WaitStatus{Reason: vocab.ReasonCapacityBusy, Detail: "0 free",
		Releases: []scheduling.ExpectedRelease{rel}})
	if len(e.Releases) != 1 || e.Releases[0].JobID != rel.JobID || e.Releases[0].Milli != rel.Milli ||
		!e.Releases[0].ExpectedEnd.Equal(rel.ExpectedEnd) || e.Suggestions != nil {
		t.Fatalf("releases %+v suggestions %+v, want %+v and none", e.Releases, e.Suggestions, rel)
	}
}
