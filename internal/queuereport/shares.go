package queuereport

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// PoolReasons is one pool's wait-reason shares over the window and the
// verdict naming its main problem (docs/design.md §6; the definitions are
// in the package documentation, "Reason shares"). Seconds are job-seconds
// (each waiting job counts 1) and GPU-seconds (each counts its requested
// GPUs, a share of g milli-GPU as g/1000).
type PoolReasons struct {
	Pool string `json:"pool"`
	// WaitS and WaitGPUSeconds are the pool's waiting in the reasons of the
	// verdict groups (every reason but not_yet_evaluated): the
	// denominators of the groups' and reasons' shares.
	WaitS          float64 `json:"wait_s"`
	WaitGPUSeconds float64 `json:"wait_gpu_seconds"`
	// Groups are the verdict groups in vocab.ReasonGroups order, every one
	// listed (with zero time when none of its reasons had any); their
	// shares add up to 1 when the pool waited.
	Groups []GroupShare `json:"groups"`
	// ServiceLatency is the service-latency group (not_yet_evaluated: the
	// time before the scheduler first looked at a job), kept out of the
	// shares above; its shares are of all the pool's waiting, its own
	// included.
	ServiceLatency GroupShare `json:"service_latency"`
	// MainProblem names the group with the largest share on MainBasis:
	// one group, or every group tied at the top (equal time, exactly);
	// empty when the pool did not wait.
	MainProblem []vocab.ReasonGroup `json:"main_problem"`
	// MainShare is the share of each main group on MainBasis; null when
	// the pool did not wait.
	MainShare *float64 `json:"main_share"`
	// MainBasis is what the verdict weighs: BasisGPUSeconds, or
	// BasisJobSeconds when no waiting job requested a GPU; "" when the pool
	// did not wait.
	MainBasis string `json:"main_basis"`
	// Verdict is the one line naming the main problem with its share, e.g.
	// "pool a100: main problem is capacity — 62.0% of waiting GPU-seconds
	// (capacity_busy 55.0%, preemption_in_progress 7.0%)".
	Verdict string `json:"verdict"`
}

// The bases of a verdict (PoolReasons.MainBasis).
const (
	BasisGPUSeconds = "gpu_seconds"
	BasisJobSeconds = "job_seconds"
)

// GroupShare is one reason group's time in a pool and its share.
type GroupShare struct {
	Group      vocab.ReasonGroup `json:"group"`
	WaitS      float64           `json:"wait_s"`      // job-seconds
	GPUSeconds float64           `json:"gpu_seconds"` // GPU-seconds
	Share      *float64          `json:"share"`       // of the pool's job-seconds; null when it has none
	GPUShare   *float64          `json:"gpu_share"`   // of the pool's GPU-seconds; null when it has none
	// Reasons are the group's reasons with any time, in catalogue order.
	Reasons []ReasonShare `json:"reasons"`
}

// ReasonShare is one wait reason's time in a pool and its share, on the
// same denominators as its group's.
type ReasonShare struct {
	Reason     vocab.WaitReason `json:"reason"`
	WaitS      float64          `json:"wait_s"`
	GPUSeconds float64          `json:"gpu_seconds"`
	Share      *float64         `json:"share"`
	GPUShare   *float64         `json:"gpu_share"`
}

// poolTime is one pool's time per reason, before shares: its name, the
// jobs counted in it (as Group.Jobs) and its reasons (any order).
type poolTime struct {
	pool    string
	jobs    int
	reasons []reasonSec
}

// poolTimes returns Compute's per-pool reason times.
func (c *computer) poolTimes() []poolTime {
	out := make([]poolTime, len(c.pools.names))
	for p, name := range c.pools.names {
		out[p] = poolTime{pool: name, jobs: c.poolJobs[p]}
		for rid, r := range c.poolReasons[p] {
			if !r.job.isZero() {
				out[p].reasons = append(out[p].reasons, reasonSec{reason: c.reasons.names[rid], sec: r.job, gpu: r.gpu})
			}
		}
	}
	return out
}

// summaryPoolTimes returns the per-pool reason times of a merged summary,
// which must be grouped by pool.
func summaryPoolTimes(m *Summary) []poolTime {
	idx := map[string]int{}
	var out []poolTime
	for gi := range m.groups {
		g := &m.groups[gi]
		i, ok := idx[g.key[3]]
		if !ok {
			i = len(out)
			idx[g.key[3]] = i
			out = append(out, poolTime{pool: g.key[3]})
		}
		out[i].jobs += g.alive + g.submitted - g.zeroAtFrom
		out[i].reasons = mergeReasons(out[i].reasons, g.reasons)
	}
	return out
}

// reasonShares turns per-pool reason times into the report's ReasonShares:
// one entry per pool with a job counted in the window or any waiting, by
// pool name.
func reasonShares(pools []poolTime) []PoolReasons {
	slices.SortFunc(pools, func(a, b poolTime) int { return strings.Compare(a.pool, b.pool) })
	out := make([]PoolReasons, 0, len(pools))
	for _, p := range pools {
		if p.jobs == 0 && len(p.reasons) == 0 {
			continue
		}
		out = append(out, poolShares(p))
	}
	return out
}

// groupTime is one group's time while shares are computed.
type groupTime struct {
	group   vocab.ReasonGroup
	job     secAcc
	gpu     secAcc
	reasons []reasonSec // catalogue order
}

// poolShares computes one pool's shares and verdict.
func poolShares(p poolTime) PoolReasons {
	byReason := make(map[vocab.WaitReason]reasonSec, len(p.reasons))
	for _, r := range p.reasons {
		byReason[vocab.WaitReason(r.reason)] = r
	}
	groups := make([]groupTime, len(vocab.ReasonGroups))
	var evalJob, evalGPU, allJob, allGPU secAcc
	for gi, g := range vocab.ReasonGroups {
		gt := &groups[gi]
		gt.group = g
		for _, ri := range vocab.Reasons {
			r, ok := byReason[ri.Code]
			if ri.Group != g || !ok {
				continue
			}
			gt.reasons = append(gt.reasons, r)
			gt.job.merge(r.sec)
			gt.gpu.merge(r.gpu)
		}
		allJob.merge(gt.job)
		allGPU.merge(gt.gpu)
		if g.InVerdict() {
			evalJob.merge(gt.job)
			evalGPU.merge(gt.gpu)
		}
	}
	out := PoolReasons{Pool: p.pool, WaitS: evalJob.seconds(), WaitGPUSeconds: gpuSeconds(evalGPU),
		Groups: make([]GroupShare, 0, len(groups)-1), MainProblem: []vocab.ReasonGroup{}}
	for i := range groups {
		if groups[i].group.InVerdict() {
			out.Groups = append(out.Groups, groups[i].share(evalJob, evalGPU))
		} else {
			out.ServiceLatency = groups[i].share(allJob, allGPU)
		}
	}
	out.verdict(groups, evalJob, evalGPU, allJob)
	return out
}

// share returns the group's GroupShare on the denominators given.
func (gt *groupTime) share(denJob, denGPU secAcc) GroupShare {
	out := GroupShare{Group: gt.group, WaitS: gt.job.seconds(), GPUSeconds: gpuSeconds(gt.gpu),
		Share: ratioOf(gt.job, denJob), GPUShare: ratioOf(gt.gpu, denGPU), Reasons: make([]ReasonShare, 0, len(gt.reasons))}
	for _, r := range gt.reasons {
		out.Reasons = append(out.Reasons, ReasonShare{Reason: vocab.WaitReason(r.reason), WaitS: r.sec.seconds(),
			GPUSeconds: gpuSeconds(r.gpu), Share: ratioOf(r.sec, denJob), GPUShare: ratioOf(r.gpu, denGPU)})
	}
	return out
}

// verdict names the main problem: the verdict group with the most
// GPU-seconds (job-seconds when no waiting job requested a GPU), every
// group tied at the top on a tie.
func (pr *PoolReasons) verdict(groups []groupTime, evalJob, evalGPU, allJob secAcc) {
	name := keyValueLabel(pr.Pool)
	if evalJob.isZero() {
		pr.Verdict = fmt.Sprintf("pool %s: no waiting in window", name)
		if !allJob.isZero() {
			pr.Verdict += fmt.Sprintf(" but service latency (not_yet_evaluated %s, outside the shares)", durString(allJob.seconds()))
		}
		return
	}
	pr.MainBasis = BasisGPUSeconds
	basis := "GPU-seconds"
	weight := func(g *groupTime) secAcc { return g.gpu }
	if evalGPU.isZero() {
		pr.MainBasis, basis = BasisJobSeconds, "job-seconds (no waiting job requested a GPU)"
		weight = func(g *groupTime) secAcc { return g.job }
	}
	var best secAcc
	var main []*groupTime
	for i := range groups {
		g := &groups[i]
		if !g.group.InVerdict() {
			continue
		}
		switch w := weight(g); {
		case len(main) == 0 || w.compare(best) > 0:
			best, main = w, []*groupTime{g}
		case w.compare(best) == 0:
			main = append(main, g)
		}
	}
	den := evalGPU
	if pr.MainBasis == BasisJobSeconds {
		den = evalJob
	}
	share := best.seconds() / den.seconds()
	pr.MainShare = &share
	labels := make([]string, len(main))
	parts := make([]string, len(main))
	for i, g := range main {
		pr.MainProblem = append(pr.MainProblem, g.group)
		labels[i] = g.group.Label()
		rs := make([]string, len(g.reasons))
		for k, r := range g.reasons {
			w := r.gpu
			if pr.MainBasis == BasisJobSeconds {
				w = r.sec
			}
			rs[k] = fmt.Sprintf("%s %s", r.reason, pctText(w.seconds()/den.seconds()))
		}
		parts[i] = strings.Join(rs, ", ")
	}
	if len(main) == 1 {
		pr.Verdict = fmt.Sprintf("pool %s: main problem is %s — %s of waiting %s (%s)", name, labels[0], pctText(share), basis, parts[0])
		return
	}
	pr.Verdict = fmt.Sprintf("pool %s: main problem is a tie of %s — %s of waiting %s each (%s)", name,
		strings.Join(labels[:len(labels)-1], ", ")+" and "+labels[len(labels)-1], pctText(share), basis, strings.Join(parts, "; "))
}

// gpuSeconds converts milli-GPU-seconds to GPU-seconds.
func gpuSeconds(milli secAcc) float64 { return milli.seconds() / scheduling.MilliPerGPU }

// ratioOf returns a / b, nil when b is zero.
func ratioOf(a, b secAcc) *float64 {
	if b.isZero() {
		return nil
	}
	return floatPtr(a.seconds() / b.seconds())
}

// pctText writes a share as a percentage with one decimal: 62.0%.
func pctText(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }

// RenderReasonShares writes the reason shares of a report over window,
// observed until end: the window, then RenderPoolShares. It returns the
// writer's error.
func RenderReasonShares(w io.Writer, window Window, end time.Time, pools []PoolReasons) error {
	ew := &errWriter{w: w}
	ew.printf("Wait-reason shares per pool\n")
	ew.printf("window     %s – %s (observed until %s)\n", stamp(window.From), stamp(window.To), stamp(end))
	return firstErr(ew.err, RenderPoolShares(ew, pools))
}

// RenderPoolShares writes what the shares are of, then per pool its
// verdict line, each verdict group and its reasons with time, job-seconds
// and GPU-seconds and their shares, and the service latency apart (its
// shares are of all waiting). The service's report and the simulator's
// write their shares with it. It returns the writer's error.
func RenderPoolShares(w io.Writer, pools []PoolReasons) error {
	ew := &errWriter{w: w}
	ew.printf("shares of the waiting in the reasons scheduling cycles found, in job-seconds and GPU-seconds (× GPUs requested);\n")
	ew.printf("not_yet_evaluated (until a job's first evaluation) is service latency: outside the shares and the verdict, its share is of all waiting\n")
	if len(pools) == 0 {
		ew.printf("\nno pool had a job in the window\n")
	}
	for _, p := range pools {
		ew.printf("\n%s\n", p.Verdict)
		ew.printf("  %-34s %10s %10s %12s %10s\n", "GROUP / REASON", "WAITED", "SHARE", "GPU_S", "GPU_SHARE")
		for _, g := range p.Groups {
			shareRows(ew, g, g.Group.Label())
		}
		shareRows(ew, p.ServiceLatency, p.ServiceLatency.Group.Label()+" (apart)")
	}
	return ew.err
}

// shareRows writes a group's row and its reasons' rows.
func shareRows(ew *errWriter, g GroupShare, label string) {
	ew.printf("  %-34s %10s %10s %12s %10s\n", label, durString(g.WaitS), pct(g.Share), number(math.Round(g.GPUSeconds)), pct(g.GPUShare))
	for _, r := range g.Reasons {
		ew.printf("    %-32s %10s %10s %12s %10s\n", r.Reason, durString(r.WaitS), pct(r.Share), number(math.Round(r.GPUSeconds)), pct(r.GPUShare))
	}
}
