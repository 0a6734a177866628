// Package webhooktest is a scripted webhook receiver for the tests of the
// notification delivery (docs/design.md §3, notifications).
package webhooktest

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/webhook"
)

// Request is one request a Receiver kept: its headers and body.
type Request struct {
	Header http.Header
	Body   []byte
}

// Receiver is an http.Handler that answers each request with the next
// status of Statuses (200 once they run out), without a body, and keeps
// every request in arrival order. With Secret set it first checks the
// signature (webhook.Verify); a request failing that check is reported to
// T, answered 401, and neither kept nor counted against Statuses.
type Receiver struct {
	T        testing.TB
	Secret   []byte
	Statuses []int

	mu  sync.Mutex
	got []Request
}

// ServeHTTP answers one request as described on Receiver.
func (h *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if h.Secret != nil {
		if err := webhook.Verify(h.Secret, r.Header, body, 0, time.Now()); err != nil {
			h.T.Errorf("receiver: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, Request{Header: r.Header.Clone(), Body: body})
	status := http.StatusOK
	if len(h.Statuses) > 0 {
		status, h.Statuses = h.Statuses[0], h.Statuses[1:]
	}
	w.WriteHeader(status)
}

// Requests returns a copy of the requests kept so far.
func (h *Receiver) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.got...)
}

// EventIDs returns the event ID header (webhook.HeaderEventID) of each
// request kept so far, in arrival order.
func (h *Receiver) EventIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, len(h.got))
	for i, r := range h.got {
		ids[i] = r.Header.Get(webhook.HeaderEventID)
	}
	return ids
}
