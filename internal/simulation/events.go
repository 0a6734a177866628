package simulation

import "container/heap"

// eventKind orders the events of one instant: releases first (they free GPUs
// for the arrivals of the same second), then background steps, then arrivals, then cancellations (a
// pod created and deleted in the same second still arrives), then the timer.
type eventKind uint8

const (
	evCompletion eventKind = iota // a run ends; seq must match the job's run
	evBackground                  // a step of the background occupancy; seq is its index
	evArrival                     // a pod is created
	evCancel                      // a never-scheduled trace pod is deleted
	evTimer                       // the periodic scheduling cycle
	evPass                        // a scheduling pass of Config.CyclePeriodSeconds for changes since the last
)

// event is one entry of the virtual clock's queue. t is in trace seconds.
type event struct {
	t    int64
	kind eventKind
	job  *simJob // nil for evTimer
	seq  int     // the job's run number for evCompletion
}

// eventQueue is a min-heap by (t, kind, job order), so that events of one
// instant are applied in the same order on every run.
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.t != b.t {
		return a.t < b.t
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.job.order() < b.job.order()
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (q *eventQueue) push(e event) { heap.Push(q, e) }
func (q *eventQueue) pop() event   { return heap.Pop(q).(event) }
