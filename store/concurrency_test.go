package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestConcurrentSchedulersNeverOverAllocate races several schedulers, each
// with its own connection pool, placing whole GPUs, multi-GPU groups (locked
// in random orders) and shares on the same 4 GPUs, round after round. A
// monitor samples the committed state throughout. It asserts that no GPU ever
// holds more than 1000 milli-GPU, that after each round every GPU holds
// exactly 1000 (the capacity, no more and nothing lost), that the grants the
// workers were told about add up to exactly that, and that releases free it all.
func TestConcurrentSchedulersNeverOverAllocate(t *testing.T) {
	t.Parallel()
	const workers, rounds, raceCycles = 4, 6, 8
	_, url := newStore(t)
	ctx := context.Background()
	stores := make([]*store.Store, workers)
	for i := range stores {
		s, err := store.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	pool := testPool("p", 1, 4)
	if err := stores[0].UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	node := pool.Nodes[0]
	uuids := make([]string, len(node.GPUs))
	for i, g := range node.GPUs {
		uuids[i] = g.UUID
	}

	var maxSeen atomic.Int64
	stop := make(chan struct{})
	var monitor sync.WaitGroup
	monitor.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var m int64
			if err := stores[0].Pool().QueryRow(ctx, `
				SELECT coalesce(max(s), 0) FROM (
					SELECT sum(milli) AS s FROM allocation_gpus WHERE active GROUP BY gpu_uuid
					UNION ALL SELECT max(used_milli) FROM gpu_usage) x`).Scan(&m); err != nil {
				t.Error(err)
				return
			}
			if m > maxSeen.Load() {
				maxSeen.Store(m)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})

	for round := range rounds {
		granted := make([][]store.PlacedJob, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				var err error
				granted[w], err = raceAndFill(ctx, stores[w], fmt.Sprintf("r%d-w%d", round, w), node.Name, uuids, raceCycles,
					rand.New(rand.NewPCG(uint64(round), uint64(w))))
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			break
		}
		total := 0
		for _, g := range granted {
			for _, p := range g {
				for _, s := range p.GPUs {
					total += s.Milli
				}
			}
		}
		if total != len(uuids)*scheduling.MilliPerGPU {
			t.Fatalf("round %d: workers were granted %d milli in all, want exactly %d", round, total, len(uuids)*1000)
		}
		assertEveryGPUHolds(t, stores[0], uuids, 1000)

		for w := range workers {
			wg.Go(func() {
				if err := releaseAll(ctx, stores[w], granted[w], time.Duration(round+1)*time.Hour); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		assertEveryGPUHolds(t, stores[0], uuids, 0)
	}
	close(stop)
	monitor.Wait()
	if m := maxSeen.Load(); m > 1000 {
		t.Fatalf("monitor saw a GPU holding %d milli-GPU", m)
	} else if m != 1000 {
		t.Fatalf("monitor never saw a full GPU (max %d); the race did not happen", m)
	}
}

// raceAndFill makes cycles of 1–3 random placements (whole GPUs, 2-GPU groups
// in random order, shares of 250/500/750), then fills every GPU with 250-milli
// shares until each refuses, so that the round ends with all GPUs full. It
// returns the placements granted to this worker.
func raceAndFill(ctx context.Context, s *store.Store, tag, node string, uuids []string, cycles int, rng *rand.Rand) ([]store.PlacedJob, error) {
	var granted []store.PlacedJob
	newJobs := func(n int) ([]string, error) {
		njs := make([]*store.NewJob, n)
		for i := range njs {
			njs[i] = &store.NewJob{Project: "race", Queue: "train", Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}}
		}
		return s.CreateJobs(ctx, njs)
	}
	apply := func(cycle string, ps []scheduling.Placement) error {
		out, err := s.ApplyCycle(ctx, cycle, &scheduling.Result{Placements: ps}, t0)
		if err != nil {
			return err
		}
		granted = append(granted, out.Placed...)
		if len(out.Placed)+len(out.Conflicts) != len(ps) {
			return fmt.Errorf("%s: %d placed + %d conflicts for %d placements", cycle, len(out.Placed), len(out.Conflicts), len(ps))
		}
		return nil
	}
	for c := range cycles {
		n := 1 + rng.IntN(3)
		ids, err := newJobs(n)
		if err != nil {
			return nil, err
		}
		var ps []scheduling.Placement
		for _, id := range ids {
			perm := rng.Perm(len(uuids))
			switch rng.IntN(3) {
			case 0:
				ps = append(ps, place(id, "p", node, 1000, uuids[perm[0]]))
			case 1:
				ps = append(ps, place(id, "p", node, 1000, uuids[perm[0]], uuids[perm[1]]))
			default:
				ps = append(ps, place(id, "p", node, 250*(1+rng.IntN(3)), uuids[perm[0]]))
			}
		}
		if err := apply(fmt.Sprintf("%s-c%d", tag, c), ps); err != nil {
			return nil, err
		}
	}
	for _, gi := range rng.Perm(len(uuids)) {
		for k := 0; ; k++ {
			ids, err := newJobs(1)
			if err != nil {
				return nil, err
			}
			before := len(granted)
			if err := apply(fmt.Sprintf("%s-fill%d-%d", tag, gi, k), []scheduling.Placement{place(ids[0], "p", node, 250, uuids[gi])}); err != nil {
				return nil, err
			}
			if len(granted) == before {
				break // the GPU is full
			}
		}
	}
	return granted, nil
}

// releaseAll ends every granted placement: odd ones through a run
// (MarkRunning + FinishRun), even ones through ReleasePlacement, each twice to
// exercise retries.
func releaseAll(ctx context.Context, s *store.Store, granted []store.PlacedJob, after time.Duration) error {
	at := t0.Add(after)
	for i, p := range granted {
		if i%2 == 0 {
			for range 2 {
				if err := s.ReleasePlacement(ctx, p.JobID, p.AllocationID, vocab.RunRequeued, "test", at); err != nil {
					return err
				}
			}
			continue
		}
		run, err := s.MarkRunning(ctx, p.JobID, p.AllocationID, 0, t0)
		if err != nil {
			return err
		}
		for range 2 {
			if err := s.FinishRun(ctx, p.JobID, run, vocab.RunSucceeded, "exit 0", at); err != nil {
				return err
			}
		}
	}
	return nil
}

// assertEveryGPUHolds checks through SQL that each GPU's active grants and its
// gpu_usage row both equal milli.
func assertEveryGPUHolds(t *testing.T, s *store.Store, uuids []string, milli int64) {
	t.Helper()
	for _, u := range uuids {
		active := queryInt(t, s, `SELECT coalesce(sum(milli), 0) FROM allocation_gpus WHERE active AND gpu_uuid = $1`, u)
		usage := queryInt(t, s, `SELECT coalesce((SELECT used_milli FROM gpu_usage WHERE gpu_uuid = $1), 0)`, u)
		if active != milli || usage != milli {
			t.Fatalf("GPU %s: active grants %d, gpu_usage %d; want both %d", u, active, usage, milli)
		}
	}
}
