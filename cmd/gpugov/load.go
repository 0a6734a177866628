package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/load"
	"github.com/gpugov/gpugov/store"
)

// errLoadFailed makes `gpugov load` exit 1 after printing a failing report.
var errLoadFailed = errors.New("load test failed (see the report's FAIL lines)")

func init() {
	var (
		cfg         load.Config
		databaseURL string
		temporal    string
		format      string
		burst       load.BurstConfig
		backlog     load.BacklogConfig
	)
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Run a sustained open-loop load against a running gpugov serve and check that nothing was lost",
		Long: `load sends, for --duration, submissions at --rate per second and, each at its own
constant rate, job reads (get), wait-event reads (why), job lists and queue
reports; --cancel-share of the accepted jobs are cancelled within
--cancel-delay of their 201. Arrivals are open loop: a request leaves at its
scheduled time whatever earlier ones take, and its latency is measured from
that time. Jobs are simulated (--run-seconds) on --pool, spread over
--projects projects (load-00 …) and the four tier queues; --wait-share of them
are built to wait for good (held, an unknown GPU model, a prerequisite not
ready).

It samples serve's memory every --sample-interval: RSS from
/proc/<--serve-pid>/status and the Go heap from serve's /metrics. After the
window it waits up to --drain for every accepted job to be final or waiting
with a reason and for the backlog to drain (no job pending but those built to
wait), samples --after-drain more, then reads each one's row from --database-url and its workflow
from Temporal (DescribeWorkflow job/<id>), and prints the report: per request
kind the rate, the answers by status and p50/p99/max latency; lost jobs;
memory over time and its trend: with a flat backlog, the least-squares slopes
of RSS and live heap over the window's second half against --max-growth
MiB/min; when the backlog grew (the pipeline finished fewer jobs than were
accepted), a least-squares fit of memory against backlog and time over the
second half, the drain and what follows it, whose memory per pending job must
stay below --max-per-pending-kib and whose growth the backlog does not explain
below --max-growth (docs/design.md §8 "Sustained load"). It exits 1 when anything was lost, any
answer was a 5xx or unanswered, or memory grew; 2 for bad flags.

The token must be an operator's or an admin's (the load submits for several
projects and cancels their jobs). Use it only against a stack of its own:
` + "`make load`" + ` starts one.

--burst N replaces the streams (rates, --duration, cancels) by N submissions
of the same mix sent as fast as the API takes them, --burst-concurrency in
flight (a 429 is sent again after 200 ms). Right after the last answer it
reads every accepted job's row in one query; then it polls Temporal until
every accepted job's workflow started and the store until all settled,
against the drain time N ÷ --floor-rate predicts (the floor/s of ` + "`make bench-throughput`" + `);
then the final check, and one row and one workflow per job. It exits 1 when a
row was missing at answer time, a job was lost or duplicated, an answer was a
5xx, unanswered or another 4xx than 429, or not every workflow started within
max(2 × predicted, 60 s) of the first submission. --drain defaults to
max(10m, 3 × predicted) there.

--backlog N stores N pending jobs of the mix straight through the store
(the API's conversion, store.CreateJobs, 10,000 a transaction) while serve
runs, after 15 s of baseline samples, and samples serve's memory, the pending
count and the scheduling cycles for --backlog-hold while the scheduler cycles
over them and the reconciler starts their workflows. It exits 1 only when the
rows did not all land or serve's memory could not be read.`,
		Args: cobra.NoArgs,
	}
	newClient := apiclient.AddFlags(cmd.Flags())
	fl := cmd.Flags()
	fl.StringVar(&databaseURL, "database-url", cmp.Or(os.Getenv("DATABASE_URL"), defaultDatabaseURL), "serve's PostgreSQL URL, read by the final check (env DATABASE_URL)")
	fl.StringVar(&temporal, "temporal-address", cmp.Or(os.Getenv("TEMPORAL_ADDRESS"), defaultTemporalAddress), "serve's Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	fl.Float64Var(&cfg.Rate, "rate", load.DefaultRate, "submissions per second")
	fl.DurationVar(&cfg.Duration, "duration", load.DefaultDuration, "load window")
	fl.Float64Var(&cfg.GetRate, "get-rate", load.DefaultGetRate, "GET /v1/jobs/{id} per second")
	fl.Float64Var(&cfg.WhyRate, "why-rate", load.DefaultWhyRate, "GET /v1/jobs/{id}/events per second")
	fl.Float64Var(&cfg.ListRate, "list-rate", load.DefaultListRate, "GET /v1/jobs?state=waiting per second")
	fl.Float64Var(&cfg.ReportRate, "report-rate", load.DefaultReportRate, "GET /v1/reports/queues per second")
	fl.Float64Var(&cfg.CancelShare, "cancel-share", load.DefaultCancelShare, "share of accepted jobs cancelled (0..1)")
	fl.DurationVar(&cfg.CancelDelay, "cancel-delay", load.DefaultCancelDelay, "a cancel follows its 201 after a delay drawn from [0, this)")
	fl.Float64Var(&cfg.WaitShare, "wait-share", load.DefaultWaitShare, "share of submissions built to wait for good (0..1)")
	fl.Float64Var(&cfg.RunSeconds, "run-seconds", load.DefaultRunSeconds, "each job's simulated run_seconds (serve's --sim-speed divides it)")
	fl.IntVar(&cfg.Projects, "projects", load.DefaultProjects, "projects the submissions are spread over")
	fl.StringVar(&cfg.Pool, "pool", load.DefaultPool, "pool the jobs ask for")
	fl.IntVar(&cfg.MaxInFlight, "max-in-flight", load.DefaultMaxInFlight, "requests in flight above which a due request is dropped (and counted)")
	fl.DurationVar(&cfg.Drain, "drain", load.DefaultDrain, "after the window, how long to wait for every accepted job to settle")
	fl.IntVar(&cfg.ServePID, "serve-pid", 0, "gpugov serve's process ID, for RSS samples (0: none)")
	fl.StringVar(&cfg.MetricsURL, "metrics-url", "", "serve's /metrics for heap samples (default: --api + /metrics; \"none\" for none)")
	fl.DurationVar(&cfg.SampleInterval, "sample-interval", load.DefaultSampleInterval, "time between memory samples")
	fl.Float64Var(&cfg.MaxGrowth, "max-growth", load.DefaultMaxGrowth, "bound on RSS and live-heap growth over the window's second half, MiB per minute")
	fl.Float64Var(&cfg.MaxPerPendingKiB, "max-per-pending-kib", load.DefaultMaxPerPendingKiB, "when the backlog grows: bound on RSS and live-heap growth per pending job, KiB")
	fl.DurationVar(&cfg.AfterDrain, "after-drain", load.DefaultAfterDrain, "once every job settled, how long serve's memory is still sampled")
	fl.Uint64Var(&cfg.Seed, "seed", 1, "seed of the job mix and the request targets")
	fl.StringVar(&format, "format", "table", "report format: table or json")
	fl.IntVar(&burst.Jobs, "burst", 0, "instead of the streams: this many submissions as fast as the API takes them (0: none)")
	fl.IntVar(&burst.Concurrency, "burst-concurrency", load.DefaultBurstConcurrency, "submissions in flight during --burst")
	fl.Float64Var(&burst.FloorRate, "floor-rate", load.DefaultFloorRate, "floor lifecycles per second the --burst drain prediction divides by (make bench-throughput's floor/s)")
	fl.IntVar(&backlog.Jobs, "backlog", 0, "instead of the streams: store this many pending jobs through the store and sample serve (0: none)")
	fl.DurationVar(&backlog.Hold, "backlog-hold", load.DefaultBacklogHold, "how long --backlog samples serve after storing the jobs")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkFormat(format, "table", "json"); err != nil {
			return err
		}
		switch {
		case !(cfg.Rate > 0) || cfg.Duration <= 0:
			return newUsageError("--rate and --duration must be > 0")
		case cfg.GetRate < 0 || cfg.WhyRate < 0 || cfg.ListRate < 0 || cfg.ReportRate < 0:
			return newUsageError("--get-rate, --why-rate, --list-rate and --report-rate must not be negative")
		case !(cfg.CancelShare >= 0 && cfg.CancelShare <= 1) || !(cfg.WaitShare >= 0 && cfg.WaitShare <= 1):
			return newUsageError("--cancel-share and --wait-share must be in 0..1")
		case !(cfg.RunSeconds > 0):
			return newUsageError("--run-seconds must be > 0, got %g", cfg.RunSeconds)
		case cfg.CancelDelay <= 0 || cfg.Drain <= 0 || cfg.SampleInterval <= 0 || cfg.Projects <= 0 || cfg.MaxInFlight <= 0:
			return newUsageError("--cancel-delay, --drain, --sample-interval, --projects and --max-in-flight must be > 0")
		case !(cfg.MaxGrowth > 0):
			return newUsageError("--max-growth must be > 0, got %g", cfg.MaxGrowth)
		case !(cfg.MaxPerPendingKiB > 0) || cfg.AfterDrain <= 0:
			return newUsageError("--max-per-pending-kib and --after-drain must be > 0")
		case burst.Jobs < 0 || backlog.Jobs < 0:
			return newUsageError("--burst and --backlog must not be negative")
		case burst.Jobs > 0 && backlog.Jobs > 0:
			return newUsageError("--burst and --backlog are separate runs: give one")
		case burst.Concurrency <= 0:
			return newUsageError("--burst-concurrency must be > 0, got %d", burst.Concurrency)
		case !(burst.FloorRate > 0):
			return newUsageError("--floor-rate must be > 0, got %g", burst.FloorRate)
		case backlog.Hold <= 0:
			return newUsageError("--backlog-hold must be > 0, got %s", backlog.Hold)
		}
		client, err := connect(newClient, "")
		if err != nil {
			return err
		}
		cfg.Client = client.WithHTTPClient(load.NewHTTPClient(cfg.MaxInFlight))
		switch cfg.MetricsURL {
		case "":
			cfg.MetricsURL = client.BaseURL() + "/metrics"
		case "none":
			cfg.MetricsURL = ""
		}
		ctx := cmd.Context()
		st, err := store.Open(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer st.Close()
		tc, err := temporalx.Dial(ctx, temporalx.ClientOptions{HostPort: temporal,
			Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			return err
		}
		defer tc.Close()
		cfg.Store, cfg.Temporal = st, tc
		cfg.CheckTrend = true
		cfg.Progress = cmd.ErrOrStderr()
		var rendered interface{ Render(io.Writer) error }
		pass := false
		switch {
		case burst.Jobs > 0:
			if !cmd.Flags().Changed("drain") {
				cfg.Drain = 0 // RunBurst's max(DefaultDrain, 3 × predicted)
			}
			burst.Config = cfg
			rep, err := load.RunBurst(ctx, burst)
			if err != nil {
				return apiFailure(err)
			}
			rendered, pass = rep, rep.Pass
		case backlog.Jobs > 0:
			backlog.Config = cfg
			rep, err := load.RunBacklog(ctx, backlog)
			if err != nil {
				return apiFailure(err)
			}
			rendered, pass = rep, rep.Pass
		}
		if rendered != nil {
			if format == "json" {
				err = printJSON(cmd.OutOrStdout(), rendered)
			} else {
				err = rendered.Render(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !pass {
				return errLoadFailed
			}
			return nil
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "load: %g submissions/s for %s against %s; a progress line every %s\n",
			cfg.Rate, cfg.Duration, client.BaseURL(), cfg.SampleInterval.Round(time.Millisecond))
		rep, err := load.Run(ctx, cfg)
		if err != nil {
			return apiFailure(err)
		}
		if format == "json" {
			err = printJSON(cmd.OutOrStdout(), rep)
		} else {
			err = rep.Render(cmd.OutOrStdout())
		}
		if err != nil {
			return err
		}
		if !rep.Pass {
			return errLoadFailed
		}
		return nil
	}
	rootCmd.AddCommand(cmd)
}
