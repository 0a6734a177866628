// Package crashpoint is a test hook of gpugov's Temporal workers: a worker
// interceptor that stops one named activity at a chosen moment so that a
// crash test can SIGKILL the worker process exactly there (docs/design.md
// §7 "Crash points"). It is inert unless the environment variable
// EnvPoint is set; `gpugov serve` logs a loud warning when it is.
//
// EnvPoint is "<ActivityName>:<when>", when one of
//
//   - before: the activity's body has not run (no effect yet);
//   - after_effect: the body returned successfully (its effect is committed)
//     and Temporal has not been told: the worst moment, after which Temporal
//     retries the activity on the next worker and the effect must be
//     idempotent.
//
// At that point the interceptor creates the marker file EnvDir/<Activity>.<when>
// (exclusively: a point fires once per marker, so a restarted worker with
// the same setting runs the retried attempt through) and blocks until the
// activity's context ends, waiting for the test to kill the process.
//
// The held attempt does not heartbeat, so Temporal may time it out (its
// heartbeat or start-to-close timeout) before the test kills the process,
// and retry it — possibly on the same, still-live process. The marker
// therefore records the process ID that fired it, and a retried attempt in
// that process blocks at the point too instead of running through: the
// effect of a held activity can only be repeated by a process started after
// the one that reached the point, never by the one the test is about to kill.
package crashpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// Environment variables of the crash point.
const (
	// EnvPoint names the crash point, "<ActivityName>:before" or
	// "<ActivityName>:after_effect"; unset or empty means none.
	EnvPoint = "GPUGOV_CRASHPOINT"
	// EnvDir is the directory the marker file is written to; required with
	// EnvPoint.
	EnvDir = "GPUGOV_CRASHPOINT_DIR"
	// EnvWorkflow, when set, limits the point to activities of workflows
	// whose ID starts with it (one job's workflow among many).
	EnvWorkflow = "GPUGOV_CRASHPOINT_WORKFLOW"
)

// Effect is implemented by activity results that can say their attempt
// changed nothing (a scheduling cycle that placed and preempted nothing):
// an after_effect point lets such an attempt through and waits for one that
// had an effect.
type Effect interface {
	// CrashPointEffect reports whether the attempt changed stored state.
	CrashPointEffect() bool
}

// When is the moment of an activity a crash point stops at.
type When string

// The moments of a crash point.
const (
	Before      When = "before"
	AfterEffect When = "after_effect"
)

// Point is a parsed crash point: the activity type name, the moment and the
// marker directory.
type Point struct {
	Activity string
	When     When
	Dir      string
	// Workflow, when not "", is the prefix of the workflow IDs whose
	// activities the point stops.
	Workflow string
}

// String is the point as EnvPoint spells it.
func (p Point) String() string { return p.Activity + ":" + string(p.When) }

// Marker is the path of the file the point creates when it fires.
func (p Point) Marker() string { return MarkerPath(p.Dir, p.Activity, p.When) }

// MarkerPath is the marker file of activity at when under dir.
func MarkerPath(dir, activity string, when When) string {
	return filepath.Join(dir, activity+"."+string(when))
}

// FromEnv reads EnvPoint, EnvDir and EnvWorkflow. It returns nil, nil when
// EnvPoint is unset, and an error naming the variable when one is malformed.
func FromEnv() (*Point, error) {
	p, err := Parse(os.Getenv(EnvPoint), os.Getenv(EnvDir))
	if p != nil {
		p.Workflow = os.Getenv(EnvWorkflow)
	}
	return p, err
}

// Parse parses spec ("<ActivityName>:<when>") with marker directory dir;
// "" is no point (nil, nil).
func Parse(spec, dir string) (*Point, error) {
	if spec == "" {
		return nil, nil
	}
	name, when, ok := strings.Cut(spec, ":")
	if !ok || name == "" {
		return nil, fmt.Errorf("%s %q: want <ActivityName>:before or <ActivityName>:after_effect", EnvPoint, spec)
	}
	switch When(when) {
	case Before, AfterEffect:
	default:
		return nil, fmt.Errorf("%s %q: moment %q, want before or after_effect", EnvPoint, spec, when)
	}
	if dir == "" {
		return nil, fmt.Errorf("%s is set (%q) but %s is empty: the marker file needs a directory", EnvPoint, spec, EnvDir)
	}
	return &Point{Activity: name, When: When(when), Dir: dir}, nil
}

// Interceptor returns the worker interceptor of p; nil p gives nil, which
// callers leave out of worker.Options.Interceptors.
func Interceptor(p *Point) interceptor.WorkerInterceptor {
	if p == nil {
		return nil
	}
	return &workerInterceptor{p: *p}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	p Point
}

func (w *workerInterceptor) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInterceptor{p: w.p}
	a.Next = next
	return a
}

type activityInterceptor struct {
	interceptor.ActivityInboundInterceptorBase
	p Point
}

func (a *activityInterceptor) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	if info.ActivityType.Name != a.p.Activity || !strings.HasPrefix(info.WorkflowExecution.ID, a.p.Workflow) {
		return a.Next.ExecuteActivity(ctx, in)
	}
	if a.p.When == Before {
		if err := a.fire(ctx); err != nil {
			return nil, err
		}
		return a.Next.ExecuteActivity(ctx, in)
	}
	res, err := a.Next.ExecuteActivity(ctx, in)
	if err != nil {
		return res, err
	}
	if e, ok := res.(Effect); ok && !e.CrashPointEffect() {
		return res, nil
	}
	if ferr := a.fire(ctx); ferr != nil {
		return nil, ferr
	}
	return res, nil
}

// fire creates the marker and blocks until ctx ends. A marker that exists
// already lets the attempt through when an earlier process fired it, and
// blocks it too when this process did (a retry of the held attempt after a
// timeout, in the process the test is about to kill).
func (a *activityInterceptor) fire(ctx context.Context) error {
	f, err := os.OpenFile(a.p.Marker(), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		if !firedHere(a.p.Marker()) {
			return nil
		}
		activity.GetLogger(ctx).Warn("crashpoint: retry in the process that reached the point; blocking it too", "point", a.p.String())
		<-ctx.Done()
		return fmt.Errorf("crashpoint %s (retry in the held process): %w", a.p, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("crashpoint %s: marker: %w", a.p, err)
	}
	info := activity.GetInfo(ctx)
	_, _ = fmt.Fprintf(f, "pid %d\n%s attempt %d of workflow %s\n", os.Getpid(), a.p, info.Attempt, info.WorkflowExecution.ID)
	_ = f.Close()
	activity.GetLogger(ctx).Warn("crashpoint reached: blocking until the process is killed", "point", a.p.String())
	<-ctx.Done()
	return fmt.Errorf("crashpoint %s: %w", a.p, ctx.Err())
}

// firedHere reports whether the marker at path was written by this process
// (its first line is "pid <os.Getpid()>"). An unreadable marker counts as
// another process's: the point lets the attempt through, as before markers
// carried a process ID.
func firedHere(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return first == fmt.Sprintf("pid %d", os.Getpid())
}
