package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/workflows"
)

// The ExperimentWorkflow tier with time skipping: Temporal's test
// environment with the experiment activities mocked by a small model of
// the stored experiment (fakeExperiment), so each path of the workflow —
// every verdict, a breach mid-window, abort, promote, a policy changed
// outside — runs under -short in workflow time. The activities' own tests
// (activities/experiments_test.go) run them on PostgreSQL; the dev-server
// test (experiment_devserver_test.go) restarts the worker mid-window.

// expT0 is the test environment's start; the experiment starts 10 minutes
// later, for a window of an hour checked every 5 minutes.
var expT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

const (
	expID       = "exp-test"
	expStartIn  = 10 * time.Minute
	expWindow   = time.Hour
	expInterval = 5 * time.Minute
)

// expCall is one activity call: its name, check number and workflow time
// since expT0.
type expCall struct {
	Name string
	N    int
	At   time.Duration
}

func (c expCall) String() string {
	if c.N > 0 {
		return fmt.Sprintf("%s %d @%s", c.Name, c.N, c.At)
	}
	return fmt.Sprintf("%s @%s", c.Name, c.At)
}

// fakeExperiment answers the experiment activities from a model of the
// stored experiment: checkOutcome says what check n finds ("" nothing,
// "breach" a rollback, "policy" another policy applied), verdict what the
// window's end decides.
type fakeExperiment struct {
	*testEnv
	t            *testing.T
	mu           sync.Mutex
	st           activities.ExperimentStatus
	checkOutcome func(n int) string
	verdict      vocab.ExperimentVerdict
	calls        []expCall
}

func newFakeExperiment(t *testing.T, verdict vocab.ExperimentVerdict, checkOutcome func(int) string) *fakeExperiment {
	env := newWorkflowEnv(func(env *testEnv) {
		workflows.RegisterServiceWorkflows(env)
		env.RegisterActivity(&activities.ExperimentActivities{}) // names only: the mocks answer
	})
	env.SetStartTime(expT0)
	if checkOutcome == nil {
		checkOutcome = func(int) string { return "" }
	}
	f := &fakeExperiment{testEnv: env, t: t, verdict: verdict, checkOutcome: checkOutcome,
		st: activities.ExperimentStatus{ID: expID, State: vocab.ExperimentScheduled, Pool: "a100", StartAt: expT0.Add(expStartIn),
			WindowSeconds: expWindow.Seconds(), CheckIntervalSeconds: expInterval.Seconds(), Detail: "scheduled"}}
	f.answer("LoadExperiment", func(*activities.ExperimentRef, int) {})
	f.answer("MeasureExperimentBaseline", func(*activities.ExperimentRef, int) {
		if f.st.State == vocab.ExperimentScheduled {
			f.st.State = vocab.ExperimentBaseline
		}
	})
	f.answer("SwitchExperiment", func(*activities.ExperimentRef, int) {
		if f.st.State == vocab.ExperimentBaseline {
			now := f.Now().UTC()
			f.st.State, f.st.SwitchedAt = vocab.ExperimentRunning, &now
		}
	})
	f.answer("CheckExperiment", func(_ *activities.ExperimentCheckInput, n int) {
		if f.st.State != vocab.ExperimentRunning {
			return
		}
		switch f.checkOutcome(n) {
		case "breach":
			f.end(vocab.ExperimentFinished, vocab.VerdictRolledBack, "rolled back: production tier wait_p95_s 412 s > 1.2 × baseline 300 s = 360 s")
		case "policy":
			f.end(vocab.ExperimentAborted, "", "another policy was applied")
		}
	})
	f.answer("FinishExperiment", func(*activities.ExperimentRef, int) {
		if f.st.State == vocab.ExperimentRunning {
			f.end(vocab.ExperimentFinished, f.verdict, string(f.verdict))
			f.st.Holds = f.verdict == vocab.VerdictKept
		}
	})
	f.answer("AbortExperiment", func(*activities.ExperimentDecisionInput, int) {
		if f.st.State != vocab.ExperimentFinished || f.st.Holds {
			f.st.State, f.st.Holds, f.st.Detail = vocab.ExperimentAborted, false, "aborted"
		}
	})
	f.answer("PromoteExperiment", func(*activities.ExperimentDecisionInput, int) {
		if f.st.Holds {
			f.st.Holds, f.st.Promoted = false, true
		}
	})
	return f
}

// answer mocks activity name: it records the call, lets step change the
// model and returns the model's status.
func answer[In any](f *fakeExperiment, name string, step func(*In, int)) {
	f.OnActivity(name, mock.Anything, mock.Anything).Return(func(_ context.Context, in *In) (*activities.ExperimentStatus, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		if c, ok := any(in).(*activities.ExperimentCheckInput); ok {
			n = c.N
		}
		f.calls = append(f.calls, expCall{Name: name, N: n, At: f.Now().Sub(expT0)})
		step(in, n)
		st := f.st
		return &st, nil
	})
}

func (f *fakeExperiment) answer(name string, step any) {
	switch s := step.(type) {
	case func(*activities.ExperimentRef, int):
		answer(f, name, s)
	case func(*activities.ExperimentCheckInput, int):
		answer(f, name, s)
	case func(*activities.ExperimentDecisionInput, int):
		answer(f, name, s)
	default:
		f.t.Fatalf("answer %s: step of type %T", name, step)
	}
}

func (f *fakeExperiment) end(state vocab.ExperimentState, verdict vocab.ExperimentVerdict, detail string) {
	f.st.State, f.st.Verdict, f.st.Detail = state, verdict, detail
}

// run runs the workflow to its end and returns its result.
func (f *fakeExperiment) run(in *workflows.ExperimentInput) *workflows.ExperimentResult {
	f.t.Helper()
	if in == nil {
		in = &workflows.ExperimentInput{ID: expID}
	}
	f.ExecuteWorkflow(workflows.ExperimentWorkflowName, in)
	if !f.IsWorkflowCompleted() {
		f.t.Fatal("workflow did not complete")
	}
	if err := f.GetWorkflowError(); err != nil {
		f.t.Fatalf("workflow error: %v", err)
	}
	var res workflows.ExperimentResult
	if err := f.GetWorkflowResult(&res); err != nil {
		f.t.Fatal(err)
	}
	return &res
}

func (f *fakeExperiment) decision(after time.Duration, action, actor string) {
	f.signalAt(after, temporalx.SignalExperiment, temporalx.ExperimentDecision{Action: action, Actor: actor, Reason: "test"})
}

// names lists the calls as "Name @at" / "Name n @at".
func (f *fakeExperiment) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.calls))
	for i, c := range f.calls {
		out[i] = c.String()
	}
	return out
}

// wantStart is the calls up to the switch: load at 0, baseline and switch at the start.
var wantStart = []string{"LoadExperiment @0s", "MeasureExperimentBaseline @10m0s", "SwitchExperiment @10m0s"}

// checks lists CheckExperiment from..to (at the start + n × interval).
func checks(from, to int) []string {
	var out []string
	for n := from; n <= to; n++ {
		out = append(out, expCall{Name: "CheckExperiment", N: n, At: expStartIn + time.Duration(n)*expInterval}.String())
	}
	return out
}

func concat(parts ...[]string) []string { return slices.Concat(parts...) }

func assertCalls(t *testing.T, f *fakeExperiment, want []string) {
	t.Helper()
	if got := f.names(); !slices.Equal(got, want) {
		t.Fatalf("activity calls\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestExperimentWorkflowKeptThenPromoted: the start waits on a timer, the
// window is checked 11 times 5 minutes apart, the verdict comes at its end;
// the kept candidate then holds, with no timeout, until the promotion.
func TestExperimentWorkflowKeptThenPromoted(t *testing.T) {
	f := newFakeExperiment(t, vocab.VerdictKept, nil)
	f.decision(30*time.Minute, temporalx.ExperimentPromote, "admin-early") // before the verdict: dropped
	f.decision(48*time.Hour, temporalx.ExperimentPromote, "admin-alice")
	res := f.run(nil)
	if res.State != vocab.ExperimentFinished || res.Verdict != vocab.VerdictKept || !res.Promoted {
		t.Fatalf("result %+v, want finished kept promoted", res)
	}
	assertCalls(t, f, concat(wantStart, checks(1, 11), []string{"FinishExperiment @1h10m0s", "PromoteExperiment @48h0m0s"}))
	f.mu.Lock()
	defer f.mu.Unlock()
	want := []string{"scheduled@a100", "baseline@a100", "running@a100", "finished@a100"}
	if !slices.Equal(f.expAttrs, want) {
		t.Fatalf("search attributes %v, want %v", f.expAttrs, want)
	}
}

// TestExperimentWorkflowRolledBackMidWindow: the 4th check breaches; the
// check's rollback ends the workflow with no further check and no verdict
// step.
func TestExperimentWorkflowRolledBackMidWindow(t *testing.T) {
	f := newFakeExperiment(t, vocab.VerdictKept, func(n int) string {
		if n == 4 {
			return "breach"
		}
		return ""
	})
	res := f.run(nil)
	if res.State != vocab.ExperimentFinished || res.Verdict != vocab.VerdictRolledBack || !strings.Contains(res.Detail, "412 s > 1.2") {
		t.Fatalf("result %+v, want rolled back with the numbers", res)
	}
	assertCalls(t, f, concat(wantStart, checks(1, 4)))
}

// TestExperimentWorkflowNotMetAndInconclusive: the verdict ends the
// workflow (the store restored the baseline); nothing holds.
func TestExperimentWorkflowNotMetAndInconclusive(t *testing.T) {
	for _, v := range []vocab.ExperimentVerdict{vocab.VerdictNotMet, vocab.VerdictInconclusive} {
		t.Run(string(v), func(t *testing.T) {
			f := newFakeExperiment(t, v, nil)
			res := f.run(nil)
			if res.State != vocab.ExperimentFinished || res.Verdict != v || res.Promoted {
				t.Fatalf("result %+v, want finished %s", res, v)
			}
			assertCalls(t, f, concat(wantStart, checks(1, 11), []string{"FinishExperiment @1h10m0s"}))
		})
	}
}

// TestExperimentWorkflowAbort: an abort cancels the timer it arrives in,
// mid-window, before the start, or while a kept candidate holds.
func TestExperimentWorkflowAbort(t *testing.T) {
	t.Run("mid-window", func(t *testing.T) {
		f := newFakeExperiment(t, vocab.VerdictKept, nil)
		f.decision(27*time.Minute, temporalx.ExperimentAbort, "admin-bob")
		res := f.run(nil)
		if res.State != vocab.ExperimentAborted {
			t.Fatalf("result %+v, want aborted", res)
		}
		assertCalls(t, f, concat(wantStart, checks(1, 3), []string{"AbortExperiment @27m0s"}))
	})
	t.Run("before the start", func(t *testing.T) {
		f := newFakeExperiment(t, vocab.VerdictKept, nil)
		f.decision(time.Minute, temporalx.ExperimentAbort, "admin-bob")
		if res := f.run(nil); res.State != vocab.ExperimentAborted {
			t.Fatalf("result %+v, want aborted", res)
		}
		assertCalls(t, f, []string{"LoadExperiment @0s", "AbortExperiment @1m0s"})
	})
	t.Run("while kept", func(t *testing.T) {
		f := newFakeExperiment(t, vocab.VerdictKept, nil)
		f.decision(3*time.Hour, temporalx.ExperimentAbort, "admin-bob")
		res := f.run(nil)
		if res.State != vocab.ExperimentAborted || res.Promoted {
			t.Fatalf("result %+v, want aborted", res)
		}
		assertCalls(t, f, concat(wantStart, checks(1, 11), []string{"FinishExperiment @1h10m0s", "AbortExperiment @3h0m0s"}))
	})
}

// TestExperimentWorkflowPolicyChangedOutside: a check that finds another
// policy applied ends the workflow aborted; it switches nothing back.
func TestExperimentWorkflowPolicyChangedOutside(t *testing.T) {
	f := newFakeExperiment(t, vocab.VerdictKept, func(n int) string {
		if n == 2 {
			return "policy"
		}
		return ""
	})
	if res := f.run(nil); res.State != vocab.ExperimentAborted || res.Verdict != "" {
		t.Fatalf("result %+v, want aborted without verdict", res)
	}
	assertCalls(t, f, concat(wantStart, checks(1, 2)))
}

// TestExperimentWorkflowContinuesAsNew: after ChecksPerRun checks the run
// continues as new with the same input; the next run resumes the schedule
// from the store (check 4 next, not 1).
func TestExperimentWorkflowContinuesAsNew(t *testing.T) {
	f := newFakeExperiment(t, vocab.VerdictNotMet, nil)
	in := &workflows.ExperimentInput{ID: expID, ChecksPerRun: 3}
	f.ExecuteWorkflow(workflows.ExperimentWorkflowName, in)
	var can *workflow.ContinueAsNewError
	if err := f.GetWorkflowError(); !errors.As(err, &can) || can.WorkflowType.Name != workflows.ExperimentWorkflowName {
		t.Fatalf("workflow error %v, want continue-as-new", err)
	}
	assertCalls(t, f, concat(wantStart, checks(1, 3)))

	// The next run, started where the first one ended (just after check 3).
	g := newFakeExperiment(t, vocab.VerdictNotMet, nil)
	g.SetStartTime(expT0.Add(expStartIn + 3*expInterval + time.Second))
	switched := expT0.Add(expStartIn)
	g.st.State, g.st.SwitchedAt = vocab.ExperimentRunning, &switched
	res := g.run(&workflows.ExperimentInput{ID: expID})
	if res.Verdict != vocab.VerdictNotMet {
		t.Fatalf("second run %+v", res)
	}
	assertCalls(t, g, concat([]string{"LoadExperiment @25m1s"}, checks(4, 11), []string{"FinishExperiment @1h10m0s"}))
}

// TestExperimentWorkflowRefusesEmptyInput: no ID, no run.
func TestExperimentWorkflowRefusesEmptyInput(t *testing.T) {
	f := newFakeExperiment(t, vocab.VerdictKept, nil)
	f.ExecuteWorkflow(workflows.ExperimentWorkflowName, &workflows.ExperimentInput{})
	if err := f.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "ID is required") {
		t.Fatalf("error %v", err)
	}
}
