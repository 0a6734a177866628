package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// t0 is the tests' clock origin, at microsecond precision like timestamptz.
var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// newStore opens a store on a fresh database; closed at cleanup.
func newStore(t testing.TB) (*store.Store, string) {
	t.Helper()
	url := storetest.NewDatabase(t)
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, url
}

// testPool is pool "p" with the given nodes × gpusPerNode whole A100s named
// GPU-<node>-<i>, two NVLink domains per node.
func testPool(name string, nodes, gpusPerNode int) scheduling.Pool {
	p := scheduling.Pool{Name: name, Available: true, Stage: vocab.StageAutomate}
	for n := range nodes {
		node := scheduling.Node{Name: fmt.Sprintf("%s-n%04d", name, n), CPUMilli: 96000, MemoryMiB: 1 << 20, Schedulable: true}
		for g := range gpusPerNode {
			node.GPUs = append(node.GPUs, scheduling.GPU{
				UUID: fmt.Sprintf("GPU-%s-%04d-%d", name, n, g), Model: "A100-SXM4-80GB", MemoryMiB: 81920,
				NVLinkDomain: fmt.Sprintf("nv%d", g/4), Healthy: true,
			})
		}
		p.Nodes = append(p.Nodes, node)
	}
	return p
}

// submit creates a pending job in pool asking for gpus × milli.
func submit(t testing.TB, s *store.Store, project, pool string, gpus, milli int) *store.Job {
	t.Helper()
	j, created, err := s.CreateJob(context.Background(), &store.NewJob{
		Project: project, Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0,
		Request: scheduling.ResourceRequest{GPUs: gpus, GPUMilli: milli, Pool: pool, CPUMilli: 4000, MemoryMiB: 16384},
	})
	if err != nil || !created {
		t.Fatalf("create job: created=%v err=%v", created, err)
	}
	return j
}

// place builds a placement of job on the given GPUs of node with milli each.
func place(jobID, pool, node string, milli int, uuids ...string) scheduling.Placement {
	p := scheduling.Placement{JobID: jobID, Pool: pool, Node: node, Rank: 1,
		Priority: scheduling.Priority{Score: 10000, TierBase: 10000, SubmitTime: t0}}
	for _, u := range uuids {
		p.GPUs = append(p.GPUs, scheduling.GPUShare{UUID: u, Milli: milli})
	}
	return p
}

// queryInt runs a one-value integer query.
func queryInt(t testing.TB, s *store.Store, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
