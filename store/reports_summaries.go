package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/gpugov/gpugov/internal/queuereport"
)

// Stored report summaries (migration 00080). A long window's report merges
// summaries of its full days and hours, kept in report_summaries, with fresh
// summaries of its two ends; see QueueReport.
const (
	// summaryLockKey is the advisory lock between the summary writer
	// (exclusive) and late writers (shared, in report_touch).
	summaryLockKey = int64(7143004220512400006)

	// summarySettle is how far behind the database clock the last stored
	// summary ends. report_touch treats a record dated more than 10 minutes
	// back as a late write; the 5 minutes between the two bound how long a
	// transaction may run between writing a record and committing it (a
	// writer that skipped the check because its record was recent must commit
	// before a summary covering that record is computed). It also exceeds
	// DefaultStarvationMinWait, so a wait still open when its hour is
	// summarised is long enough to be listed in every later summary.
	summarySettle = 15 * time.Minute

	// summaryPassTime bounds one pass of computing summaries under the lock
	// (it stops after the summary that passes it): late writers wait for the
	// lock, so a cold start (a month of history, a minute or so) is done in
	// several short holds rather than one long one.
	summaryPassTime = 3 * time.Second

	summaryHour = "hour"
	summaryDay  = "day"
	day         = 24 * time.Hour
)

// ErrReportRecords wraps a report computation that failed on the stored
// records (they contradict each other, e.g. overlapping runs of one job): a
// fault of the data or the store, not of the request.
var ErrReportRecords = errors.New("the stored records do not make a report")

// SummaryGroupBy is the grouping of stored summaries: docs/design.md §6's queue ×
// tier × job type × pool. A report grouped by project is computed from the
// records instead, since projects are many and summaries per project would
// be nearly as large as the records.
var SummaryGroupBy = queuereport.DefaultGroupBy

// QueueReport computes the queue service report (queuereport.Compute's
// definitions and result) for opts, limited to project's jobs unless project
// is "". Without a project, and grouped by keys of SummaryGroupBy only, it
// merges stored summaries of the window's full past days and hours (the
// database clock minus 15 minutes bounds "past") and computes the rest from
// the records in one REPEATABLE READ snapshot; summaries missing for the
// window are computed and stored first, under the summary lock, and
// summaries that late writes made stale are dropped and computed again.
// Otherwise (a project, or group_by project) it reads the window's records
// and calls Compute. Errors: a bad window (as LoadReportInput), bad options
// (as Compute), or database errors, wrapped with "queue report".
func (s *Store) QueueReport(ctx context.Context, opts queuereport.Options, project string) (queuereport.Report, error) {
	r, err := s.queueReport(ctx, opts, project)
	if err != nil {
		return queuereport.Report{}, fmt.Errorf("store: queue report: %w", err)
	}
	return r, nil
}

func (s *Store) queueReport(ctx context.Context, opts queuereport.Options, project string) (queuereport.Report, error) {
	if err := checkReportWindow(opts.Window, opts.Now); err != nil {
		return queuereport.Report{}, err
	}
	if _, err := queuereport.RequiredMinWait(opts, nil); err != nil {
		return queuereport.Report{}, err // bad options
	}
	groupBy, err := queuereport.ParseGroupBy(opts.GroupBy)
	if err != nil {
		return queuereport.Report{}, err
	}
	if project != "" || !subset(groupBy, SummaryGroupBy) {
		return s.computeFromRecords(ctx, opts, project)
	}
	targets, capacity, dbNow, err := s.summaryContext(ctx)
	if err != nil {
		return queuereport.Report{}, err
	}
	need, err := queuereport.RequiredMinWait(opts, targets)
	if err != nil {
		return queuereport.Report{}, err
	}
	minWait, _ := queuereport.RequiredMinWait(queuereport.Options{Window: opts.Window, Now: opts.Now}, targets)
	if need < minWait { // options below the stored summaries' floor
		return s.computeFromRecords(ctx, opts, project)
	}
	end := reportEnd(opts.Window, opts.Now)
	first, sealTo := ceilHour(opts.Window.From), sealedUntil(end, dbNow)
	if first.Before(sealTo) {
		if err := s.storeSummaries(ctx, first, sealTo, minWait); err != nil {
			return queuereport.Report{}, err
		}
	}
	var rep queuereport.Report
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			parts, err := summaryParts(ctx, tx, opts.Window.From, end, first, sealTo, minWait)
			if err != nil {
				return err
			}
			rep, err = queuereport.Assemble(opts, targets, queuereport.ShareBase{Capacity: capacity, ProjectWeights: s.reportProjectWeights()}, parts, func(ids []string) (map[string]queuereport.JobDetail, error) {
				return starvingDetails(ctx, tx, ids, opts.Window.From, end)
			})
			if err != nil && ctx.Err() == nil && !isPgError(err) {
				return fmt.Errorf("%w: %w", ErrReportRecords, err)
			}
			return err
		})
	return rep, err
}

// computeFromRecords is the report computed from every record of the window.
func (s *Store) computeFromRecords(ctx context.Context, opts queuereport.Options, project string) (queuereport.Report, error) {
	in, err := s.LoadProjectReportInput(ctx, opts.Window, opts.Now, project)
	if err != nil {
		return queuereport.Report{}, err
	}
	r, err := queuereport.Compute(*in, opts)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrReportRecords, err)
	}
	return r, nil
}

func subset(keys, of []string) bool {
	for _, k := range keys {
		if !slices.Contains(of, k) {
			return false
		}
	}
	return true
}

// isPgError reports whether err came from PostgreSQL.
func isPgError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// summaryContext reads the queues' targets, the pools' capacity and the database clock.
func (s *Store) summaryContext(ctx context.Context) ([]queuereport.QueueTarget, []queuereport.PoolCapacity, time.Time, error) {
	var targets []queuereport.QueueTarget
	err := forEachRow(ctx, s.pool, reportTargetsSQL, nil, func(rows pgx.Rows) error {
		var t queuereport.QueueTarget
		var maxWait float64
		if err := rows.Scan(&t.Queue, &t.ServiceShare, &maxWait, &t.MinShare, &t.MaxShare); err != nil {
			return err
		}
		t.MaxWait = time.Duration(math.Round(maxWait * float64(time.Second))) // as LoadReportInput reads it
		targets = append(targets, t)
		return nil
	})
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("read queues: %w", err)
	}
	var capacity []queuereport.PoolCapacity
	err = forEachRow(ctx, s.pool, reportCapacitySQL, nil, func(rows pgx.Rows) error {
		var c queuereport.PoolCapacity
		if err := rows.Scan(&c.Pool, &c.GPUs); err != nil {
			return err
		}
		capacity = append(capacity, c)
		return nil
	})
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("read pool capacity: %w", err)
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("read the clock: %w", err)
	}
	return targets, capacity, now, nil
}

// ceilHour is t rounded up to a whole hour (UTC).
func ceilHour(t time.Time) time.Time {
	h := t.Truncate(time.Hour)
	if h.Before(t) {
		h = h.Add(time.Hour)
	}
	return h.UTC()
}

// sealedUntil is the end of the last whole hour that may be summarised for a
// report ending at end: past both the report's end and the database clock
// minus summarySettle.
func sealedUntil(end, dbNow time.Time) time.Time {
	limit := dbNow.Add(-summarySettle)
	if end.Before(limit) {
		limit = end
	}
	return limit.Truncate(time.Hour).UTC()
}

// summarySeg is one stored summary's segment.
type summarySeg struct {
	kind     string
	from, to time.Time
}

// summaryPlan returns the segments that cover [first, sealTo): whole UTC days
// where they fit, hours elsewhere.
func summaryPlan(first, sealTo time.Time) []summarySeg {
	var out []summarySeg
	for t := first; t.Before(sealTo); {
		if t.Equal(t.Truncate(day)) && !t.Add(day).After(sealTo) {
			out = append(out, summarySeg{summaryDay, t, t.Add(day)})
			t = t.Add(day)
			continue
		}
		out = append(out, summarySeg{summaryHour, t, t.Add(time.Hour)})
		t = t.Add(time.Hour)
	}
	return out
}

// storeSummaries makes sure report_summaries holds a current summary of
// every segment of summaryPlan(first, sealTo) with the given MinWait. Each
// pass holds the summary lock (on one connection, taken before the pass's
// snapshot): it drops the summaries stale marks or a larger MinWait made
// unusable, then computes missing ones for up to summaryPassTime in one
// REPEATABLE READ snapshot and stores them.
func (s *Store) storeSummaries(ctx context.Context, first, sealTo time.Time, minWait time.Duration) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for {
		done, err := summaryPass(ctx, conn.Conn(), first, sealTo, minWait)
		if err != nil || done {
			return err
		}
	}
}

// summaryPass is one locked pass of storeSummaries; done reports that no
// summary was missing.
func summaryPass(ctx context.Context, conn *pgx.Conn, first, sealTo time.Time, minWait time.Duration) (done bool, err error) {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, summaryLockKey); err != nil {
		return false, fmt.Errorf("summary lock: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session; closing the
		// connection releases it.
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, summaryLockKey); uerr != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				err = fmt.Errorf("summary unlock: %w", uerr)
			}
		}
	}()
	if err := dropStaleSummaries(ctx, conn, minWait); err != nil {
		return false, err
	}
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		missing, err := missingSummaries(ctx, tx, first, sealTo)
		if err != nil {
			return err
		}
		if len(missing) == 0 {
			done = true
			return nil
		}
		start := time.Now()
		for _, seg := range missing {
			if err := storeSummary(ctx, tx, seg, minWait); err != nil {
				return err
			}
			if time.Since(start) > summaryPassTime {
				break
			}
		}
		return nil
	})
	return done, err
}

// dropStaleSummaries consumes the stale marks, dropping every summary that
// ends at or after the earliest, and drops summaries whose MinWait is above
// minWait (the queues' objectives were lowered since) or that another
// version of queuereport wrote.
func dropStaleSummaries(ctx context.Context, conn *pgx.Conn, minWait time.Duration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var since *time.Time
		var maxID *int64
		// -infinity (an inventory change) reads as year 1, before every summary.
		if err := tx.QueryRow(ctx, `
			SELECT min(greatest(since, '0001-01-01 00:00:00+00')), max(id) FROM report_summary_stale`).Scan(&since, &maxID); err != nil {
			return fmt.Errorf("read stale marks: %w", err)
		}
		if since != nil {
			if _, err := tx.Exec(ctx, `DELETE FROM report_summaries WHERE seg_to >= $1`, *since); err != nil {
				return fmt.Errorf("drop stale summaries: %w", err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM report_summary_stale WHERE id <= $1`, *maxID); err != nil {
				return fmt.Errorf("drop stale marks: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `
			DELETE FROM report_summaries WHERE min_wait_ns > $1 OR substring(data FROM 1 FOR $3) <> $2`,
			int64(minWait), queuereport.SummaryFormat(), len(queuereport.SummaryFormat())); err != nil {
			return fmt.Errorf("drop summaries listing too few waits or of another format: %w", err)
		}
		return nil
	})
}

// missingSummaries returns the segments of summaryPlan(first, sealTo) that
// have no stored summary.
func missingSummaries(ctx context.Context, tx pgx.Tx, first, sealTo time.Time) ([]summarySeg, error) {
	have := map[summarySeg]bool{}
	err := forEachRow(ctx, tx, `
		SELECT kind, seg_from, seg_to FROM report_summaries WHERE seg_from >= $1 AND seg_to <= $2`,
		[]any{first, sealTo}, func(rows pgx.Rows) error {
			var seg summarySeg
			if err := rows.Scan(&seg.kind, &seg.from, &seg.to); err != nil {
				return err
			}
			seg.from, seg.to = seg.from.UTC(), seg.to.UTC()
			have[seg] = true
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("list summaries: %w", err)
	}
	var out []summarySeg
	for _, seg := range summaryPlan(first, sealTo) {
		if !have[seg] {
			out = append(out, seg)
		}
	}
	return out, nil
}

// storeSummary computes the summary of seg from the records and stores it. A
// day whose 24 hours are all stored is merged from them instead.
func storeSummary(ctx context.Context, tx pgx.Tx, seg summarySeg, minWait time.Duration) error {
	sum, err := dayFromHours(ctx, tx, seg, minWait)
	if err != nil {
		return err
	}
	if sum == nil {
		in, err := loadReportInput(ctx, tx, seg.from, seg.to, "")
		if err != nil {
			return fmt.Errorf("records of %s %s: %w", seg.kind, seg.from.Format(time.RFC3339), err)
		}
		w := queuereport.Window{From: seg.from, To: seg.to}
		if sum, err = queuereport.Summarize(*in, w, seg.to, SummaryGroupBy, minWait); err != nil {
			return fmt.Errorf("%w: summarize %s %s: %w", ErrReportRecords, seg.kind, seg.from.Format(time.RFC3339), err)
		}
	}
	data, err := sum.MarshalBinary()
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO report_summaries (kind, seg_from, seg_to, min_wait_ns, computed_at, data)
		VALUES ($1, $2, $3, $4, clock_timestamp(), $5)
		ON CONFLICT (kind, seg_from) DO UPDATE SET seg_to = EXCLUDED.seg_to, min_wait_ns = EXCLUDED.min_wait_ns,
			computed_at = EXCLUDED.computed_at, data = EXCLUDED.data`,
		seg.kind, seg.from, seg.to, int64(minWait), data)
	if err != nil {
		return fmt.Errorf("store summary: %w", err)
	}
	return nil
}

// dayFromHours merges a day's stored hour summaries, or returns nil when seg
// is not a day or an hour of it is missing or unreadable.
func dayFromHours(ctx context.Context, tx pgx.Tx, seg summarySeg, minWait time.Duration) (*queuereport.Summary, error) {
	if seg.kind != summaryDay {
		return nil, nil
	}
	var hours []*queuereport.Summary
	err := forEachRow(ctx, tx, `
		SELECT data FROM report_summaries
		WHERE kind = 'hour' AND seg_from >= $1 AND seg_to <= $2 AND min_wait_ns = $3 ORDER BY seg_from`,
		[]any{seg.from, seg.to, int64(minWait)}, func(rows pgx.Rows) error {
			var data []byte
			if err := rows.Scan(&data); err != nil {
				return err
			}
			h := &queuereport.Summary{}
			if h.UnmarshalBinary(data) == nil {
				hours = append(hours, h)
			}
			return nil
		})
	if err != nil || len(hours) != 24 {
		return nil, err
	}
	if m, err := queuereport.Merge(hours...); err == nil {
		return m, nil
	}
	return nil, nil
}

// summaryParts returns the summaries that cover [from, end): stored ones for
// the segments of summaryPlan(first, sealTo) that are current (no stale mark
// at or before their end, MinWait as given, readable), and summaries
// computed now from the records for everything else, all in tx's snapshot.
func summaryParts(ctx context.Context, tx pgx.Tx, from, end, first, sealTo time.Time, minWait time.Duration) ([]*queuereport.Summary, error) {
	stored, err := storedSummaries(ctx, tx, first, sealTo, minWait)
	if err != nil {
		return nil, err
	}
	var parts []*queuereport.Summary
	liveFrom := from // start of the segment not yet covered
	flush := func(to time.Time) error {
		if !liveFrom.Before(to) {
			return nil
		}
		in, err := loadReportInput(ctx, tx, liveFrom, to, "")
		if err != nil {
			return err
		}
		sum, err := queuereport.Summarize(*in, queuereport.Window{From: liveFrom, To: to}, to, SummaryGroupBy, minWait)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrReportRecords, err)
		}
		parts = append(parts, sum)
		return nil
	}
	if first.Before(sealTo) {
		for _, seg := range summaryPlan(first, sealTo) {
			sum := stored[seg]
			if sum == nil && seg.kind == summaryDay { // a day that became stale: its hours may be current
				for t := seg.from; t.Before(seg.to); t = t.Add(time.Hour) {
					if err := addStored(&parts, stored[summarySeg{summaryHour, t, t.Add(time.Hour)}], &liveFrom, t, flush); err != nil {
						return nil, err
					}
				}
				continue
			}
			if err := addStored(&parts, sum, &liveFrom, seg.from, flush); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(end); err != nil {
		return nil, err
	}
	return parts, nil
}

// addStored appends a stored summary starting at at, after the summary of
// what is not covered before it; a nil summary leaves at uncovered.
func addStored(parts *[]*queuereport.Summary, sum *queuereport.Summary, liveFrom *time.Time, at time.Time, flush func(time.Time) error) error {
	if sum == nil {
		return nil
	}
	if err := flush(at); err != nil {
		return err
	}
	*parts = append(*parts, sum)
	*liveFrom = sum.Seg().To
	return nil
}

// storedSummariesSQL reads the stored summaries within [$1, $2) listing waits
// from $3 that no stale mark reaches (report_summaries' primary key, and the
// few marks written since the last summary pass).
const storedSummariesSQL = `
	SELECT kind, seg_from, seg_to, data FROM report_summaries s
	WHERE seg_from >= $1 AND seg_to <= $2 AND min_wait_ns = $3
		AND NOT EXISTS (SELECT 1 FROM report_summary_stale m WHERE m.since <= s.seg_to)`

// storedSummaries reads the current stored summaries within [first, sealTo).
func storedSummaries(ctx context.Context, tx pgx.Tx, first, sealTo time.Time, minWait time.Duration) (map[summarySeg]*queuereport.Summary, error) {
	out := map[summarySeg]*queuereport.Summary{}
	if !first.Before(sealTo) {
		return out, nil
	}
	err := forEachRow(ctx, tx, storedSummariesSQL, []any{first, sealTo, int64(minWait)}, func(rows pgx.Rows) error {
		var seg summarySeg
		var data []byte
		if err := rows.Scan(&seg.kind, &seg.from, &seg.to, &data); err != nil {
			return err
		}
		seg.from, seg.to = seg.from.UTC(), seg.to.UTC()
		sum := &queuereport.Summary{}
		if err := sum.UnmarshalBinary(data); err != nil {
			return nil // an older format: computed from the records instead
		}
		if w := sum.Seg(); !w.From.Equal(seg.from) || !w.To.Equal(seg.to) || !slices.Equal(sum.GroupBy(), SummaryGroupBy) {
			return nil
		}
		out[seg] = sum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read summaries: %w", err)
	}
	return out, nil
}

// starvingDetails reads the current state of the given jobs and the reason
// of the latest wait event of each that started before end among those that
// overlap [from, end) or end at from (ties: the first reason in byte order,
// as queuereport does).
func starvingDetails(ctx context.Context, tx pgx.Tx, ids []string, from, end time.Time) (map[string]queuereport.JobDetail, error) {
	out := make(map[string]queuereport.JobDetail, len(ids))
	err := forEachRow(ctx, tx, `
		SELECT j.id, j.state, coalesce((
			SELECT w.reason FROM wait_events w
			WHERE w.job_id = j.id AND w.started_at < $3 AND (w.ended_at IS NULL OR w.ended_at >= $2)
			ORDER BY w.started_at DESC, w.reason COLLATE "C" LIMIT 1), '')
		FROM jobs j WHERE j.id = ANY($1)`, []any{ids, from, end}, func(rows pgx.Rows) error {
		var id string
		var d queuereport.JobDetail
		if err := rows.Scan(&id, &d.State, &d.LastReason); err != nil {
			return err
		}
		out[id] = d
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read starving jobs: %w", err)
	}
	return out, nil
}
