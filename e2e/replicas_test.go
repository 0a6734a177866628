package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/replay"
)

// TestReplicaKilledMidReplay runs two `gpugov serve` replicas, started at
// the same moment, on one database and one Temporal dev server, behind a
// round-robin TCP balancer (the API of either serves each connection),
// replays the contended replay's window through them (make run's input, as
// TestContendedReplay: its pool, policy and speed, so that the scheduler
// preempts; all of the window's pods, so that a preemption comes early
// enough to be interrupted), and SIGKILLs one replica as soon as a
// preemption is in progress: the replica running that preemption's pending
// activity when Temporal names one, else the one running the victim's run.
// The other replica goes on alone. Nothing may be lost (docs/design.md §10
// "Several replicas"): every job ends or waits with a reason; no GPU is
// granted beyond 1000 milli-GPU at any sample and the usage table agrees
// with the allocations; every preemption finishes: the victim released only
// after a saved checkpoint (its resume verified or not), or aborted with an
// abort outcome, or ended by the victim; one JobWorkflow per job, one
// PreemptionWorkflow per preemption, one scheduler, reclaim scan and
// notification dispatcher; and the two starts wrote the start policy once.
func TestReplicaKilledMidReplay(t *testing.T) {
	requireTemporal(t)
	began := time.Now()
	selected, sz, _ := contendedSlice(t)
	var nodes strings.Builder
	if err := alibaba.WriteNodes(&nodes, sz.Nodes); err != nil {
		t.Fatal(err)
	}
	pol, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "gpugov", "replay-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := newCrashRig(t, gpugovBinary(t), crashRigOptions{policy: string(pol), inventory: nodes.String(), inventoryCSV: true,
		simSpeed: replay.ContendedSpeed})
	replicas := []*serveProcess{r.spawn("replica a", r.apiAddr, "", ""), r.spawn("replica b", freeAddr(t), "", "")}
	for _, p := range replicas {
		r.waitReady(p)
	}
	lb := startBalancer(t, replicas[0].apiAddr, replicas[1].apiAddr)
	client, err := apiclient.New("http://"+lb.Addr(), crashToken)
	if err != nil {
		t.Fatal(err)
	}
	subs, err := replay.Build(selected, replay.BuildOptions{From: replay.ContendedFrom, Speed: replay.ContendedSpeed,
		Recovery: replay.DefaultRecovery(), MaxRunSeconds: replay.ContendedMaxRunS})
	if err != nil {
		t.Fatal(err)
	}
	n := len(subs)
	e := r.env()

	ctx, cancel := context.WithTimeout(context.Background(), contendedDeadline+2*time.Minute)
	defer cancel()
	sampler := startUsageSampler(ctx, t, e)
	type outcome struct {
		res *replay.Result
		err error
	}
	done := make(chan outcome, 1)
	replayStart := time.Now()
	go func() {
		res, err := replay.Run(ctx, replay.Config{Client: client, Submissions: subs, Speed: replay.ContendedSpeed,
			Pool: alibaba.DefaultPoolName, Wait: contendedSettle, Progress: testLog{t}})
		done <- outcome{res, err}
	}()

	// The kill: as soon as a preemption is in progress, or at the last
	// submission's time when none was by then.
	inProgress := `SELECT count(*) FROM preemptions WHERE kind = 'preemption' AND state = 'in_progress'`
	last := subs[n-1].SubmitAt
	for time.Since(replayStart) < last && r.queryInt(inProgress) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	victim, interrupted := replicaToKill(t, r, replicas)
	var openAtKill []string
	rows, err := r.db.Query(context.Background(), `SELECT id FROM preemptions WHERE state = 'in_progress'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		openAtKill = append(openAtKill, id)
	}
	rows.Close()
	atKill := fmt.Sprintf("%.0f s into the replay, %d of %d submitted; %d jobs running, %d placed; %d preemptions in progress "+
		"(%d notified, %d saved); %s's pending activities: %s",
		time.Since(replayStart).Seconds(), r.queryInt(`SELECT count(*) FROM jobs`), n,
		r.queryInt(`SELECT count(*) FROM jobs WHERE state = 'running'`), r.queryInt(`SELECT count(*) FROM jobs WHERE state = 'placed'`),
		r.queryInt(inProgress), r.queryInt(inProgress+` AND notified_at IS NOT NULL`), r.queryInt(inProgress+` AND saved_at IS NOT NULL`),
		victim.name, interrupted)
	r.killProcess(victim)
	t.Logf("SIGKILLed %s: %s", victim.name, atKill)

	out := <-done
	if out.err != nil {
		t.Fatalf("replay: %v", out.err)
	}
	res := out.res
	if len(res.Rejected) > 0 || res.Accepted != n {
		t.Fatalf("replay: %d rejected (%v), %d of %d accepted", len(res.Rejected), res.Rejected, res.Accepted, n)
	}
	waitFor(t, 4*time.Minute, "every job ended or waiting", func() (bool, string) {
		left := r.queryInt(`SELECT count(*) FROM jobs WHERE state IN ('submitted', 'placed', 'running')`)
		return left == 0, fmt.Sprintf("%d jobs submitted, placed or running", left)
	})
	sampler.stop()
	// A released victim's resume is verified within verify_resume_timeout_s
	// (300 s) at most: every preemption is then finished.
	waitFor(t, 6*time.Minute, "every preemption finished", func() (bool, string) {
		left := r.queryInt(`SELECT count(*) FROM preemptions WHERE state <> 'observed' AND (state = 'in_progress' OR finished_at IS NULL)`)
		return left == 0, fmt.Sprintf("%d preemptions in progress or verifying the resume", left)
	})

	checkEveryJobEndedOrExplained(t, e, n)
	sampler.check(t)
	checkUsageConsistent(t, e)
	checkWaitEvents(t, e)
	_, gpus := verify(t, r, gpuChecks())
	preempted := r.queryInt(`SELECT count(*) FROM preemptions WHERE kind = 'preemption' AND state <> 'observed'`)
	if preempted == 0 {
		t.Errorf("no preemption: the replay did not exercise preemptions")
	}
	_, preemptions := verify(t, r, []check{
		{what: "victims released by a preemption without a saved checkpoint", sql: `
			SELECT count(*) FROM preemptions WHERE released_at IS NOT NULL AND outcome IS DISTINCT FROM 'victim_ended' AND saved_at IS NULL`},
		{what: "preemptions released whose victim still holds the allocation", sql: `
			SELECT count(*) FROM preemptions p JOIN allocations a ON a.id = p.allocation_id
			WHERE p.state = 'released' AND a.released_at IS NULL`},
		{what: "aborted without an abort outcome", sql: `
			SELECT count(*) FROM preemptions WHERE state = 'aborted'
			AND outcome IS DISTINCT FROM 'aborted_no_checkpoint' AND outcome IS DISTINCT FROM 'aborted_ineligible'
			AND outcome IS DISTINCT FROM 'victim_ended'`},
		{what: "ended preemptions without an end time or outcome", sql: `SELECT count(*) FROM preemptions
			WHERE state IN ('released', 'aborted') AND (ended_at IS NULL OR outcome IS NULL)`},
	})
	_, starts := verify(t, r, []check{
		{what: "one policy version switch", sql: `SELECT count(*) FROM audit_log WHERE action = 'activate_policy'`, want: 1},
		{what: "one stage change of the pool", sql: `SELECT count(*) FROM pool_stage_changes WHERE pool = $1`, args: []any{alibaba.DefaultPoolName}, want: 1},
	})

	// Temporal: no duplicate workflow (visibility is eventually consistent).
	c := r.dev.Client
	for _, w := range []struct {
		query string
		want  int
	}{
		{"WorkflowType = 'JobWorkflow'", n},
		{"WorkflowType = 'PreemptionWorkflow'", preempted + r.queryInt(`SELECT count(*) FROM preemptions WHERE kind = 'drill'`)},
		{"WorkflowType = 'SchedulerWorkflow' AND ExecutionStatus = 'Running'", 1},
		{"WorkflowType = 'ReclaimScanWorkflow' AND ExecutionStatus = 'Running'", 1},
		{"WorkflowType = 'NotificationDispatchWorkflow' AND ExecutionStatus = 'Running'", 1},
	} {
		waitFor(t, time.Minute, w.query, func() (bool, string) {
			got := countWorkflows(t, c, w.query)
			return got == w.want, fmt.Sprintf("%d executions, want %d", got, w.want)
		})
	}
	outcomes := map[string]int{}
	rows, err = r.db.Query(context.Background(), `SELECT state || '/' || outcome, count(*) FROM preemptions
		WHERE state <> 'observed' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		outcomes[k] = v
	}
	rows.Close()
	var fates []string
	for _, id := range openAtKill {
		var fate string
		if err := r.db.QueryRow(context.Background(), `SELECT state || '/' || coalesce(outcome, '') FROM preemptions WHERE id = $1`,
			id).Scan(&fate); err != nil {
			t.Fatal(err)
		}
		fates = append(fates, fate)
	}
	t.Logf("the preemptions in progress at the kill ended %v", fates)
	t.Logf("two replicas, %s killed mid-replay: %d jobs (%d succeeded, %d waiting, %d cancelled, %d failed), %d preemptions %v; "+
		"GPUs: %s; preemptions: %s; start policy: %s; %.0f s in all",
		victim.name, n, e.queryInt(t, `SELECT count(*) FROM jobs WHERE state = 'succeeded'`),
		e.queryInt(t, `SELECT count(*) FROM jobs WHERE state = 'waiting'`), e.queryInt(t, `SELECT count(*) FROM jobs WHERE state = 'cancelled'`),
		e.queryInt(t, `SELECT count(*) FROM jobs WHERE state = 'failed'`), preempted, outcomes, gpus, preemptions, starts,
		time.Since(began).Seconds())
}

// freeAddr is a free local TCP address for a serve replica's API.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// replicaToKill picks the replica to SIGKILL: the one whose worker runs a
// pending activity of an open PreemptionWorkflow, else the one running the
// run (ExecutorRun) of a victim of a preemption in progress, else the one
// running the most pending activities of open workflows (Temporal's last
// worker identity, "pid@host@", names the process), else the second. It
// also returns that replica's pending activities by type and why it was
// picked.
func replicaToKill(t *testing.T, r *crashRig, replicas []*serveProcess) (*serveProcess, string) {
	t.Helper()
	ctx := context.Background()
	byPID := map[int]*serveProcess{}
	for _, p := range replicas {
		byPID[p.cmd.Process.Pid] = p
	}
	victims := map[string]bool{}
	rows, err := r.db.Query(ctx, `SELECT victim_job_id FROM preemptions WHERE state = 'in_progress'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		victims[temporalx.JobWorkflowID(id)] = true
	}
	rows.Close()
	pending := map[*serveProcess]map[string]int{}
	var preempting, running *serveProcess
	resp, err := r.dev.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: "ExecutionStatus = 'Running'", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range resp.GetExecutions() {
		ex := info.GetExecution()
		d, err := r.dev.Client.DescribeWorkflow(ctx, ex.GetWorkflowId(), ex.GetRunId())
		if err != nil || d.RawResponse == nil {
			continue // closed meanwhile
		}
		for _, a := range d.RawResponse.GetPendingActivities() {
			pid, _ := strconv.Atoi(strings.SplitN(a.GetLastWorkerIdentity(), "@", 2)[0])
			p := byPID[pid]
			if p == nil {
				continue
			}
			if pending[p] == nil {
				pending[p] = map[string]int{}
			}
			pending[p][a.GetActivityType().GetName()]++
			switch {
			case info.GetType().GetName() == "PreemptionWorkflow" && preempting == nil:
				preempting = p
			case victims[ex.GetWorkflowId()] && running == nil:
				running = p
			}
		}
	}
	pick, why := preempting, "it ran a pending activity of a PreemptionWorkflow"
	if pick == nil {
		pick, why = running, "it ran the run of a preemption's victim"
	}
	if pick == nil {
		pick, why = replicas[1], "it ran the most pending activities"
		for _, p := range replicas {
			if total(pending[p]) > total(pending[pick]) {
				pick = p
			}
		}
	}
	var parts []string
	for name, k := range pending[pick] {
		parts = append(parts, fmt.Sprintf("%s ×%d", name, k))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	return pick, strings.Join(parts, ", ") + " (" + why + ")"
}

// total is the sum of m's counts.
func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
