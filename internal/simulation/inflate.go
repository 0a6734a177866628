package simulation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// InflateConfig is a packing study by workload inflation (Weng et al.,
// "Beware of Fragmentation", USENIX ATC '23, §5): Ratios are multiples of the
// cluster's GPU capacity that the arrived GPU requests reach, Seed the
// arrival order's seed, Rules the placement rules compared (each on the
// same arrivals).
type InflateConfig struct {
	Ratios []float64
	Seed   uint64
	Rules  []scheduling.PlacementRule
}

// MaxInflateRatio bounds a stated ratio (arrivals grow with it).
const MaxInflateRatio = 10

// Validate returns an error naming the field when a ratio is not in
// (0, MaxInflateRatio], the ratios repeat, or no rule is given.
func (c InflateConfig) Validate() error {
	if len(c.Ratios) == 0 {
		return errors.New("inflate: no ratio given")
	}
	for i, r := range c.Ratios {
		if !(r > 0 && r <= MaxInflateRatio) {
			return fmt.Errorf("inflate: ratio %v is not in (0, %d]", r, MaxInflateRatio)
		}
		if slices.Contains(c.Ratios[:i], r) {
			return fmt.Errorf("inflate: ratio %v is given twice", r)
		}
	}
	if len(c.Rules) == 0 {
		return errors.New("inflate: no placement rule given")
	}
	return nil
}

// InflateReport is the study's result. Milli-GPU throughout.
type InflateReport struct {
	Nodes       int          `json:"nodes"`
	GPUs        int          `json:"gpus"`
	TotalMilli  int64        `json:"total_milli_gpu"`
	Pods        int          `json:"pods"`
	GPUPods     int          `json:"gpu_pods"`
	Seed        uint64       `json:"seed"`
	Ratios      []float64    `json:"ratios"`
	Arrivals    int          `json:"arrivals"`
	Assumptions []string     `json:"assumptions"`
	Runs        []InflateRun `json:"runs"`
}

// InflateRun is one rule's run over the arrivals.
type InflateRun struct {
	Rule         scheduling.PlacementRule `json:"rule"`
	Points       []InflatePoint           `json:"points"`
	FirstFailure *FirstFailure            `json:"first_failure"` // nil when every arrival fitted
}

// InflatePoint is the state when the arrived GPU requests first reached
// Ratio × the cluster's capacity (or when arrivals ended, for the last).
type InflatePoint struct {
	Ratio            float64 `json:"ratio"`
	Arrived          int     `json:"arrived"`          // pods arrived so far
	RequestedMilli   int64   `json:"requested_milli"`  // their GPU requests
	AllocatedMilli   int64   `json:"allocated_milli"`  // placed on GPUs
	AllocationRatio  float64 `json:"allocation_ratio"` // AllocatedMilli ÷ TotalMilli
	GPUsInUse        int     `json:"gpus_in_use"`      // GPUs with any allocation
	UnallocatedMilli int64   `json:"unallocated_milli"`
	// FragmentedMilli is the unallocated milli-GPU the target workload (the
	// pod list's request distribution) cannot use, expected over it (ATC '23
	// FGD §4.1; scheduling.PackStats).
	FragmentedMilli float64 `json:"fragmented_milli"`
	Failed          int     `json:"failed"`       // arrivals that did not fit (dropped), so far
	FailedMilli     int64   `json:"failed_milli"` // their GPU requests
	// Reasons counts the failed arrivals so far by wait reason.
	Reasons map[vocab.WaitReason]int `json:"reasons"`
}

// FirstFailure is the first arrival that did not fit.
type FirstFailure struct {
	Arrival         int              `json:"arrival"` // 1-based arrival number
	Pod             string           `json:"pod"`
	Reason          vocab.WaitReason `json:"reason"`
	RequestedRatio  float64          `json:"requested_ratio"`  // arrived GPU requests ÷ capacity, with it
	AllocationRatio float64          `json:"allocation_ratio"` // allocated ÷ capacity then
}

// arrival is one pod arriving: its row in the list.
type arrival = int32

// inflateArrivals is the arrival order: every pod once in a seeded shuffle,
// then pods drawn uniformly with replacement, until the arrived GPU requests
// reach maxRatio × total (also within the first pass). It also returns the
// cumulative requested milli-GPU after each arrival.
func inflateArrivals(milli []int64, total int64, maxRatio float64, seed uint64) ([]arrival, []int64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	n := len(milli)
	target := int64(math.Ceil(maxRatio * float64(total)))
	order := make([]arrival, 0, n+n/2)
	cum := make([]int64, 0, n+n/2)
	var sum int64
	add := func(i int) bool {
		order = append(order, arrival(i))
		sum += milli[i]
		cum = append(cum, sum)
		return sum >= target
	}
	for _, i := range rng.Perm(n) {
		if add(i) {
			return order, cum
		}
	}
	if sum == 0 {
		return order, cum // no GPU requests: clones would never reach a ratio
	}
	for !add(rng.IntN(n)) {
	}
	return order, cum
}

// Inflate runs the study on the GPU nodes of nodes (alibaba.Pools) with the
// pods of pods, one run per rule, writing a progress line per rule and
// ratio to progress (nil for none). Every rule sees the same arrivals; a pod
// that does not fit is recorded with its reason and dropped, never retried;
// nothing departs. The target workload of the scored rules and of the
// fragmentation measure is the pod list's request distribution. Errors: an
// invalid configuration, no GPU nodes, no pods.
func Inflate(nodes []alibaba.NodeRow, pods []alibaba.PodRow, cfg InflateConfig, progress io.Writer) (*InflateReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pools := alibaba.Pools(nodes, alibaba.PoolOptions{})
	pool := &pools[0]
	if len(pool.Nodes) == 0 {
		return nil, errors.New("inflate: the node list has no GPU nodes")
	}
	if len(pods) == 0 {
		return nil, errors.New("inflate: the pod list is empty")
	}
	ratios := slices.Clone(cfg.Ratios)
	slices.Sort(ratios)
	rep := &InflateReport{Nodes: len(pool.Nodes), Pods: len(pods), Seed: cfg.Seed, Ratios: ratios}
	for _, n := range pool.Nodes {
		rep.GPUs += len(n.GPUs)
	}
	rep.TotalMilli = int64(rep.GPUs) * scheduling.MilliPerGPU
	reqs := make([]scheduling.ResourceRequest, len(pods))
	milli := make([]int64, len(pods))
	workload := make([]scheduling.WorkloadShape, len(pods))
	for i, p := range pods {
		reqs[i] = alibaba.Request(p, pool.Name)
		milli[i] = reqs[i].TotalMilli()
		workload[i] = scheduling.WorkloadShape{Request: reqs[i], Weight: 1}
		if p.NumGPU > 0 {
			rep.GPUPods++
		}
	}
	order, cum := inflateArrivals(milli, rep.TotalMilli, ratios[len(ratios)-1], cfg.Seed)
	rep.Arrivals = len(order)
	rep.Assumptions = inflateAssumptions(rep)
	for _, rule := range cfg.Rules {
		start := time.Now()
		run := InflateRun{Rule: rule}
		pk := scheduling.NewPacker(pool, rule, workload)
		reasons := map[vocab.WaitReason]int{}
		var failed int
		var failedMilli int64
		next := 0
		for k, i := range order {
			out := pk.Place(&reqs[i])
			if !out.Placed {
				failed++
				failedMilli += milli[i]
				reasons[out.Reason]++
				if run.FirstFailure == nil {
					st := pk.Stats()
					run.FirstFailure = &FirstFailure{Arrival: k + 1, Pod: pods[i].Name, Reason: out.Reason,
						RequestedRatio:  float64(cum[k]) / float64(rep.TotalMilli),
						AllocationRatio: float64(st.AllocatedMilli) / float64(rep.TotalMilli)}
				}
			}
			for next < len(ratios) && (float64(cum[k]) >= ratios[next]*float64(rep.TotalMilli) || k == len(order)-1) {
				st := pk.Stats()
				pt := InflatePoint{Ratio: ratios[next], Arrived: k + 1, RequestedMilli: cum[k],
					AllocatedMilli: st.AllocatedMilli, AllocationRatio: float64(st.AllocatedMilli) / float64(st.TotalMilli),
					GPUsInUse: st.GPUsInUse, UnallocatedMilli: st.TotalMilli - st.AllocatedMilli,
					FragmentedMilli: st.FragmentedMilli, Failed: failed, FailedMilli: failedMilli,
					Reasons: copyReasons(reasons)}
				run.Points = append(run.Points, pt)
				if progress != nil {
					fmt.Fprintf(progress, "inflate: %s: %.2f× arrived: %d pods, %.2f %% of milli-GPU allocated, %d failed (%.1fs)\n",
						rule, pt.Ratio, pt.Arrived, 100*pt.AllocationRatio, failed, time.Since(start).Seconds())
				}
				next++
			}
		}
		rep.Runs = append(rep.Runs, run)
	}
	return rep, nil
}

// copyReasons copies a reason count.
func copyReasons(m map[vocab.WaitReason]int) map[vocab.WaitReason]int {
	out := make(map[vocab.WaitReason]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// inflateAssumptions states the study's rules in the report.
func inflateAssumptions(rep *InflateReport) []string {
	first := fmt.Sprintf("every pod of the list (CPU-only, failed and pending ones included) arrives once, in an order shuffled with seed %d; "+
		"then pods drawn uniformly with replacement from the list (clones) keep arriving until the arrived GPU requests reach %.2f × the cluster's %d GPUs",
		rep.Seed, rep.Ratios[len(rep.Ratios)-1], rep.GPUs)
	if rep.Arrivals < rep.Pods {
		first = fmt.Sprintf("the list's GPU requests exceed %.2f × the cluster's %d GPUs: only the first %d pods of the shuffled list (seed %d) arrive, no clones",
			rep.Ratios[len(rep.Ratios)-1], rep.GPUs, rep.Arrivals, rep.Seed)
	}
	return []string{
		first,
		"the trace's times, QoS and phases are ignored; nothing departs",
		"a pod that does not fit is recorded with its wait reason and dropped, never retried (for comparability with the FGD paper's evaluation)",
		fmt.Sprintf("the cluster is the node list's %d GPU nodes (CPU-only nodes are left out); pods are placed on one node, with the node's CPU milli and memory MiB, the pod's gpu_spec and GPU sharing as the scheduling core models them", rep.Nodes),
		"fragmented milli-GPU is the expected fragmentation w.r.t. the pod list's request distribution (ATC '23 FGD §4.1): per node, the free milli-GPU a request cannot use (all of it when the request cannot run there), weighted by how often each request occurs",
	}
}

// WriteJSON writes the report as indented JSON.
func (r *InflateReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report as text: the assumptions, one table per rule
// and the comparison at each ratio.
func (r *InflateReport) WriteText(w io.Writer) error {
	var err error
	p := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, args...)
		}
	}
	p("Packing under workload inflation: %d GPU nodes, %d GPUs (%d milli-GPU), %d pods in the list (%d with GPUs), %d arrivals, seed %d\n",
		r.Nodes, r.GPUs, r.TotalMilli, r.Pods, r.GPUPods, r.Arrivals, r.Seed)
	p("Assumptions:\n")
	for _, a := range r.Assumptions {
		p("  - %s\n", a)
	}
	for _, run := range r.Runs {
		p("\nRule %s\n", run.Rule)
		p("  %-6s %8s %10s %9s %8s %13s %12s %7s  %s\n", "ratio", "arrived", "requested", "allocated", "GPUs>0", "unallocated", "fragmented", "failed", "reasons of the failed")
		for _, pt := range run.Points {
			p("  %-6.2f %8d %10.1f %8.2f%% %8d %13.1f %12.1f %7d  %s\n", pt.Ratio, pt.Arrived, float64(pt.RequestedMilli)/1000,
				100*pt.AllocationRatio, pt.GPUsInUse, float64(pt.UnallocatedMilli)/1000, pt.FragmentedMilli/1000, pt.Failed, reasonText(pt.Reasons))
		}
		if f := run.FirstFailure; f != nil {
			p("  first failure: arrival %d (%s, %s) at %.3f × requested, %.2f %% allocated\n", f.Arrival, f.Pod, f.Reason,
				f.RequestedRatio, 100*f.AllocationRatio)
		} else {
			p("  no arrival failed\n")
		}
	}
	p("\n(requested, unallocated and fragmented in GPUs = milli-GPU / 1000)\n")
	if len(r.Runs) > 1 {
		p("\nGPU allocation ratio by rule\n  %-6s", "ratio")
		for _, run := range r.Runs {
			p(" %14s", run.Rule)
		}
		p("\n")
		for i, ratio := range r.Ratios {
			p("  %-6.2f", ratio)
			for _, run := range r.Runs {
				if i < len(run.Points) {
					p(" %13.2f%%", 100*run.Points[i].AllocationRatio)
				}
			}
			p("\n")
		}
	}
	return err
}

// reasonText lists reason counts in vocab.WaitReasons order.
func reasonText(m map[vocab.WaitReason]int) string {
	s := ""
	for _, r := range vocab.WaitReasons {
		if n := m[r]; n > 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s %d", r, n)
		}
	}
	if s == "" {
		return "-"
	}
	return s
}
