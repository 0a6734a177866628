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

// setShares fills the groups' pool and project shares from the finished
// groups; Compute and Assemble both call it, so both give the same values.
func setShares(r *Report, targets []QueueTarget, base ShareBase) {
	grouped := map[string]bool{}
	for _, k := range r.Options.GroupBy {
		grouped[k] = true
	}
	if grouped[KeyQueue] {
		setPoolShares(r, grouped, targets, base.Capacity)
	}
	if grouped[KeyProject] {
		setProjectShares(r, base.ProjectWeights)
	}
}

// setProjectShares sets each group's ProjectShare (the whole project's
// GPU-seconds over every group's) and ProjectTargetShare (its weight over
// the weights of the report's projects, a project not in weights weighing
// 1, as policy.ApplyProjectWeights normalises them for Plan).
func setProjectShares(r *Report, weights map[string]float64) {
	weight := func(p string) float64 {
		if w, ok := weights[p]; ok && w > 0 {
			return w
		}
		return 1
	}
	used := map[string]float64{}
	var total, wsum float64
	for i := range r.Groups {
		g := &r.Groups[i]
		p := g.Key[KeyProject]
		if _, seen := used[p]; !seen {
			wsum += weight(p)
		}
		used[p] += g.GPUSeconds
		total += g.GPUSeconds
	}
	for i := range r.Groups {
		g := &r.Groups[i]
		p := g.Key[KeyProject]
		g.ProjectTargetShare = floatPtr(weight(p) / wsum)
		if total > 0 {
			g.ProjectShare = floatPtr(used[p] / total)
		}
	}
}

// setPoolShares fills each queue group's MinShare, MaxShare and PoolShare:
// PoolShare is the whole queue's GPU-seconds in the group's scope (its pool
// when the report is grouped by pool, else every pool of capacity) over the
// scope's capacity GPUs × the observed window (Window.From to End).
func setPoolShares(r *Report, grouped map[string]bool, targets []QueueTarget, capacity []PoolCapacity) {
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
