package simulation

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace"
)

// background is the pool occupancy the trace's jobs do not explain
// (trace.Trace.Background, policy simulation.background_step_s), held as
// GPUs no trace job can use. Node i's holding is the allocation e.allocs[i]
// (one per node, possibly of no GPU): allocations without a running job,
// which Plan counts against capacity only (no project, no quota), so the
// running jobs' allocations start at e.allocs[e.nbg].
type background struct {
	steps  []trace.Occupancy
	target int     // GPUs the current step asks for
	held   int     // GPUs held now: ≤ target, less when too few were free at the step (topped up at steps only)
	heldS  float64 // integral of held over time, GPU-seconds
	wantS  float64 // integral of target over time, GPU-seconds
	nodeOf map[string]int
	// base are the quotas as configured, when Config.BackgroundByQuota
	// charges the background to them (nil otherwise): e.cfg.Quotas[i] is
	// base[i] less quota i's share of what is held.
	base []scheduling.Quota
}

// initBackground sets up the per-node holdings and queues the steps; a
// trace without a Background leaves the engine as it was (e.nbg 0).
func (e *engine) initBackground(steps []trace.Occupancy) {
	if len(steps) == 0 {
		return
	}
	nodes := e.pools[0].Nodes
	e.bg = &background{steps: steps, nodeOf: make(map[string]int, e.gpus)}
	e.nbg = len(nodes)
	e.allocs = make([]scheduling.Allocation, e.nbg, e.nbg+1024)
	for i, n := range nodes {
		id := "background/" + n.Name
		e.allocs[i] = scheduling.Allocation{ID: id, JobID: id, Pool: e.pools[0].Name, Node: n.Name}
		for _, g := range n.GPUs {
			e.bg.nodeOf[g.UUID] = i
		}
	}
	for i, s := range steps {
		e.events.push(event{t: s.At, kind: evBackground, seq: i})
	}
	if e.cfg.BackgroundByQuota {
		e.bg.base = slices.Clone(e.cfg.Quotas)
		e.cfg.Quotas = slices.Clone(e.cfg.Quotas) // not the caller's
	}
}

// backgroundQuotas charges what the background holds to the quotas of the
// pool in proportion to their nominal GPUs (Config.BackgroundByQuota: the
// work the trace's jobs do not explain belongs to the same tenants, in the
// shares of the pool their quotas give them): quota i's nominal is
// base_i − round(held × base_i ÷ Σ base) milli-GPU, never below 0.
func (e *engine) backgroundQuotas() {
	b := e.bg
	if b.base == nil {
		return
	}
	var total int64
	for _, q := range b.base {
		if q.Pool == e.pools[0].Name {
			total += q.NominalMilli
		}
	}
	if total == 0 {
		return
	}
	held := float64(b.held) * scheduling.MilliPerGPU
	for i, q := range b.base {
		if q.Pool != e.pools[0].Name {
			continue
		}
		share := int64(held*float64(q.NominalMilli)/float64(total) + 0.5)
		e.cfg.Quotas[i].NominalMilli = max(q.NominalMilli-share, 0)
	}
}

// backgroundStep applies step i at t and reports whether GPUs were given
// back (a cycle is then due while jobs wait).
func (e *engine) backgroundStep(i int) bool {
	b := e.bg
	b.target = b.steps[i].GPUs
	switch {
	case b.held < b.target:
		free := e.freeByFullness()
		if e.cfg.BackgroundRandom {
			e.stepRand(i).Shuffle(len(free), func(x, y int) { free[x], free[y] = free[y], free[x] })
		}
		e.backgroundTake(free)
	case b.held > b.target:
		if e.cfg.BackgroundRandom {
			e.backgroundGiveRandom(b.held-b.target, e.stepRand(i))
		} else {
			e.backgroundGive(b.held - b.target)
		}
		return true
	}
	return false
}

// stepRand is the PCG stream of background step i: seeded by (Config.Seed,
// i), so a run is deterministic for its seed.
func (e *engine) stepRand(i int) *rand.Rand {
	return rand.New(rand.NewPCG(e.cfg.Seed, uint64(i)))
}

// backgroundGiveRandom releases n held GPUs drawn uniformly from those held
// (Config.BackgroundRandom).
func (e *engine) backgroundGiveRandom(n int, r *rand.Rand) {
	var held []scheduling.GPUShare
	for i := range e.nbg {
		held = append(held, e.allocs[i].GPUs...)
	}
	r.Shuffle(len(held), func(x, y int) { held[x], held[y] = held[y], held[x] })
	give := held[:min(n, len(held))]
	if err := e.used.Release(give); err != nil && e.fault == nil {
		e.fault = fmt.Errorf("background release: %w", err)
	}
	drop := make(map[string]bool, len(give))
	for _, g := range give {
		drop[g.UUID] = true
	}
	for i := range e.nbg {
		a := &e.allocs[i]
		a.GPUs = slices.DeleteFunc(a.GPUs, func(g scheduling.GPUShare) bool { return drop[g.UUID] })
	}
	e.bg.held -= len(give)
	e.backgroundQuotas()
}

// freeByFullness lists the pool's free GPUs, the nodes with the fewest free
// GPUs first (ties by node order), so the background packs onto the
// fullest nodes and leaves whole nodes free as long as it can.
func (e *engine) freeByFullness() []scheduling.GPUShare {
	type nodeFree struct {
		i    int
		free []scheduling.GPUShare
	}
	var nodes []nodeFree
	for i, n := range e.pools[0].Nodes {
		var free []scheduling.GPUShare
		for _, g := range n.GPUs {
			if e.used.Used(g.UUID) == 0 {
				free = append(free, scheduling.GPUShare{UUID: g.UUID, Milli: scheduling.MilliPerGPU})
			}
		}
		if len(free) > 0 {
			nodes = append(nodes, nodeFree{i, free})
		}
	}
	slices.SortStableFunc(nodes, func(a, b nodeFree) int { return cmp.Compare(len(a.free), len(b.free)) })
	var out []scheduling.GPUShare
	for _, n := range nodes {
		out = append(out, n.free...)
	}
	return out
}

// backgroundTake holds the free GPUs among candidates, in their order,
// until the background reaches its target.
func (e *engine) backgroundTake(candidates []scheduling.GPUShare) {
	b := e.bg
	for _, g := range candidates {
		if b.held >= b.target {
			break
		}
		if e.used.Used(g.UUID) != 0 {
			continue
		}
		one := []scheduling.GPUShare{{UUID: g.UUID, Milli: scheduling.MilliPerGPU}}
		e.used.Grant(one)
		a := &e.allocs[b.nodeOf[g.UUID]]
		a.GPUs = append(a.GPUs, one[0])
		b.held++
	}
	e.backgroundQuotas()
}

// backgroundGive releases n held GPUs, from the nodes with the most free
// GPUs first (ties by node order), so that what is given back makes whole
// nodes free first.
func (e *engine) backgroundGive(n int) {
	type nodeHeld struct{ i, free int }
	var nodes []nodeHeld
	for i, nd := range e.pools[0].Nodes {
		if len(e.allocs[i].GPUs) == 0 {
			continue
		}
		free := 0
		for _, g := range nd.GPUs {
			if e.used.Used(g.UUID) == 0 {
				free++
			}
		}
		nodes = append(nodes, nodeHeld{i, free + len(e.allocs[i].GPUs)})
	}
	slices.SortStableFunc(nodes, func(a, b nodeHeld) int { return cmp.Compare(b.free, a.free) })
	for _, nd := range nodes {
		if n == 0 {
			break
		}
		a := &e.allocs[nd.i]
		k := min(n, len(a.GPUs))
		give := a.GPUs[len(a.GPUs)-k:]
		if err := e.used.Release(give); err != nil && e.fault == nil {
			e.fault = fmt.Errorf("background release on %s: %w", a.Node, err)
		}
		a.GPUs = a.GPUs[:len(a.GPUs)-k]
		e.bg.held -= k
		n -= k
	}
	e.backgroundQuotas()
}
