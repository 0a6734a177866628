package workflows_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/workflows"
)

// fakeStarter records StartJob and NotifySubmitted calls; the real
// workflows.Client is tested on a dev server in client_test.go. It can be told
// to fail, and to hold starts.
type fakeStarter struct {
	mu       sync.Mutex
	started  []string
	notified int
	failFor  map[string]bool // job IDs whose start fails
	hook     func(jobID string)
	ledger   *workflows.StartLedger // confirms each start made, as workflows.Client does
}

var errStartRefused = errors.New("temporal: connection refused")

func (f *fakeStarter) StartJob(_ context.Context, jobID string, _ temporalx.JobAttributes) error {
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		hook(jobID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failFor[jobID] {
		return errStartRefused
	}
	f.started = append(f.started, jobID)
	f.ledger.Confirm(jobID)
	return nil
}

func (f *fakeStarter) NotifySubmitted(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notified++
	return nil
}

func (f *fakeStarter) startedJobs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.started)
}

func quietStarter(wf workflows.JobStarter, workers, depth int) *workflows.Starter {
	return workflows.NewStarter(wf, workflows.StarterOptions{Workers: workers, Depth: depth,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// An offered start happens in the background, followed by one scheduler
// wake-up; Close waits for it. A failed start wakes nobody.
func TestStarterStartsInTheBackground(t *testing.T) {
	release := make(chan struct{})
	wf := &fakeStarter{failFor: map[string]bool{"j-bad": true}, hook: func(string) { <-release }}
	s := quietStarter(wf, 1, 8)
	if !s.Offer("j-1", temporalx.JobAttributes{}) || !s.Offer("j-bad", temporalx.JobAttributes{}) {
		t.Fatal("offers refused by an empty queue")
	}
	if got := wf.startedJobs(); len(got) != 0 {
		t.Fatalf("started %v while the start was held", got)
	}
	close(release)
	s.Close()
	if got := wf.startedJobs(); !slices.Equal(got, []string{"j-1"}) {
		t.Fatalf("started %v, want [j-1]", got)
	}
	if wf.notified != 1 {
		t.Fatalf("scheduler notified %d times, want 1 (not for the failed start)", wf.notified)
	}
	if s.Offer("j-2", temporalx.JobAttributes{}) {
		t.Fatal("a closed starter took an offer")
	}
	s.Close() // again: nothing more
}

// A full queue refuses the offer, so the caller starts the workflow itself.
func TestStarterFullQueueRefuses(t *testing.T) {
	entered, release := make(chan string, 1), make(chan struct{})
	wf := &fakeStarter{}
	wf.hook = func(id string) {
		if id == "j-1" {
			entered <- id
			<-release
		}
	}
	s := quietStarter(wf, 1, 1)
	if !s.Offer("j-1", temporalx.JobAttributes{}) {
		t.Fatal("first offer refused")
	}
	<-entered // the worker holds j-1; the queue's one slot is free
	if !s.Offer("j-2", temporalx.JobAttributes{}) {
		t.Fatal("second offer refused with a free slot")
	}
	if s.Offer("j-3", temporalx.JobAttributes{}) {
		t.Fatal("third offer taken by a full queue")
	}
	close(release)
	s.Close()
	if got := wf.startedJobs(); !slices.Equal(got, []string{"j-1", "j-2"}) {
		t.Fatalf("started %v, want [j-1 j-2]", got)
	}
}
