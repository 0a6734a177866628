package service

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/telemetry"
	"github.com/gpugov/gpugov/store"
)

// recordedRunsCap bounds the run IDs remembered to record each run's wait once.
const recordedRunsCap = 4096

// instrumentedStore is the store the activities use, with gpugov's scheduling
// metrics recorded on the way through — the activities have no metrics hooks,
// and every fact the metrics need passes through these calls:
//
//   - LoadSnapshot marks the start of a scheduling cycle and remembers each
//     pending job's queue and tier;
//   - ApplyCycle (when not a replay) records the cycle's duration from that
//     start (load, plan and persist), one placement per granted job by pool
//     and tier, the waiting gauge by queue and reason from the plan, and
//     the wait-reason transitions by new reason (see waitTransitions);
//   - MarkRunning records the job's wait, from submit or requeue
//     (waiting_since) to the start of its run, by queue and tier.
//
// One scheduler per shard runs its cycles one after another, so the cycle
// start and job labels of a shard's last LoadShardSnapshot belong to the
// shard's ApplyShardCycle that follows; shards run in parallel, so both are
// kept per shard.
type instrumentedStore struct {
	*store.Store
	metrics     *telemetry.Metrics
	afterCommit func(context.Context, *store.CycleOutcome) error
	log         *slog.Logger

	// waitingStale has a value when a cycle this process applied may have
	// changed the waiting counts (waitingLoop then refreshes them at once).
	waitingStale chan struct{}

	mu       sync.Mutex
	cycles   map[string]cycleMark // by shard
	recorded map[string]bool      // run IDs whose wait was recorded
	order    []string             // recorded, oldest first, to bound the map
}

var _ activities.Store = (*instrumentedStore)(nil)

// cycleMark is a shard's last load: its start and the labels of its
// pending jobs, by ID.
type cycleMark struct {
	start  time.Time
	labels map[string]jobLabels
}

// jobLabels are the metric labels of a job.
type jobLabels struct {
	queue string
	tier  string
}

func newInstrumentedStore(st *store.Store, m *telemetry.Metrics, afterCommit func(context.Context, *store.CycleOutcome) error,
	log *slog.Logger) *instrumentedStore {
	return &instrumentedStore{Store: st, metrics: m, afterCommit: afterCommit, log: log, recorded: map[string]bool{},
		waitingStale: make(chan struct{}, 1)}
}

// refreshWaiting sets the gpugov_waiting_jobs gauge from the database
// (store.WaitingCounts: every shard's pending jobs by queue and stored
// reason), so that every replica reports the same counts. It returns the
// store's error.
func (s *instrumentedStore) refreshWaiting(ctx context.Context) error {
	counts, err := s.Store.WaitingCounts(ctx)
	if err != nil {
		return err
	}
	waiting := make(map[telemetry.WaitingKey]int64, len(counts))
	for _, c := range counts {
		waiting[telemetry.WaitingKey{Queue: c.Queue, Reason: string(c.Reason)}] = c.Jobs
	}
	s.metrics.SetWaiting(waiting)
	return nil
}

// LoadSnapshot is LoadShardSnapshot of every pool (shard ""), instrumented
// (the embedded Store's would not be).
func (s *instrumentedStore) LoadSnapshot(ctx context.Context, now time.Time) (*scheduling.Snapshot, error) {
	return s.LoadShardSnapshot(ctx, "", now)
}

// ApplyCycle is ApplyShardCycle of every pool (shard ""), instrumented.
func (s *instrumentedStore) ApplyCycle(ctx context.Context, cycleID string, res *scheduling.Result, now time.Time) (*store.CycleOutcome, error) {
	return s.ApplyShardCycle(ctx, "", cycleID, res, now)
}

// LoadShardSnapshot loads the shard's snapshot and notes the cycle's start
// and the labels of its pending jobs.
func (s *instrumentedStore) LoadShardSnapshot(ctx context.Context, shard string, now time.Time) (*scheduling.Snapshot, error) {
	began := time.Now()
	snap, err := s.Store.LoadShardSnapshot(ctx, shard, now)
	if err != nil {
		return nil, err
	}
	labels := make(map[string]jobLabels, len(snap.Pending))
	for _, p := range snap.Pending {
		labels[p.ID] = jobLabels{queue: p.Queue, tier: p.Tier.String()}
	}
	s.mu.Lock()
	if s.cycles == nil {
		s.cycles = map[string]cycleMark{}
	}
	s.cycles[shard] = cycleMark{start: began, labels: labels}
	s.mu.Unlock()
	return snap, nil
}

// ApplyShardCycle applies the shard's cycle, records its metrics unless it
// was a replay, and then runs the AfterCycleCommit hook, whose error it
// returns.
func (s *instrumentedStore) ApplyShardCycle(ctx context.Context, shard, cycleID string, res *scheduling.Result,
	now time.Time) (*store.CycleOutcome, error) {
	out, err := s.Store.ApplyShardCycle(ctx, shard, cycleID, res, now)
	if err != nil {
		return nil, err
	}
	if !out.Replayed {
		s.recordCycle(ctx, shard, out, res)
	}
	if s.afterCommit != nil {
		if err := s.afterCommit(ctx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// recordCycle records a freshly applied cycle's duration and placements,
// and marks the waiting counts stale for waitingLoop to read them again
// from the database (a count of this cycle's plan alone would hold one
// shard's jobs, and only on the replica that ran it).
func (s *instrumentedStore) recordCycle(ctx context.Context, shard string, out *store.CycleOutcome, res *scheduling.Result) {
	s.mu.Lock()
	start, labels := s.cycles[shard].start, s.cycles[shard].labels
	s.mu.Unlock()
	if !start.IsZero() {
		s.metrics.RecordCycle(ctx, time.Since(start))
	}
	for _, p := range out.Placed {
		s.metrics.RecordPlacement(ctx, p.Pool, labels[p.JobID].tier)
	}
	select {
	case s.waitingStale <- struct{}{}:
	default: // a refresh is already due
	}
	s.metrics.AddWaitTransitions(ctx, waitTransitions(out))
}

// waitTransitions is the cycle's wait-reason transitions by new reason,
// as the store counted them when it opened the wait events
// (store.CycleOutcome.WaitTransitionsByReason): from the stored waits, so
// that the counts are right whichever replica's worker ran the previous
// cycle (docs/design.md §10 "Several replicas").
func waitTransitions(out *store.CycleOutcome) map[string]int64 {
	if len(out.WaitTransitionsByReason) == 0 {
		return nil
	}
	byReason := make(map[string]int64, len(out.WaitTransitionsByReason))
	for r, n := range out.WaitTransitionsByReason {
		byReason[r] = int64(n)
	}
	return byReason
}

// MarkRunning starts the run and records the job's wait the first time this
// process sees the run (a retried attempt returns the same run ID). Reading
// the job for its labels is best effort: a failure only loses the sample.
func (s *instrumentedStore) MarkRunning(ctx context.Context, jobID, allocationID string, startStep int64, at time.Time) (string, error) {
	runID, err := s.Store.MarkRunning(ctx, jobID, allocationID, startStep, at)
	if err != nil || !s.firstSight(runID) {
		return runID, err
	}
	j, gerr := s.Store.GetJob(ctx, jobID)
	if gerr != nil {
		s.log.Warn("job wait not recorded", "job", jobID, "err", gerr)
		return runID, nil
	}
	s.metrics.RecordJobWait(ctx, j.Queue, j.Tier.String(), at.Sub(j.WaitingSince))
	return runID, nil
}

// firstSight reports whether runID is seen for the first time, remembering
// the last recordedRunsCap run IDs.
func (s *instrumentedStore) firstSight(runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recorded[runID] {
		return false
	}
	s.recorded[runID] = true
	s.order = append(s.order, runID)
	if len(s.order) > recordedRunsCap {
		delete(s.recorded, s.order[0])
		s.order = s.order[1:]
	}
	return true
}
