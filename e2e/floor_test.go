package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/workflows"
)

// The floor of the lifecycle benchmark: the least a job lifecycle asks of
// Temporal, on the same dev server and with the same concurrency as gpugov's
// lifecycles (docs/design.md "Throughput against the floor"). A floor
// lifecycle is one workflow start, one signal (the job's `placed`), one
// activity (the job's run) and the workflow's completion; it does no other
// work, so its rate is what the Temporal server sustains for job-shaped
// workflows on this machine.
const (
	floorTaskQueue  = "bench-floor"
	floorWorkflow   = "FloorWorkflow"
	floorActivity   = "FloorActivity"
	floorSignalName = "placed"
)

// floorWorkflowFn waits for the `placed` signal, runs the floor activity on
// its own task queue and completes.
func floorWorkflowFn(ctx workflow.Context) error {
	workflow.GetSignalChannel(ctx, floorSignalName).Receive(ctx, nil)
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	return workflow.ExecuteActivity(ctx, floorActivity).Get(ctx, nil)
}

// floorActivityFn is the floor's run: it does nothing.
func floorActivityFn(context.Context) error { return nil }

// floorRig is a worker of the floor workflow on the benchmark's dev server.
type floorRig struct {
	c   client.Client
	seq int
}

// startFloor starts the floor's worker on dev, stopped when b ends.
func startFloor(b *testing.B, dev *temporaltest.DevServer) *floorRig {
	b.Helper()
	w := worker.New(dev.Client, floorTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(floorWorkflowFn, workflow.RegisterOptions{Name: floorWorkflow})
	w.RegisterActivityWithOptions(floorActivityFn, activity.RegisterOptions{Name: floorActivity})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	return &floorRig{c: dev.Client}
}

// run completes n floor lifecycles and returns the time from the first
// start until the last completed. Like gpugov's lifecycles
// (runLifecycles), benchInFlight concurrent clients submit (start and
// signal a workflow); each client then waits for the completions of
// what it submitted.
func (f *floorRig) run(b *testing.B, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	base := f.seq
	f.seq += n
	ids := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	began := time.Now()
	for range benchInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var runs []client.WorkflowRun
			for i := range ids {
				run, err := f.submit(ctx, fmt.Sprintf("floor/%d", base+i))
				if err != nil {
					fail(err)
					continue
				}
				runs = append(runs, run)
			}
			for _, run := range runs {
				if err := run.Get(ctx, nil); err != nil {
					fail(err)
				}
			}
		}()
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	elapsed := time.Since(began)
	if firstErr != nil {
		b.Fatalf("floor lifecycle: %v", firstErr)
	}
	return elapsed
}

// submit starts the floor workflow id and sends it its signal.
func (f *floorRig) submit(ctx context.Context, id string) (client.WorkflowRun, error) {
	run, err := f.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: floorTaskQueue}, floorWorkflow)
	if err != nil {
		return nil, err
	}
	return run, f.c.SignalWorkflow(ctx, id, run.GetRunID(), floorSignalName, nil)
}

// lifecycleCost is what gpugov's lifecycles asked of Temporal in a
// benchmark round, per job: the job workflows' history events by type
// (workflow tasks, activities, local activities and version markers,
// signals, timers, search-attribute upserts) and the scheduler's cycles.
type lifecycleCost struct {
	jobs   int            // job workflows whose histories were counted
	events map[string]int // history event type → count over those jobs
	cycles int64          // scheduler cycles over the whole round
	placed int            // jobs of the round
	// schedEvents are the scheduler's history events over the halves of
	// schedCounted jobs in which it did not continue as new.
	schedEvents  int64
	schedCounted int
	// decisions and waitEvents are the store's decision and wait-event rows
	// of the first half's storeJobs jobs.
	decisions, waitEvents, storeJobs int
}

// schedulerEvents is the length of the default shard scheduler's current
// run's history.
func schedulerEvents(b *testing.B, e *env) int64 {
	b.Helper()
	d, err := e.dev.Client.DescribeWorkflow(context.Background(), temporalx.SchedulerWorkflowID(temporalx.DefaultShard), "")
	if err != nil {
		b.Fatalf("describe scheduler: %v", err)
	}
	return d.RawResponse.GetWorkflowExecutionInfo().GetHistoryLength()
}

// schedulerCycles returns the default shard scheduler's count of cycles.
func schedulerCycles(b *testing.B, e *env) int64 {
	b.Helper()
	v, err := e.dev.Client.QueryWorkflow(context.Background(), temporalx.SchedulerWorkflowID(temporalx.DefaultShard), "", workflows.QuerySchedulerStatus)
	if err != nil {
		b.Fatalf("query scheduler: %v", err)
	}
	var st workflows.SchedulerStatus
	if err := v.Get(&st); err != nil {
		b.Fatal(err)
	}
	return st.Cycles
}

// countJobEvents adds the history events of the job workflows of ids (at
// most limit of them) to c.
func countJobEvents(b *testing.B, e *env, ids []string, limit int, c *lifecycleCost) {
	b.Helper()
	ctx := context.Background()
	if c.events == nil {
		c.events = map[string]int{}
	}
	for _, id := range ids[:min(limit, len(ids))] {
		it := e.dev.Client.GetWorkflowHistory(ctx, temporalx.JobWorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				b.Fatalf("history of job %s: %v", id, err)
			}
			c.events[strings.TrimPrefix(ev.GetEventType().String(), "EVENT_TYPE_")]++
		}
		c.jobs++
	}
}

// report logs the per-job costs and reports the headline ones as metrics.
func (c *lifecycleCost) report(b *testing.B) {
	b.Helper()
	if c.jobs == 0 || c.placed == 0 {
		return
	}
	per := func(k string) float64 { return float64(c.events[k]) / float64(c.jobs) }
	total := 0
	keys := make([]string, 0, len(c.events))
	for k, n := range c.events {
		total += n
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, " %s=%.2f", k, per(k))
	}
	b.Logf("per job workflow (%d counted): %.1f events:%s; scheduler cycles per job %.3f",
		c.jobs, float64(total)/float64(c.jobs), sb.String(), float64(c.cycles)/float64(c.placed))
	if c.storeJobs > 0 {
		b.ReportMetric(float64(c.decisions)/float64(c.storeJobs), "decisions/job")
		b.ReportMetric(float64(c.waitEvents)/float64(c.storeJobs), "wait-events/job")
	}
	if c.schedCounted > 0 {
		b.ReportMetric(float64(c.schedEvents)/float64(c.schedCounted), "sched-events/job")
	}
	b.ReportMetric(float64(total)/float64(c.jobs), "events/job")
	b.ReportMetric(per("WorkflowTaskScheduled"), "wft/job")
	b.ReportMetric(float64(c.cycles)/float64(c.placed), "cycles/job")
}

// cpuClock reads the CPU time (user + system) of the benchmark's own
// process (gpugov's serve and the floor's worker run in it) and of its dev
// server, to attribute each half's CPU per lifecycle.
type cpuClock struct{ devPID int }

// cpuSample is one reading of cpuClock.
type cpuSample struct{ self, dev time.Duration }

// sample reads both processes' CPU times. The dev server's is 0 where
// /proc is not readable (its per-lifecycle figure is then not reported).
func (c cpuClock) sample() cpuSample {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuSample{self: self, dev: procCPU(c.devPID)}
}

// procCPU is the CPU time of process pid from /proc/<pid>/stat (utime and
// stime, fields 14 and 15, in clock ticks of 100 Hz: Linux's USER_HZ,
// proc(5)); 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+st) * 10 * time.Millisecond
}

// cpuSpent adds the CPU between two samples to an accumulator.
func (a *cpuSample) add(from, to cpuSample) {
	a.self += to.self - from.self
	a.dev += to.dev - from.dev
}

// serverCounters reads the dev server's request counters from its
// Prometheus endpoint: service_requests (RPCs each server role served),
// persistence_requests and visibility_persistence_requests (its database
// operations), keyed "<metric> <service> <operation>" and summed over the
// other labels. An unreadable endpoint gives nil (nothing is then logged).
func serverCounters(url string) map[string]float64 {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "service_requests" && name != "persistence_requests" && name != "visibility_persistence_requests") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		out[name+" "+promLabel(labels, "service_name")+" "+promLabel(labels, "operation")] += v
	}
	return out
}

// promLabel is the value of label key in a Prometheus label list.
func promLabel(labels, key string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// counterDelta accumulates the growth of serverCounters over spans.
type counterDelta map[string]float64

// add adds to − from.
func (d counterDelta) add(from, to map[string]float64) {
	for k, v := range to {
		if v -= from[k]; v != 0 {
			d[k] += v
		}
	}
}

// logCounters logs, per lifecycle, the server operations of gpugov's
// lifecycles next to the floor's, largest difference first.
func logCounters(b *testing.B, floor, jobs counterDelta, n int) {
	b.Helper()
	if len(jobs) == 0 {
		return
	}
	keys := make([]string, 0, len(jobs))
	for k := range jobs {
		keys = append(keys, k)
	}
	for k := range floor {
		if _, ok := jobs[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		di, dj := jobs[keys[i]]-floor[keys[i]], jobs[keys[j]]-floor[keys[j]]
		if di != dj {
			return di > dj
		}
		return keys[i] < keys[j]
	})
	var sb strings.Builder
	sb.WriteString("Temporal server operations per lifecycle (gpugov / floor):\n")
	for _, k := range keys {
		g, f := jobs[k]/float64(n), floor[k]/float64(n)
		if g < 0.05 && f < 0.05 {
			continue
		}
		fmt.Fprintf(&sb, "  %-75s %7.2f %7.2f\n", k, g, f)
	}
	b.Log(sb.String())
}
