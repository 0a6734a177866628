package main

import (
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/queuereport"
)

// reportFlags are the flags of `gpugov report`.
type reportFlags struct {
	from, to, groupBy, project, format string
	compare, before, after             string
	reasons                            bool
}

func init() {
	var f reportFlags
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Queue service report: wait percentiles, longest waits, starvation, time per wait reason, reason shares and main problem, before/after",
		Long: `Print the queue service report over a window, computed by the server from its
records with the definitions of internal/queuereport (the project design's queue service
metrics): per group, wait P50/P95/P99 (submit → first start, and after a requeue),
the longest continuous wait, jobs over the queue's wait objective, the jobs cancelled
(CANCELLED) and the cancellation rate while waiting, delivered vs target service share, time per wait reason and starvation signals,
then the starving jobs, then the jobs stuck, needing action: still waiting in a reason that
earns no aging (held, environment_not_ready, pool_unavailable, no_matching_capacity), with
their owner and the action, then each pool's main problem in one line.

--reasons prints instead, per pool, each wait reason's and reason group's share of the
waiting job-seconds and GPU-seconds (waits × requested GPUs) — capacity, fragmentation
and spec, queue order, quota, environment and operator — and a one-line verdict naming
the pool's main problem, the group with the most waiting GPU-seconds (every tied group on
a tie; "no waiting in window" when nobody waited). not_yet_evaluated, the time before the
scheduler first looked at a job, is service latency: shown apart, in no share.

The window is [--from, --to) (RFC 3339 times), by default the 24 hours before now.
--compare BEFORE_FROM,BEFORE_TO:AFTER_FROM,AFTER_TO (or --before FROM,TO --after FROM,TO)
compares two windows on the same metrics instead. A submitter's token reports on its own
project's jobs only. Exit code 2 when the server rejects the request (bad window, group
or token).`,
		Example: `  gpugov report
  gpugov report --from 2026-11-29T00:00:00Z --to 2026-11-30T00:00:00Z --group-by queue,tier
  gpugov report --reasons --from 2026-11-29T00:00:00Z --to 2026-11-30T00:00:00Z
  gpugov report --compare 2026-11-22T00:00:00Z,2026-11-29T00:00:00Z:2026-11-29T00:00:00Z,2026-12-06T00:00:00Z
  gpugov report --before 2026-11-22T00:00:00Z,2026-11-29T00:00:00Z --after 2026-11-29T00:00:00Z,2026-12-06T00:00:00Z --format json`,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "window start, RFC 3339 (default: 24 h before --to)")
	fl.StringVar(&f.to, "to", "", "window end, RFC 3339 (default: now)")
	fl.StringVar(&f.groupBy, "group-by", "", "comma-separated subset of queue,tier,job_type,pool,project (default queue,tier,job_type,pool; empty: total only)")
	fl.StringVar(&f.project, "project", "", "operators: report on this project only")
	fl.StringVar(&f.compare, "compare", "", "compare two windows: BEFORE_FROM,BEFORE_TO:AFTER_FROM,AFTER_TO")
	fl.StringVar(&f.before, "before", "", "the earlier window of a comparison: FROM,TO")
	fl.StringVar(&f.after, "after", "", "the later window of a comparison: FROM,TO")
	fl.StringVar(&f.format, "format", "text", "output: text or json")
	fl.BoolVar(&f.reasons, "reasons", false, "print each pool's wait-reason shares and main problem instead of the full report")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkFormat(f.format, "text", "json"); err != nil {
			return err
		}
		opts, err := f.options(cmd.Flags().Changed("group-by"))
		if err != nil {
			return err
		}
		client, err := connect(newClient, "")
		if err != nil {
			return err
		}
		if f.compare != "" || f.before != "" || f.after != "" {
			if f.reasons {
				return newUsageError("--reasons reports one window; it does not combine with --compare, --before or --after")
			}
			return runCompare(cmd, client, f, opts)
		}
		if f.reasons {
			return runReasons(cmd, client, f, opts)
		}
		r, err := client.QueueReport(cmd.Context(), opts)
		if err != nil {
			return apiFailure(err)
		}
		if f.format == "json" {
			return printJSON(cmd.OutOrStdout(), r)
		}
		return queuereport.RenderReport(cmd.OutOrStdout(), *r)
	}
	rootCmd.AddCommand(cmd)
}

// options builds the report options from the flags; groupBySet says whether
// --group-by was given (an empty value then asks for the total only).
func (f reportFlags) options(groupBySet bool) (apiclient.ReportOptions, error) {
	var o apiclient.ReportOptions
	var err error
	if o.From, err = optionalTime("--from", f.from); err != nil {
		return o, err
	}
	if o.To, err = optionalTime("--to", f.to); err != nil {
		return o, err
	}
	if groupBySet {
		o.GroupBy = []string{}
		for _, k := range strings.Split(f.groupBy, ",") {
			if k = strings.TrimSpace(k); k != "" {
				o.GroupBy = append(o.GroupBy, k)
			}
		}
	}
	o.Project = f.project
	return o, nil
}

// runReasons fetches the wait-reason report (GET /v1/reports/wait-reasons)
// and prints its reason shares and verdicts per pool, or the whole answer
// as JSON.
func runReasons(cmd *cobra.Command, client *apiclient.Client, f reportFlags, opts apiclient.ReportOptions) error {
	r, err := client.WaitReasonReport(cmd.Context(), opts)
	if err != nil {
		return apiFailure(err)
	}
	if f.format == "json" {
		return printJSON(cmd.OutOrStdout(), r)
	}
	return queuereport.RenderReasonShares(cmd.OutOrStdout(), r.Window, r.End, r.ReasonShares)
}

// runCompare fetches and prints the comparison of two windows.
func runCompare(cmd *cobra.Command, client *apiclient.Client, f reportFlags, opts apiclient.ReportOptions) error {
	if f.from != "" || f.to != "" {
		return newUsageError("--from/--to select one window; a comparison takes --compare or --before and --after")
	}
	before, after, err := compareWindows(f)
	if err != nil {
		return err
	}
	c, err := client.CompareReports(cmd.Context(), before, after, opts)
	if err != nil {
		return apiFailure(err)
	}
	if f.format == "json" {
		return printJSON(cmd.OutOrStdout(), c)
	}
	return queuereport.RenderComparison(cmd.OutOrStdout(), *c)
}

// compareWindows reads the two windows of --compare, or of --before and --after.
func compareWindows(f reportFlags) (before, after queuereport.Window, err error) {
	switch {
	case f.compare != "" && (f.before != "" || f.after != ""):
		return before, after, newUsageError("give --compare or --before and --after, not both")
	case f.compare != "":
		b, a, ok := splitCompare(f.compare)
		if !ok {
			return before, after, newUsageError("--compare %q: want BEFORE_FROM,BEFORE_TO:AFTER_FROM,AFTER_TO", f.compare)
		}
		f.before, f.after = b, a
	case f.before == "" || f.after == "":
		return before, after, newUsageError("a comparison needs both --before and --after (FROM,TO each)")
	}
	if before, err = windowFlag("--before", f.before); err != nil {
		return before, after, err
	}
	after, err = windowFlag("--after", f.after)
	return before, after, err
}

// afterColon finds the colon that separates the two windows of --compare:
// RFC 3339 times contain colons too, but only this one is followed by a date.
var afterColon = regexp.MustCompile(`:(\d{4}-\d{2}-\d{2}T)`)

// splitCompare splits "B_FROM,B_TO:A_FROM,A_TO" into its two windows.
func splitCompare(v string) (before, after string, ok bool) {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return "", "", false
	}
	loc := afterColon.FindStringIndex(parts[1])
	if loc == nil {
		return "", "", false
	}
	return parts[0] + "," + parts[1][:loc[0]], parts[1][loc[0]+1:] + "," + parts[2], true
}

// windowFlag parses FROM,TO of flag name.
func windowFlag(name, v string) (queuereport.Window, error) {
	from, to, ok := strings.Cut(v, ",")
	if !ok {
		return queuereport.Window{}, newUsageError("%s %q: want FROM,TO (RFC 3339 times)", name, v)
	}
	var w queuereport.Window
	var err error
	if w.From, err = optionalTime(name, from); err == nil {
		w.To, err = optionalTime(name, to)
	}
	if err == nil && (w.From.IsZero() || w.To.IsZero()) {
		err = newUsageError("%s %q: want FROM,TO (RFC 3339 times)", name, v)
	}
	return w, err
}

// optionalTime parses an RFC 3339 time; empty gives the zero time.
func optionalTime(name, v string) (time.Time, error) {
	if v = strings.TrimSpace(v); v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, newUsageError("%s %q: not an RFC 3339 time (e.g. 2026-11-30T00:00:00Z)", name, v)
	}
	return t, nil
}
