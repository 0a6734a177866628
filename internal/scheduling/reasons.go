package scheduling

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// describeRequest renders a request as "needs 4 × ≥81920 MiB H100|H200 on one
// node" (shares: "needs 250 milli-GPU on 1 × T4"), with CPU and host memory
// when asked for. It is built once per shape.
func describeRequest(r *ResourceRequest, topo Topology) string {
	b := make([]byte, 0, 96)
	b = append(b, "needs "...)
	if r.GPUs == 0 {
		b = append(b, "no GPU"...)
	} else {
		if m := r.MilliPerDevice(); m < MilliPerGPU {
			b = strconv.AppendInt(b, int64(m), 10)
			b = append(b, " milli-GPU on "...)
		}
		b = strconv.AppendInt(b, int64(r.GPUs), 10)
		b = append(b, " × "...)
		if r.GPUMemoryMiB > 0 {
			b = append(b, "≥"...)
			b = strconv.AppendInt(b, r.GPUMemoryMiB, 10)
			b = append(b, " MiB "...)
		}
		if len(r.GPUModels) > 0 {
			b = append(b, strings.Join(r.GPUModels, "|")...)
		} else {
			b = append(b, "GPU"...)
		}
		b = append(b, unitPhrase(topo, r.GPUs)...)
	}
	if r.CPUMilli > 0 {
		b = append(b, " with "...)
		b = strconv.AppendInt(b, r.CPUMilli, 10)
		b = append(b, " milli-CPU"...)
	}
	if r.MemoryMiB > 0 {
		b = append(b, " with "...)
		b = strconv.AppendInt(b, r.MemoryMiB, 10)
		b = append(b, " MiB host memory"...)
	}
	return string(b)
}

// unitPhrase says where a topology wants its GPUs together.
func unitPhrase(topo Topology, count int) string {
	switch topo {
	case TopologySameNode:
		return " on one node"
	case TopologyNVLinkDomain:
		return " in one NVLink domain"
	case TopologyWholeNodes:
		return " on whole nodes"
	case TopologyAny:
		if count > 1 {
			return " anywhere in the pool"
		}
		return ""
	}
	return " with unknown topology " + strconv.Quote(string(topo))
}

// groupName names the unit a topology groups GPUs in, for "largest free group ...".
func groupName(topo Topology) string {
	switch topo {
	case TopologySameNode:
		return "on one node"
	case TopologyNVLinkDomain:
		return "in one NVLink domain"
	case TopologyWholeNodes:
		return "on whole free nodes"
	}
	return "in the pool"
}

// appendInt appends " <n> <what>" style quantities.
func appendQty(b []byte, n int, what string) []byte {
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, what...)
}

// heldStatus is the wait of a held job.
func heldStatus() (string, string) {
	return "held by its owner or an operator", HeldReEvaluate
}

// HeldReEvaluate is the re-evaluation condition of the reason held, for the
// cycle's status and for the wait event a hold opens (store.SetHold).
const HeldReEvaluate = "when the hold is released"

// poolUnavailableStatus explains an unknown, drained or fully cordoned pool.
func poolUnavailableStatus(name string, ps *poolState) (string, string) {
	q := strconv.Quote(name)
	switch {
	case name == "":
		return "the request names no pool", "when the job is resubmitted with a pool"
	case ps == nil:
		return "pool " + q + " is unknown", "when pool " + q + " is added to the inventory"
	case !ps.available:
		return "pool " + q + " is drained or cordoned", "when an operator makes pool " + q + " available"
	}
	return "pool " + q + " has no schedulable node (all " + strconv.Itoa(len(ps.nodes)) + " cordoned or drained)",
		"when an operator uncordons a node of pool " + q
}

// environmentStatus lists the prerequisites that are not ready.
func environmentStatus(prs []Prerequisite) (string, string) {
	var detail, names strings.Builder
	for _, p := range prs {
		if p.Ready {
			continue
		}
		if names.Len() > 0 {
			detail.WriteString("; ")
			names.WriteString(", ")
		}
		detail.WriteString("prerequisite ")
		detail.WriteString(strconv.Quote(p.Name))
		detail.WriteString(" not ready")
		if p.Message != "" {
			detail.WriteString(": ")
			detail.WriteString(p.Message)
		}
		names.WriteString(p.Name)
	}
	return detail.String(), "when " + names.String() + " ready"
}

// notReady reports whether any prerequisite is not ready.
func notReady(prs []Prerequisite) bool {
	for _, p := range prs {
		if !p.Ready {
			return true
		}
	}
	return false
}

// preemptionStatus explains a job whose victims are being checkpointed.
func preemptionStatus(victims []string) (string, string) {
	return "preemption in progress: checkpointing and releasing " + strconv.Itoa(len(victims)) + " victim job(s) " + strings.Join(victims, ", "),
		"when the preemption workflow has released the victims' GPUs"
}

// noMatchingStatus says why the shape cannot run even on the empty pool.
func noMatchingStatus(ps *poolState, sh *shapeInfo) (string, string) {
	b := make([]byte, 0, 160)
	b = append(b, sh.desc...)
	b = append(b, "; pool "...)
	b = append(b, ps.name...)
	b = append(b, " has "...)
	b = appendQty(b, sh.matching, " matching healthy GPUs on schedulable nodes")
	switch {
	case !validTopology(sh.topo):
		b = append(b, ", but the topology is not one of any, same-node, nvlink-domain"...)
	case sh.count < 0:
		b = append(b, ", but the GPU count is negative"...)
	case sh.selectorNodes == 0:
		b = append(b, ", but no schedulable node matches the node selector"...)
	case sh.count > 0 && sh.emptyLargest < sh.count:
		b = append(b, ", largest group "...)
		b = append(b, groupName(sh.topo)...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(sh.emptyLargest), 10)
	default:
		b = append(b, ", but no node with them has the CPU or host memory asked for"...)
	}
	return string(b), "when the request is changed or matching capacity is added to pool " + ps.name + "; waiting will not help"
}

// quotaStatus explains a quota refusal with the project's numbers.
func quotaStatus(project, pool string, v quotaVerdict) (string, string) {
	b := make([]byte, 0, 200)
	b = append(b, "project "...)
	b = append(b, project...)
	b = append(b, " uses "...)
	b = strconv.AppendInt(b, v.row.used, 10)
	b = append(b, " of nominal "...)
	b = strconv.AppendInt(b, v.row.q.NominalMilli, 10)
	b = append(b, " milli-GPU in pool "...)
	b = append(b, pool...)
	b = append(b, " and needs "...)
	b = strconv.AppendInt(b, v.need, 10)
	b = append(b, " more (borrowing limit "...)
	b = strconv.AppendInt(b, v.row.q.BorrowingLimitMilli, 10)
	b = append(b, "); "...)
	b = append(b, v.why...)
	if reach := v.row.q.NominalMilli + v.row.q.BorrowingLimitMilli; v.need > reach {
		// No release of the project's own jobs can make room: the request
		// alone is larger than what the quota can ever grant.
		return string(b), "only when the quota is raised: the request alone needs " + strconv.FormatInt(v.need, 10) +
			" milli-GPU, more than nominal + borrowing limit " + strconv.FormatInt(reach, 10) + "; waiting will not help"
	}
	re := "when project " + project + "'s usage in pool " + pool + " is at most " +
		strconv.FormatInt(max(0, v.row.q.NominalMilli-v.need), 10) + " milli-GPU or its quota is raised"
	return string(b), re
}

// capacityStatus renders the detail and re-evaluation condition of a job
// blocked by capacity (reserved_for_higher_priority, fragmented or
// capacity_busy) from the quantities in rc. buf is scratch space.
func capacityStatus(buf []byte, sh *shapeInfo, rc *reasonCache) []byte {
	b := append(buf[:0], sh.desc...)
	b = append(b, "; "...)
	b = appendQty(b, sh.matching, " match in pool, ")
	b = appendQty(b, rc.free, " free")
	if rc.reserved > 0 {
		b = append(b, " ("...)
		b = appendQty(b, rc.reserved, " reserved for higher-ranked jobs)")
	}
	rc.reEval = sh.wantText()
	switch rc.reason {
	case vocab.ReasonReservedForHigherPriority:
		b = append(b, "; it fits only on GPUs reserved for job "...)
		b = append(b, rc.blocking...)
		rc.reEval = sh.reservedText(rc.blocking)
	case vocab.ReasonFragmented:
		b = append(b, ", largest free group "...)
		b = append(b, groupName(sh.topo)...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(rc.largest), 10)
		if rc.largest >= sh.count {
			b = append(b, "; no node holding them has the CPU or host memory free"...)
		}
	}
	rc.detail = string(b)
	return b
}

// reservedText is the re-evaluation condition of a job blocked by blocking's
// reservation; the last one built is kept on the shape.
func (sh *shapeInfo) reservedText(blocking string) string {
	if sh.reservedFor != blocking || sh.reservedWant == "" {
		sh.reservedFor = blocking
		sh.reservedWant = "when job " + blocking + " starts or no longer reserves them, or " +
			strings.TrimPrefix(sh.wantText(), "when ") + " outside reservations"
	}
	return sh.reservedWant
}

// wantText is the shape's capacity condition, "when 4 matching GPU(s) on one
// node are free", built once.
func (sh *shapeInfo) wantText() string {
	if sh.want == "" {
		if sh.milli < MilliPerGPU {
			sh.want = "when a matching GPU has " + strconv.Itoa(int(sh.milli)) + " milli-GPU free"
		} else {
			sh.want = "when " + strconv.Itoa(sh.count) + " matching GPU(s)" + unitPhrase(sh.topo, sh.count) + " are free"
		}
	}
	return sh.want
}

// appendAgingClause adds ", or at <time> when aging lifts rank above job X".
func appendAgingClause(reEval string, at time.Time, above string) string {
	b := make([]byte, 0, len(reEval)+80)
	b = append(b, reEval...)
	b = append(b, ", or at "...)
	b = at.UTC().AppendFormat(b, time.RFC3339)
	b = append(b, " when aging lifts rank above job "...)
	b = append(b, above...)
	return string(b)
}

// appendNeverClause adds "; aging never lifts rank above job X: …" with the
// numbers of ot (Overtake.Never), in whole points: the gap and what each job
// can still gain.
func appendNeverClause(reEval string, ot *Overtake) string {
	pts := func(b []byte, v float64) []byte { return strconv.AppendFloat(b, math.Round(v), 'f', 0, 64) }
	b := make([]byte, 0, len(reEval)+160)
	b = append(b, reEval...)
	b = append(b, "; aging never lifts rank above job "...)
	b = append(b, ot.AheadJobID...)
	b = append(b, ": it is "...)
	b = pts(b, ot.GapPoints)
	b = append(b, " points ahead, this job's credit can still grow "...)
	b = pts(b, ot.HeadroomPoints)
	b = append(b, " (bound "...)
	b = pts(b, ot.BoundPoints)
	b = append(b, "), its own "...)
	b = pts(b, ot.AheadHeadroomPoints)
	return string(b)
}
