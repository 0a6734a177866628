package accounting

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

func TestAdmit(t *testing.T) {
	l := Ledger{"g1": 600}
	for _, c := range []struct {
		shares []scheduling.GPUShare
		want   string // substring of the refusal; "" to admit
	}{
		{[]scheduling.GPUShare{{UUID: "g1", Milli: 400}}, ""},
		{[]scheduling.GPUShare{{UUID: "g1", Milli: 401}}, "GPU g1 has 600 milli granted; 401 more would exceed 1000"},
		{[]scheduling.GPUShare{{UUID: "g2", Milli: 1000}}, ""},
		{[]scheduling.GPUShare{{UUID: "g2", Milli: 1001}}, "outside 1..1000"},
		{[]scheduling.GPUShare{{UUID: "g2", Milli: 0}}, "outside 1..1000"},
		{[]scheduling.GPUShare{{UUID: "g2", Milli: 500}, {UUID: "g2", Milli: 500}}, "GPU g2 listed twice"},
		{nil, "placement names no GPU"},
	} {
		got := l.Admit(c.shares)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Admit(%v) = %q, want %q", c.shares, got, c.want)
		}
	}
	l.Grant([]scheduling.GPUShare{{UUID: "g1", Milli: 400}, {UUID: "g2", Milli: 1000}})
	if l.Used("g1") != 1000 || l.Used("g2") != 1000 {
		t.Fatalf("after grant %v", l)
	}
	if err := l.Release([]scheduling.GPUShare{{UUID: "g1", Milli: 400}, {UUID: "g3", Milli: 1}}); err == nil ||
		l.Used("g1") != 1000 {
		t.Fatalf("release of ungranted g3: err %v, ledger %v (want an error and nothing released)", err, l)
	}
	if err := l.Release([]scheduling.GPUShare{{UUID: "g2", Milli: 1000}}); err != nil || l.Used("g2") != 0 {
		t.Fatalf("release g2: %v, %v", err, l)
	}
}

func TestWaitTransition(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	busy, frag := vocab.ReasonCapacityBusy, vocab.ReasonFragmented

	// First evaluation 5 s after submit: a closed not-yet-evaluated event, then an open one.
	st := WaitState{WaitingSince: at(0)}
	if s := WaitTransition(st, false, busy, "d1", at(5)); s != (WaitStep{NotYetEvaluated: true, NotYetEvaluatedFrom: at(0), Open: true}) {
		t.Errorf("first evaluation: %+v", s)
	}
	// First evaluation at the submit instant: nothing before it to record.
	if s := WaitTransition(st, false, busy, "d1", at(0)); s != (WaitStep{Open: true}) {
		t.Errorf("first evaluation at submit: %+v", s)
	}
	open := WaitState{Open: true, Reason: busy, Detail: "d1", WaitingSince: at(0), LastEnded: at(5)}
	if s := WaitTransition(open, false, busy, "d1", at(9)); s != (WaitStep{}) {
		t.Errorf("same reason and detail: %+v, want nothing", s)
	}
	// One continuous wait for one reason is one event: a new detail
	// (quantities changed) refreshes the open event in place.
	if s := WaitTransition(open, false, busy, "d2", at(9)); s != (WaitStep{Refresh: true}) {
		t.Errorf("detail changed: %+v, want a refresh of the open event", s)
	}
	if s := WaitTransition(open, false, frag, "d1", at(9)); s != (WaitStep{Close: true, Open: true}) {
		t.Errorf("reason changed: %+v", s)
	}
	if s := WaitTransition(open, true, "", "", at(9)); s != (WaitStep{Close: true}) {
		t.Errorf("placed: %+v", s)
	}
	// Requeued at 100 after an earlier wait that ended at 20, placed at once by
	// the cycle at 130: the not-yet-evaluated event runs from the requeue.
	req := WaitState{WaitingSince: at(100), LastEnded: at(20)}
	if s := WaitTransition(req, true, "", "", at(130)); s != (WaitStep{NotYetEvaluated: true, NotYetEvaluatedFrom: at(100)}) {
		t.Errorf("requeued then placed: %+v", s)
	}
	// A previous event ending after waiting_since bounds the start.
	if since, ok := NotYetEvaluatedSince(WaitState{WaitingSince: at(0), LastEnded: at(40)}, at(50)); !ok || !since.Equal(at(40)) {
		t.Errorf("since %v %v, want %v", since, ok, at(40))
	}
	if got := CloseAt(at(10), at(5)); !got.Equal(at(10)) {
		t.Errorf("CloseAt before start = %v", got)
	}
}
