package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// countingTracer counts the queries it saw start and end.
type countingTracer struct {
	mu         sync.Mutex
	start, end int
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start++
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.end++
}

// WithQueryTracer puts the tracer on the pool's connections: every store
// query is seen (otelpgx plugs in there in serve).
func TestWithQueryTracerSeesStoreQueries(t *testing.T) {
	t.Parallel()
	tr := &countingTracer{}
	s, _ := storetest.NewStore(t, storetest.Fixture{}, store.WithQueryTracer(tr))
	if _, err := s.ListQueues(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.start == 0 || tr.start != tr.end {
		t.Fatalf("tracer saw %d query starts and %d ends, want ≥ 1 of each, equal", tr.start, tr.end)
	}
}
