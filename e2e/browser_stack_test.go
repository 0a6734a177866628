package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/replay"
)

// The browser tests' live stack: make run's contended replay (the trace's
// busiest six hours on a 6-GPU pool cut from its nodes, under
// deploy/gpugov/replay-policy.yaml at 100×), of which the first browserPods
// pods are submitted: enough for jobs to wait for capacity and for the
// scheduler to preempt a checkpointable experiment job, few enough that the
// whole browser test stays within about three minutes.
const (
	browserPods = 100
	// browserGovernanceDeadline bounds the wait, from the first submission,
	// for a preemption that released its victim and for waiting jobs.
	browserGovernanceDeadline = 150 * time.Second
	// browserProject is the submitter's project: one of the replay's
	// synthetic projects (alibaba.ProjectOf), so it has trace jobs of its own.
	browserProject        = "project-03"
	browserSubmitterToken = "e2e-submitter-project-03"
	browserSubmitterName  = "e2e-submitter"
	// browserLongRuns long checkpointable training runs of
	// browserLongRunProject are submitted with the replay (startConsoleStack).
	browserLongRuns       = 2
	browserLongRunProject = "project-05"
	// browserTemporalUI is the Temporal UI base URL the console links to:
	// make run's (the dev server here is headless, so links are not followed).
	browserTemporalUI = "http://127.0.0.1:8233"
)

// consoleStack is the live service the console is tested against.
type consoleStack struct {
	e         *env
	submitter *apiclient.Client // browserProject's submitter
	// blocked is the submitter's own job, waiting environment_not_ready on a
	// prerequisite nobody marks ready: a job that stays waiting while the
	// replay's queue moves, for the hold and release actions.
	blocked *api.Job
	// preemption released its victim; foreign is a job of another project
	// than browserProject (the preemption's victim when it is one).
	preemption *api.Preemption
	foreign    *api.Job
	longRuns   []string // the long training runs' job IDs
}

// startConsoleStack starts the service with the submitter's token, submits
// the long runs and the submitter's blocked job, replays the contended slice
// in the background (until the test ends) and returns once a preemption has
// released its victim and jobs wait for capacity.
func startConsoleStack(t *testing.T) *consoleStack {
	t.Helper()
	selected, sz, pol := contendedSlice(t)
	e := startEnv(t, envOptions{pools: alibaba.Pools(sz.Nodes, alibaba.PoolOptions{}), simSpeed: replay.ContendedSpeed, policy: pol,
		temporalUI: browserTemporalUI, principals: map[string]api.Principal{
			browserSubmitterToken: {Name: browserSubmitterName, Project: browserProject, Role: vocab.RoleSubmitter},
		}})
	subs, err := replay.Build(selected[:browserPods], replay.BuildOptions{From: replay.ContendedFrom, Speed: replay.ContendedSpeed,
		Recovery: replay.DefaultRecovery(), MaxRunSeconds: replay.ContendedMaxRunS})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pool: %s; %d pods of the contended window", sz, len(subs))
	submitter, err := apiclient.New("http://"+e.svc.APIAddr(), browserSubmitterToken)
	if err != nil {
		t.Fatal(err)
	}
	st := &consoleStack{e: e, submitter: submitter}

	// Two long training runs of another project in the experiment queue,
	// checkpointing every 3 s real (300 trace-s): still running when the
	// trace's production pods queue behind the full pool, cheap to preempt
	// (little work since their last checkpoint), and too long to end on
	// their own before their release, as the trace's own victims, capped at
	// 36 s, often do (outcome victim_ended).
	for i := range browserLongRuns {
		j, _, err := e.client.Submit(context.Background(), &api.JobSpec{Project: browserLongRunProject, Queue: "experiment",
			Resources:  api.ResourceSpec{GPUs: 1, Pool: alibaba.DefaultPoolName},
			RunSeconds: 30000,
			Recovery:   api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 300, Profile: "training"},
		}, fmt.Sprintf("browser-long-run-%d", i))
		if err != nil {
			t.Fatalf("submit a long run: %v", err)
		}
		st.longRuns = append(st.longRuns, j.ID)
	}

	started := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := replay.Run(ctx, replay.Config{Client: e.client, Submissions: subs, Speed: replay.ContendedSpeed,
			Pool: alibaba.DefaultPoolName, Wait: time.Second, SettleTime: time.Second})
		done <- err
	}()
	// Registered after startEnv's cleanups, so it runs before them: the
	// replay stops before the service does.
	t.Cleanup(func() {
		cancel()
		<-done
	})

	blocked, _, err := submitter.Submit(context.Background(), &api.JobSpec{Queue: "standard",
		Resources:     api.ResourceSpec{GPUs: 1, Pool: alibaba.DefaultPoolName},
		RunSeconds:    600,
		Prerequisites: []api.PrerequisiteSpec{{Name: "dataset-snapshot", Message: "the nightly export has not landed"}},
	}, "browser-blocked")
	if err != nil {
		t.Fatalf("submit the submitter's job: %v", err)
	}
	st.blocked = blocked

	replayDone, lastLog := false, time.Now()
	waitFor(t, browserGovernanceDeadline, "a released preemption and jobs waiting for capacity", func() (bool, string) {
		if !replayDone {
			select {
			case err := <-done:
				replayDone = true
				done <- err // for the cleanup
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatalf("replay: %v", err)
				}
			default:
			}
		}
		list, err := e.client.Preemptions(context.Background(), apiclient.PreemptionOptions{Kind: "preemption", Limit: 100})
		if err != nil {
			return false, err.Error()
		}
		// Released by the preemption itself (released_at): state released
		// alone also covers a victim that ended on its own first.
		var released []api.Preemption
		outcomes := map[string]int{}
		for _, p := range list.Preemptions {
			if p.ReleasedAt != nil {
				released = append(released, p)
			}
			outcomes[p.State+"/"+cmp.Or(p.Outcome, "running")]++
		}
		waiting := e.queryInt(t, `SELECT count(*) FROM jobs WHERE state = 'waiting'
			AND reason IN ('capacity_busy', 'fragmented', 'reserved_for_higher_priority', 'preemption_in_progress')`)
		mine := e.queryInt(t, `SELECT count(*) FROM jobs WHERE state = 'waiting' AND project = $1 AND reason = 'environment_not_ready'`, browserProject)
		msg := fmt.Sprintf("%d preemptions released their victim (by state/outcome: %v), %d jobs waiting for capacity, "+
			"%d of the submitter's waiting on the prerequisite (%s in)",
			len(released), outcomes, waiting, mine, time.Since(started).Round(time.Second))
		if len(released) == 0 || waiting == 0 || mine == 0 {
			if time.Since(lastLog) >= 10*time.Second {
				t.Log(msg)
				lastLog = time.Now()
			}
			return false, msg
		}
		p := released[len(released)-1] // the oldest (the list is newest first): furthest along its steps
		st.preemption = &p
		t.Log(msg)
		return true, msg
	})

	// A job of another project: the preemption's victim or beneficiary when
	// one is, else any replayed job.
	for _, id := range []string{st.preemption.VictimJobID, st.preemption.ForJobID} {
		j, err := e.client.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Project != browserProject {
			st.foreign = j
			break
		}
	}
	if st.foreign == nil {
		var id string
		if err := e.db.QueryRow(context.Background(), `SELECT id FROM jobs WHERE project <> $1 ORDER BY submitted_at LIMIT 1`,
			browserProject).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if st.foreign, err = e.client.GetJob(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("stack ready in %s: preemption %s (victim %s, outcome %q), submitter's blocked job %s, another project's job %s (%s)",
		time.Since(started).Round(time.Second), st.preemption.ID, st.preemption.VictimJobID, st.preemption.Outcome,
		st.blocked.ID, st.foreign.ID, st.foreign.Project)
	return st
}
