package philly

import (
	"fmt"
	"math"
	"time"

	"github.com/gpugov/gpugov/internal/trace"
)

// BackgroundStats summarises a Background derivation for the report.
type BackgroundStats struct {
	FromS, ToS   int64   // trace seconds the node sequence covers, in whole steps [FromS, ToS)
	Steps        int     // steps of the coverage
	EmptySteps   int     // steps without a usable sample (they keep the previous step's value)
	MeanBusy     float64 // mean of busy(k) over the covered steps, GPUs
	MeanSampled  float64 // mean of the trace jobs' zero-wait GPUs over them
	MeanHeld     float64 // mean background held, GPUs
	MaxHeld      int     // the largest step
	ClampedSteps int     // steps where the jobs alone exceed busy(k) (background 0)
}

// Background derives the pool occupancy that the trace's jobs do not
// explain, in steps of stepS seconds from trace second 0 (epoch): the
// public philly.csv is a sample of Philly's work (82,247 of 117,325 jobs,
// and not every tenant's), and the cluster was busier than those jobs
// alone keep it. For step k, wholly or partly covered by samples:
//
//	busy(k)       = mean over the step's samples with active > 0 and total > 0 of active ÷ total, × poolGPUs
//	sampled(k)    = GPU-seconds the jobs would hold in the step if each ran from its submit for its run time
//	                (its request's GPUs, whole nodes included), ÷ stepS
//	background(k) = round(busy(k) − sampled(k)), clamped to 0..poolGPUs
//
// so the fraction of nodes reporting GPU use is read as the fraction of
// the pool's GPUs in use (a node counts as active when any of its GPUs
// reported, so this is an upper bound of the busy share), scaled to the
// simulated pool rather than the sequence's total nodes. A sample with no
// active node (a gap of the utilisation log: the log reports none while
// the cluster runs jobs) is not used; a step without a usable sample keeps
// the previous step's value. Outside the sequence's coverage the background
// is 0. The result is a step function (trace.Trace.Background): an entry
// where the value changes, a closing entry of 0 GPUs at the coverage's end.
// It is deterministic for its input. stepS must be > 0 and poolGPUs ≥ 0.
func Background(samples []NodeSample, jobs []trace.Job, epoch time.Time, stepS int64, poolGPUs int) ([]trace.Occupancy, BackgroundStats) {
	var st BackgroundStats
	if len(samples) == 0 || stepS <= 0 {
		return nil, st
	}
	sec := func(t time.Time) int64 { return int64(t.Sub(epoch) / time.Second) }
	step := func(s int64) int64 { return int64(math.Floor(float64(s) / float64(stepS))) }
	k0, k1 := step(sec(samples[0].At)), step(sec(samples[len(samples)-1].At))
	n := int(k1 - k0 + 1)
	frac, cnt := make([]float64, n), make([]int, n)
	for _, s := range samples {
		if s.Active == 0 || s.Total == 0 {
			continue
		}
		k := step(sec(s.At)) - k0
		frac[k] += float64(s.Active) / float64(s.Total)
		cnt[k]++
	}
	// GPU-seconds of the jobs per step: the partial first and last steps
	// directly, the whole steps between through a difference array.
	gpuS, whole := make([]float64, n), make([]float64, n+1)
	from, to := k0*stepS, (k1+1)*stepS
	for i := range jobs {
		j := &jobs[i]
		if !j.Scheduled || j.RunSeconds <= 0 {
			continue
		}
		a, b := max(j.Submit, from), min(j.Submit+j.RunSeconds, to)
		if a >= b {
			continue
		}
		g := float64(j.Spec.Request.GPUs)
		ka, kb := step(a)-k0, step(b-1)-k0
		if ka == kb {
			gpuS[ka] += g * float64(b-a)
			continue
		}
		gpuS[ka] += g * float64((ka+k0+1)*stepS-a)
		gpuS[kb] += g * float64(b-(kb+k0)*stepS)
		if kb > ka+1 {
			whole[ka+1] += g
			whole[kb] -= g
		}
	}
	var run float64
	for k := range n {
		run += whole[k]
		gpuS[k] += run * float64(stepS)
	}
	st.FromS, st.ToS, st.Steps = from, to, n
	var out []trace.Occupancy
	prev := 0
	for k := range n {
		v := prev
		sampled := gpuS[k] / float64(stepS)
		if cnt[k] == 0 {
			st.EmptySteps++
		} else {
			busy := frac[k] / float64(cnt[k]) * float64(poolGPUs)
			st.MeanBusy += busy
			d := math.Round(busy - sampled)
			if d <= 0 {
				st.ClampedSteps++
			}
			v = int(min(max(d, 0), float64(poolGPUs)))
		}
		st.MeanSampled += sampled
		st.MeanHeld += float64(v)
		st.MaxHeld = max(st.MaxHeld, v)
		if k == 0 || v != prev {
			out = append(out, trace.Occupancy{At: (int64(k) + k0) * stepS, GPUs: v})
		}
		prev = v
	}
	if used := n - st.EmptySteps; used > 0 {
		st.MeanBusy /= float64(used)
	}
	st.MeanSampled /= float64(n)
	st.MeanHeld /= float64(n)
	out = append(out, trace.Occupancy{At: to, GPUs: 0})
	return out, st
}

// backgroundAssumption states the derivation and its figures.
func backgroundAssumption(path string, stepS int64, pool int, st BackgroundStats) string {
	return fmt.Sprintf("Philly: background occupancy (simulation.background_step_s %d): the jobs of philly.csv are a sample of the cluster's work, so in each %d-s step from trace second %d to %d (%s, %d steps, %d without a usable sample keep the previous value; 0 outside) the pool holds round(active ÷ total nodes of %s × %d GPUs − the GPUs the trace's jobs would hold there starting at submit), at least 0, as GPUs no trace job can use: mean busy %.0f GPUs, jobs' zero-wait mean %.0f, background mean %.0f, max %d, %d steps clamped at 0",
		stepS, stepS, st.FromS, st.ToS, path, st.Steps, st.EmptySteps, path, pool, st.MeanBusy, st.MeanSampled, st.MeanHeld, st.MaxHeld, st.ClampedSteps)
}
