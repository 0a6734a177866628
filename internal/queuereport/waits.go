package queuereport

import "fmt"

// buildWaits derives every job's waits from its submit time, runs and end (see
// the package documentation) and keeps those that can matter for the window:
// they start before the report end and end at or after the window start.
func (c *computer) buildWaits() error {
	c.waitFirst = make([]int32, len(c.jobs))
	c.waitCount = make([]int32, len(c.jobs))
	c.waits = make([]waitRec, 0, len(c.jobs)+len(c.runs)/4)
	c.startStarvation()
	for _, j := range c.order {
		c.waitFirst[j] = int32(len(c.waits))
		if err := c.jobWaits(j); err != nil {
			return err
		}
		c.waitCount[j] = int32(len(c.waits)) - c.waitFirst[j]
		c.noteJob(j)
	}
	return nil
}

// jobWaits appends job j's waits. It returns an error when the job's runs
// overlap or disagree with its first start, end or cancellation.
func (c *computer) jobWaits(j int32) error {
	jr := &c.jobs[j]
	id := c.in.Jobs[j].ID
	rs := c.runOrder[c.runOff[j]:c.runOff[j+1]]
	if len(rs) == 0 {
		if jr.firstStart != noTime {
			if jr.cww {
				return fmt.Errorf("job %q: cancelled_while_waiting after first_start needs the job's runs", id)
			}
			c.addWait(waitRec{a: jr.submit, b: jr.firstStart, job: j, how: endStart})
			return nil
		}
		w := waitRec{a: jr.submit, b: noTime, job: j, how: endOpen}
		if jr.end != noTime {
			w.b, w.how = jr.end, endOther
			if jr.cww {
				w.how = endCancel
			}
		}
		c.addWait(w)
		return nil
	}
	first := c.runs[rs[0]]
	if jr.firstStart != first.start {
		return fmt.Errorf("job %q: first_start must equal the start of its earliest run", id)
	}
	c.addWait(waitRec{a: jr.submit, b: first.start, job: j, how: endStart})
	for k := 1; k < len(rs); k++ {
		prev, next := c.runs[rs[k-1]], c.runs[rs[k]]
		if prev.end == noTime || prev.end > next.start {
			return fmt.Errorf("job %q: runs overlap (a run starts before the previous one ended)", id)
		}
		c.addWait(waitRec{a: prev.end, b: next.start, job: j, requeue: true, how: endStart})
	}
	return c.finalWait(j, c.runs[rs[len(rs)-1]])
}

// finalWait appends the wait after job j's last run, if there is one: the job
// was requeued and has not ended, or it ended (cancelled or otherwise) later
// than its last run.
func (c *computer) finalWait(j int32, last runRec) error {
	jr := &c.jobs[j]
	id := c.in.Jobs[j].ID
	switch {
	case last.end == noTime:
		if jr.end != noTime {
			return fmt.Errorf("job %q: has an end but its last run has none", id)
		}
	case jr.end == noTime:
		c.addWait(waitRec{a: last.end, b: noTime, job: j, requeue: true, how: endOpen})
	case jr.end < last.end:
		return fmt.Errorf("job %q: end is before the end of its last run", id)
	case jr.end > last.end:
		how := endOther
		if jr.cww {
			how = endCancel
		}
		c.addWait(waitRec{a: last.end, b: jr.end, job: j, requeue: true, how: how})
	case jr.cww:
		return fmt.Errorf("job %q: cancelled_while_waiting, but it ended with its last run", id)
	}
	return nil
}

// addWait keeps w when it can matter for the window.
func (c *computer) addWait(w waitRec) {
	if w.a < c.end && (w.how == endOpen || w.b >= c.from) {
		c.waits = append(c.waits, w)
	}
}

// inWindow reports whether the instant t is in [from, end).
func (c *computer) inWindow(t int64) bool { return t != noTime && t >= c.from && t < c.end }

// effEnd returns where wait w is measured to: its end, or the report end when it
// was still open there (ongoing).
func (c *computer) effEnd(w *waitRec) (eff int64, ongoing bool) {
	if w.how == endOpen || w.b > c.end {
		return c.end, true
	}
	return w.b, false
}

// waitLen returns the length of wait i up to its effective end, in ns.
func (c *computer) waitLen(i int32) int64 {
	w := &c.waits[i]
	eff, _ := c.effEnd(w)
	return eff - w.a
}

// longer reports whether wait a ranks before wait b as "longest": longer,
// then earlier start, then smaller job ID. b < 0 means no wait.
func (c *computer) longer(a, b int32) bool {
	if b < 0 {
		return true
	}
	la, lb := c.waitLen(a), c.waitLen(b)
	if la != lb {
		return la > lb
	}
	wa, wb := &c.waits[a], &c.waits[b]
	if wa.a != wb.a {
		return wa.a < wb.a
	}
	return c.in.Jobs[wa.job].ID < c.in.Jobs[wb.job].ID
}

// aggregateWaits adds wait samples, longest waits, still-waiting jobs,
// objectives and cancellations to the groups, and notes each wait's
// starvation signals.
func (c *computer) aggregateWaits() {
	c.bestWait = make([]int32, len(c.jobs))
	for j := range c.bestWait {
		c.bestWait[j] = -1
	}
	for i := range c.waits {
		w := &c.waits[i]
		jr := &c.jobs[w.job]
		c.noteWait(i, w, jr)
		ag := &c.aggs[jr.group]
		if w.how != endOpen && c.inWindow(w.b) {
			switch w.how {
			case endStart:
				ag.waitsEnded++
				if w.requeue {
					ag.requeue = append(ag.requeue, w.b-w.a)
				} else {
					ag.initial = append(ag.initial, w.b-w.a)
				}
			case endCancel:
				ag.waitsEnded++
				ag.cancelledWhileWaited++
			}
		}
		eff, ongoing := c.effEnd(w)
		if eff <= c.from {
			continue // does not overlap the window
		}
		if ongoing {
			ag.stillWaiting++ // only a job's last wait can be open at the end
		}
		if c.longer(int32(i), c.bestWait[w.job]) {
			c.bestWait[w.job] = int32(i)
		}
	}
	c.poolJobs = make([]int, len(c.pools.names))
	for j := range c.jobs {
		jr := &c.jobs[j]
		ag := &c.aggs[jr.group]
		if jr.submit < c.end && (jr.end == noTime || jr.end > c.from) {
			ag.jobs++
			c.poolJobs[jr.pool]++
		}
		if c.inWindow(jr.submit) {
			ag.submitted++
		}
		if jr.cancelled && c.inWindow(jr.end) {
			ag.cancelled++
		}
		bw := c.bestWait[j]
		if bw < 0 {
			continue
		}
		if c.longer(bw, ag.longest) {
			ag.longest = bw
		}
		if mw := c.maxWait[jr.queue]; mw > 0 && c.waitLen(bw) > mw {
			ag.overObjective++
		}
	}
}

// aggregateRuns adds the GPU-seconds of runs clipped to the window to the
// groups and pools.
func (c *computer) aggregateRuns() {
	np := len(c.pools.names)
	c.poolGPU = make([]secAcc, np)
	c.queueGPU = make([]secAcc, len(c.queues.names))
	c.queuePoolGPU = make([]secAcc, len(c.queues.names)*np)
	for i := range c.runs {
		r := &c.runs[i]
		s, e := max(r.start, c.from), r.end
		if e == noTime || e > c.end {
			e = c.end
		}
		if e <= s {
			continue
		}
		jr := &c.jobs[r.job]
		m := int64(r.milli)
		c.aggs[jr.group].gpu.add(m, e-s)
		c.poolGPU[jr.pool].add(m, e-s)
		c.queueGPU[jr.queue].add(m, e-s)
		c.queuePoolGPU[int(jr.queue)*np+int(jr.pool)].add(m, e-s)
	}
}
