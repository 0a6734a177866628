package store

import "time"

// ExplainQuery is one query of a report with its arguments, for EXPLAIN in
// the benchmark.
type ExplainQuery struct {
	What string
	SQL  string
	Args []any
}

// ReportExplainQueries returns the queries QueueReport runs for a window
// [from, now) whose stored summaries end at tail: the summaries' read, and
// the jobs, runs and wait events of the live tail [tail, now).
func ReportExplainQueries(from, tail, now time.Time) []ExplainQuery {
	jobs, runs, events, args, jobArgs := reportQueries(tail, now, "")
	return []ExplainQuery{
		{"stored summaries", storedSummariesSQL, []any{ceilHour(from), tail, int64(5 * time.Minute)}},
		{"live tail: jobs", jobs, jobArgs},
		{"live tail: runs", runs, args},
		{"live tail: wait events", events, args},
		{"live tail: releases", reportReleasesSQL, []any{tail, now}},
	}
}

// LockSnapshotCache takes the lock LoadSnapshot holds for a whole load, as
// a scheduler's load in progress does, and returns its unlock.
func (s *Store) LockSnapshotCache() func() {
	c := s.caches.of("")
	c.mu.Lock()
	return c.mu.Unlock
}
