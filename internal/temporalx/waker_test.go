package temporalx

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// recordingSignaler records the signals a Waker sends; a send blocks until
// release is closed when gate is set, to hold a signal in flight.
type recordingSignaler struct {
	mu   sync.Mutex
	sent []string // "workflowID/signal"
	gate chan struct{}
	err  error
}

func (r *recordingSignaler) SignalWorkflow(_ context.Context, id, _, signal string, _ any) error {
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, id+"/"+signal)
	return r.err
}

func (r *recordingSignaler) count(target string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.sent {
		if s == target {
			n++
		}
	}
	return n
}

// A burst of wake-ups while one signal is in flight costs exactly one more
// signal (the trailing edge), per target; targets do not share a budget.
func TestWakerCoalescesABurst(t *testing.T) {
	sig := &recordingSignaler{gate: make(chan struct{})}
	w := NewWaker(sig, time.Millisecond, nil)
	for range 100 {
		w.Wake("scheduler/default", SignalJobSubmitted)
	}
	w.Wake("scheduler/default", SignalAllocationReleased)
	close(sig.gate)
	w.Wait()
	if got := sig.count("scheduler/default/" + SignalJobSubmitted); got != 2 {
		t.Errorf("100 wake-ups during one in-flight signal sent %d signals, want 2 (first + trailing)", got)
	}
	if got := sig.count("scheduler/default/" + SignalAllocationReleased); got != 1 {
		t.Errorf("one release wake-up sent %d signals, want 1", got)
	}
}

// Wake-ups spaced wider than the interval are each sent: coalescing never
// drops a wake-up that comes after the previous signal went out.
func TestWakerSendsSpacedWakeUps(t *testing.T) {
	sig := &recordingSignaler{}
	w := NewWaker(sig, time.Millisecond, nil)
	for range 3 {
		w.Wake("scheduler/a", SignalJobSubmitted)
		w.Wait()
	}
	if got := sig.count("scheduler/a/" + SignalJobSubmitted); got != 3 {
		t.Errorf("3 spaced wake-ups sent %d signals, want 3", got)
	}
}

// A failing signal is logged, not retried, and does not stop later wake-ups.
func TestWakerSurvivesAFailedSignal(t *testing.T) {
	sig := &recordingSignaler{err: errors.New("unavailable")}
	w := NewWaker(sig, time.Millisecond, nil)
	w.Wake("scheduler/a", SignalJobSubmitted)
	w.Wait()
	sig.err = nil
	w.Wake("scheduler/a", SignalJobSubmitted)
	w.Wait()
	if got := sig.count("scheduler/a/" + SignalJobSubmitted); got != 2 {
		t.Errorf("sent %d signals, want 2 (one failed, one after it)", got)
	}
}
