package main

import (
	"cmp"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/crashpoint"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/service"
)

// Defaults of `gpugov serve` besides defaultDatabaseURL (migrate.go).
const (
	defaultTemporalAddress = "127.0.0.1:7233"
	defaultAPIAddr         = "127.0.0.1:8080"
	// devTokensFile is the development token file serve falls back to, relative
	// to the working directory or to the binary's parent directory (bin/..).
	devTokensFile = "deploy/gpugov/tokens.yaml"
)

// serveOptions are the flags of `gpugov serve`.
type serveOptions struct {
	databaseURL       string
	temporalAddress   string
	namespace         string
	apiAddr           string
	tokensFile        string
	inventoryFile     string
	inventoryFormat   string
	inventoryPool     string
	policyFile        string
	cycleInterval     time.Duration
	simSpeed          float64
	workflowCache     int
	reconcileInterval time.Duration
	sampleRetention   time.Duration
	decisionRetention time.Duration
	logLevel          string
	tlsCert, tlsKey   string
	temporalUI        string
	limits            api.Limits
	pprofAddr         string
}

func init() {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gpugov service: HTTP API, Temporal workers, scheduler and simulated executor",
		Long: `serve runs gpugov: it creates and migrates the database, imports --inventory-file
(a static YAML inventory or an Alibaba node-list CSV) when given, connects to
Temporal (registering gpugov's search attributes), runs the service worker
(every workflow and the store-backed activities) and the simulated executor,
starts the scheduler workflow, and serves the API with /metrics until SIGINT or
SIGTERM, then shuts down gracefully. Pending jobs' workflows are reconciled
every --reconcile-interval. Node agents' GPU utilisation samples older than
--gpu-sample-retention are deleted hourly; a retention shorter than the reclaim
observation window (the policy's reclaim.observation_window_s) is refused.
Scheduling decisions (what each cycle did per job, read by why's last
scheduling action) older than --decision-retention are deleted hourly too,
keeping each unfinished job's latest wait decision.

Without --tokens-file (or GPUGOV_TOKENS_FILE) it warns and uses the development
tokens of ` + devTokensFile + ` (admin token "dev-admin").

--policy (or GPUGOV_POLICY_FILE) takes the policy file (format gpugov.policy/v1,
internal/policy; example deploy/gpugov/policy.yaml): the scheduling rules of
every cycle, queues, quotas, project fair-share weights, pool automation stages,
protection windows, preemption and its verify-resume bounds, and the reclaim
scan and its modes. Its simulation section is ignored. The file is re-read
whenever it changes (polled every few seconds; a change that does not load
keeps the previous version in force and is logged). Each version loaded is
stored by its content hash and activated (audited), every scheduling cycle
records the hash it ran with, and the version's queues, quotas, stages and
low-risk queues are written to the database. Without it the default policy
applies (stored the same way): stored stages are kept, the reclaim scan records
nothing and, when no queue exists, one queue per tier is created.

The simulated executor runs --sim-speed seconds of job work per real second;
keep it equal to replay's --speed (both default to 600) so that a replay
compresses runs and arrivals alike.

GPUGOV_CRASHPOINT (with GPUGOV_CRASHPOINT_DIR) is a crash-test hook
(internal/crashpoint, docs/design.md §7 "Crash points"): when set, the named
activity blocks before its body or after its effect until the process is
killed, and serve logs a warning. Never set it outside crash tests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.databaseURL, "database-url", cmp.Or(os.Getenv("DATABASE_URL"), defaultDatabaseURL), "PostgreSQL URL (env DATABASE_URL)")
	f.StringVar(&o.temporalAddress, "temporal-address", cmp.Or(os.Getenv("TEMPORAL_ADDRESS"), defaultTemporalAddress), "Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	f.StringVar(&o.namespace, "temporal-namespace", cmp.Or(os.Getenv("TEMPORAL_NAMESPACE"), "default"), "Temporal namespace (env TEMPORAL_NAMESPACE)")
	f.StringVar(&o.apiAddr, "api-addr", cmp.Or(os.Getenv("GPUGOV_API_ADDR"), defaultAPIAddr), "HTTP listen address (env GPUGOV_API_ADDR)")
	f.StringVar(&o.tokensFile, "tokens-file", os.Getenv("GPUGOV_TOKENS_FILE"), "API token file (env GPUGOV_TOKENS_FILE; default: the development tokens of "+devTokensFile+")")
	f.StringVar(&o.inventoryFile, "inventory-file", "", "inventory to import at start: static YAML or Alibaba node-list CSV")
	f.StringVar(&o.inventoryFormat, "inventory-format", service.FormatAuto, "format of --inventory-file: auto, yaml or alibaba-csv")
	f.StringVar(&o.inventoryPool, "pool", "", "with --inventory-file: the pool a CSV's nodes form (default \"alibaba\"), or the one pool of a YAML file to import")
	f.StringVar(&o.policyFile, "policy", os.Getenv("GPUGOV_POLICY_FILE"), "policy file, gpugov.policy/v1 YAML, re-read on change (env GPUGOV_POLICY_FILE); default policy when empty")
	f.DurationVar(&o.cycleInterval, "cycle-interval", service.DefaultCycleInterval, "longest time between scheduling cycles without a signal (whole seconds)")
	f.Float64Var(&o.simSpeed, "sim-speed", service.DefaultSimSpeed, "simulated executor speed: seconds of job work per real second")
	f.IntVar(&o.workflowCache, "workflow-cache-size", service.DefaultWorkflowCacheSize, "workflow executions kept in memory between their tasks (the Temporal SDK's sticky cache); an evicted one is replayed at its next task")
	f.DurationVar(&o.reconcileInterval, "reconcile-interval", service.DefaultReconcileInterval, "period of the job-workflow reconciler")
	f.DurationVar(&o.sampleRetention, "gpu-sample-retention", service.DefaultGPUSampleRetention,
		"how long GPU utilisation samples are kept (at least the reclaim observation window)")
	f.DurationVar(&o.decisionRetention, "decision-retention", service.DefaultDecisionRetention,
		"how long scheduling decisions are kept (each unfinished job keeps its latest wait decision)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.pprofAddr, "pprof-addr", "", "serve Go's runtime profiles (net/http/pprof, /debug/pprof/) on this address, e.g. 127.0.0.1:6060, for profiling under load; unauthenticated, so keep it on loopback; off when empty")
	f.StringVar(&o.tlsCert, "tls-cert", os.Getenv("GPUGOV_TLS_CERT"), "PEM certificate (chain) to serve HTTPS with, together with --tls-key (env GPUGOV_TLS_CERT)")
	f.StringVar(&o.tlsKey, "tls-key", os.Getenv("GPUGOV_TLS_KEY"), "PEM private key of --tls-cert (env GPUGOV_TLS_KEY)")
	f.StringVar(&o.temporalUI, "temporal-ui", cmp.Or(os.Getenv("GPUGOV_TEMPORAL_UI"), "http://127.0.0.1:8233"),
		"Temporal UI base URL the web console (/ui/) links workflows to (env GPUGOV_TEMPORAL_UI; \"\": no links)")
	f.Float64Var(&o.limits.RatePerSecond, "rate-limit", api.DefaultRatePerSecond, "requests per second each API token may make, sustained (429 with Retry-After beyond)")
	f.IntVar(&o.limits.RateBurst, "rate-burst", api.DefaultRateBurst, "requests each API token may make at once above --rate-limit")
	f.Int64Var(&o.limits.MaxBodyBytes, "max-body-bytes", api.DefaultMaxBodyBytes, "largest request body in bytes (413 beyond; 0: the default, 1 MiB)")
	f.IntVar(&o.limits.MaxHeaderBytes, "max-header-bytes", api.DefaultMaxHeaderBytes, "largest request header in bytes (431 beyond)")
	rootCmd.AddCommand(cmd)
}

// run turns the flags into a service.Config and runs the service until a
// signal arrives.
func (o *serveOptions) run(cmd *cobra.Command) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return newUsageError("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	cfg, err := o.config(logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.pprofAddr != "" {
		closeProfiles, err := serveProfiles(o.pprofAddr, logger)
		if err != nil {
			return err
		}
		defer closeProfiles()
	}
	return service.Run(ctx, cfg)
}

// serveProfiles serves net/http/pprof's handlers under /debug/pprof/ on addr
// (its own listener, never the API's, which needs a token) until the
// returned function is called. An address that cannot be listened on is a
// usage error.
func serveProfiles(addr string, logger *slog.Logger) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, newUsageError("--pprof-addr: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	logger.Warn("serving runtime profiles without authentication", "addr", l.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// config validates the flags and reads the files they name; a bad flag or
// file is a usage error.
func (o *serveOptions) config(logger *slog.Logger) (service.Config, error) {
	switch {
	case o.cycleInterval < time.Second:
		return service.Config{}, newUsageError("--cycle-interval must be at least 1s, got %s", o.cycleInterval)
	case o.workflowCache < 1:
		return service.Config{}, newUsageError("--workflow-cache-size must be ≥ 1, got %d", o.workflowCache)
	case !(o.simSpeed > 0):
		return service.Config{}, newUsageError("--sim-speed must be > 0, got %g", o.simSpeed)
	case o.reconcileInterval <= 0:
		return service.Config{}, newUsageError("--reconcile-interval must be > 0, got %s", o.reconcileInterval)
	case o.sampleRetention <= 0:
		return service.Config{}, newUsageError("--gpu-sample-retention must be > 0, got %s", o.sampleRetention)
	case o.decisionRetention <= 0:
		return service.Config{}, newUsageError("--decision-retention must be > 0, got %s", o.decisionRetention)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return service.Config{}, newUsageError("--tls-cert and --tls-key go together (HTTPS needs both)")
	case o.limits.RatePerSecond < 0 || o.limits.RateBurst < 0:
		return service.Config{}, newUsageError("--rate-limit and --rate-burst must be > 0 (0: the default), got %g and %d", o.limits.RatePerSecond, o.limits.RateBurst)
	case o.limits.MaxBodyBytes < 0 || o.limits.MaxHeaderBytes < 0 || (o.limits.MaxHeaderBytes > 0 && o.limits.MaxHeaderBytes < 1024):
		return service.Config{}, newUsageError("--max-body-bytes must be > 0 and --max-header-bytes ≥ 1024 (0: the default), got %d and %d",
			o.limits.MaxBodyBytes, o.limits.MaxHeaderBytes)
	}
	if o.tlsCert != "" {
		// Checked before anything starts, so a bad path is a usage error
		// (exit 2) rather than a failure after the workers started.
		if _, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey); err != nil {
			return service.Config{}, newUsageError("--tls-cert/--tls-key: %v", err)
		}
	}
	cfg := service.Config{
		DatabaseURL: o.databaseURL, TemporalAddress: o.temporalAddress, TemporalNamespace: o.namespace,
		APIAddr: o.apiAddr, CycleInterval: o.cycleInterval, SimSpeed: o.simSpeed, WorkflowCacheSize: o.workflowCache,
		ReconcileInterval: o.reconcileInterval, GPUSampleRetention: o.sampleRetention,
		DecisionRetention: o.decisionRetention, Logger: logger,
		TLSCertFile: o.tlsCert, TLSKeyFile: o.tlsKey, APILimits: o.limits, TemporalUI: o.temporalUI,
	}
	cp, err := crashpoint.FromEnv()
	if err != nil {
		return cfg, usageError{err}
	}
	if cp != nil {
		logger.Warn("CRASH POINT SET: a test hook will block activity "+cp.Activity+" ("+string(cp.When)+
			") until this process is killed; never set "+crashpoint.EnvPoint+" outside crash tests",
			"point", cp.String(), "marker_dir", cp.Dir)
		cfg.CrashPoint = cp
	}
	tokens, err := loadServeTokens(o.tokensFile, logger)
	if err != nil {
		return cfg, err
	}
	cfg.Tokens = tokens
	if o.inventoryFile != "" {
		if cfg.Inventory, err = service.LoadInventoryFile(o.inventoryFile, o.inventoryFormat, o.inventoryPool); err != nil {
			return cfg, usageError{err}
		}
	}
	pol := policy.Default()
	if o.policyFile != "" {
		// Checked here for a usage error; the service loads it again to watch it.
		if pol, err = policy.Load(o.policyFile); err != nil {
			return cfg, usageError{err}
		}
		cfg.PolicyFile = o.policyFile
	}
	if err := service.CheckSampleRetention(o.sampleRetention, pol); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// loadServeTokens reads the token file, or — when none is configured — the
// development token file, with a warning. A missing or invalid file is a
// usage error.
func loadServeTokens(path string, logger *slog.Logger) (api.Tokens, error) {
	if path == "" {
		dev, ok := findDevTokens()
		if !ok {
			return api.Tokens{}, newUsageError("no --tokens-file (or GPUGOV_TOKENS_FILE) and no development token file %s "+
				"in the working directory or next to the binary", devTokensFile)
		}
		logger.Warn("no token file configured: using the DEVELOPMENT tokens (never in production)", "file", dev)
		path = dev
	}
	t, err := api.LoadTokens(path)
	if err != nil {
		return api.Tokens{}, usageError{err}
	}
	return t, nil
}

// findDevTokens looks for devTokensFile under the working directory, then
// under the parent of the binary's directory (bin/gpugov → repo root).
func findDevTokens() (string, bool) {
	candidates := []string{devTokensFile}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(filepath.Dir(exe)), devTokensFile))
	}
	for _, c := range candidates {
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return c, true
		}
	}
	return "", false
}
