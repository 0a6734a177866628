package queuereport

import "fmt"

// checkShares refuses pool shares outside 0..1 (NaN included).
func (t *QueueTarget) checkShares() error {
	for _, v := range [...]struct {
		name string
		v    float64
	}{{"min_share", t.MinShare}, {"max_share", t.MaxShare}} {
		if !(v.v >= 0 && v.v <= 1) {
			return fmt.Errorf("targets: queue %q: %s must be within 0..1, got %v", t.Queue, v.name, v.v)
		}
	}
	return nil
}

// setPoolShares fills each queue group's MinShare, MaxShare and PoolShare
// from the finished groups (Compute and Assemble both call it, so both give
// the same values): PoolShare is the whole queue's GPU-seconds in the
// group's scope (its pool when the report is grouped by pool, else every
// pool of capacity) over the scope's capacity GPUs × the observed window
// (Window.From to End). Groups without a queue key get nothing.
func setPoolShares(r *Report, targets []QueueTarget, capacity []PoolCapacity) {
	grouped := map[string]bool{}
	for _, k := range r.Options.GroupBy {
		grouped[k] = true
	}
	if !grouped[KeyQueue] {
		return
	}
	seconds := r.End.Sub(r.Options.Window.From).Seconds()
	caps := make(map[string]float64, len(capacity))
	var all float64
	for _, c := range capacity {
		if c.GPUs > 0 {
			caps[c.Pool] += c.GPUs
			all += c.GPUs
		}
	}
	byQueue := make(map[string]*QueueTarget, len(targets))
	for i := range targets {
		byQueue[targets[i].Queue] = &targets[i]
	}
	scope := func(g *Group) [2]string {
		if grouped[KeyPool] {
			return [2]string{g.Key[KeyQueue], g.Key[KeyPool]}
		}
		return [2]string{g.Key[KeyQueue], ""}
	}
	delivered := map[[2]string]float64{}
	for i := range r.Groups {
		delivered[scope(&r.Groups[i])] += r.Groups[i].GPUSeconds
	}
	for i := range r.Groups {
		g := &r.Groups[i]
		if t := byQueue[g.Key[KeyQueue]]; t != nil {
			if t.MinShare > 0 {
				g.MinShare = floatPtr(t.MinShare)
			}
			if t.MaxShare > 0 {
				g.MaxShare = floatPtr(t.MaxShare)
			}
		}
		k := scope(g)
		den := all
		if grouped[KeyPool] {
			den = caps[k[1]]
		}
		if den > 0 && seconds > 0 {
			g.PoolShare = floatPtr(delivered[k] / (den * seconds))
		}
	}
}
