package store_test

import (
	"context"
	"testing"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestJobSettlements reads state and reason of existing jobs in ID order and
// leaves out IDs without a row.
func TestJobSettlements(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	mk := func(held bool) string {
		j, _, err := s.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}, Held: held})
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	a, b := mk(false), mk(true)
	got, err := s.JobSettlements(ctx, []string{b, "j-missing", a})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != a || got[1].ID != b || got[0].State != vocab.JobSubmitted {
		t.Fatalf("settlements %+v, want %s then %s, submitted", got, a, b)
	}
	if got[0].Settled() || got[0].Reason != "" {
		t.Errorf("a job no cycle has seen is not settled: %+v", got[0])
	}
	if none, err := s.JobSettlements(ctx, nil); err != nil || len(none) != 0 {
		t.Errorf("no IDs: %v, %v", none, err)
	}
}

// TestOpenPoolSize: without pool_max_conns the pool holds DefaultMaxConns
// connections; the URL's setting wins.
func TestOpenPoolSize(t *testing.T) {
	t.Parallel()
	url := storetest.NewDatabase(t)
	ctx := context.Background()
	for _, c := range []struct {
		url  string
		want int32
	}{{url, store.DefaultMaxConns}, {url + "&pool_max_conns=3", 3}} {
		st, err := store.Open(ctx, c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Pool().Config().MaxConns; got != c.want {
			t.Errorf("%s: MaxConns %d, want %d", c.url, got, c.want)
		}
		st.Close()
	}
}
