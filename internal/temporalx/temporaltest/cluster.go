package temporaltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// RequireClusterEnv names the environment variable that turns a missing
// Temporal server binary from a skip into a failure of StartCluster: `make
// test` sets it, since it builds the server first (as CI does, CI set).
const RequireClusterEnv = "GPUGOV_REQUIRE_TEMPORAL_SERVER"

// ClusterBinaries returns the Temporal server and its SQL schema tool that
// StartCluster runs: $TEMPORAL_SERVER_BIN and $TEMPORAL_SQL_TOOL_BIN, else
// bin/temporal-server and bin/temporal-sql-tool at the module root (where
// deploy/dev/ensure-temporal-server.sh builds them). ok is false when either
// is missing.
func ClusterBinaries() (server, sqlTool string, ok bool) {
	root, err := moduleRoot()
	if err != nil && (os.Getenv("TEMPORAL_SERVER_BIN") == "" || os.Getenv("TEMPORAL_SQL_TOOL_BIN") == "") {
		return "", "", false
	}
	server, sqlTool = os.Getenv("TEMPORAL_SERVER_BIN"), os.Getenv("TEMPORAL_SQL_TOOL_BIN")
	if server == "" {
		server = filepath.Join(root, "bin", "temporal-server")
	}
	if sqlTool == "" {
		sqlTool = filepath.Join(root, "bin", "temporal-sql-tool")
	}
	_, errServer := os.Stat(server)
	_, errTool := os.Stat(sqlTool)
	return server, sqlTool, errServer == nil && errTool == nil
}

// AdminURL is the PostgreSQL server StartCluster creates its databases on:
// GPUGOV_TEST_DATABASE_URL when set, otherwise
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable — the server
// store/storetest's databases are on (internal/ does not import store).
func AdminURL() string {
	if u := os.Getenv("GPUGOV_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// ClusterShards is the number of history shards of deploy/temporal/cluster.yaml.
const ClusterShards = 4

// StartCluster starts the Temporal server on PostgreSQL as `make
// run-cluster` runs it (all services in one process, configured by
// deploy/temporal/cluster.yaml) for one test: on two databases of its own
// (temporal_test_<test>_<random> and the same with _vis, created on the
// server of AdminURL with the schemas the server's SQL tool
// embeds) and a free set of ports, with the namespace default and gpugov's
// search attributes registered. The test's cleanup stops the server (SIGTERM,
// then SIGKILL after 10 s) and drops both databases. The result has no
// Restart. It skips the test under `go test -short` and when the binaries
// are missing (ClusterBinaries), except under CI or with RequireClusterEnv set
// (`make test`), where it fails; it fails when the server does not answer
// within 90 s.
func StartCluster(t testing.TB) *DevServer {
	t.Helper()
	SkipShort(t)
	server, sqlTool, ok := ClusterBinaries()
	if !ok {
		if os.Getenv("CI") != "" || os.Getenv(RequireClusterEnv) != "" {
			t.Fatalf("Temporal server or SQL tool not found (%q, %q) under `make test` or CI: "+
				"deploy/dev/ensure-temporal-server.sh builds them into bin/", server, sqlTool)
		}
		t.Skipf("Temporal server or SQL tool not found (%q, %q): deploy/dev/ensure-temporal-server.sh "+
			"builds them (about 4 min of CPU; `make test` does it), or set TEMPORAL_SERVER_BIN and TEMPORAL_SQL_TOOL_BIN", server, sqlTool)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		t.Fatalf("temporaltest: parse %s: %v", AdminURL(), err)
	}
	db := clusterDatabaseName(t.Name())
	vis := db + "_vis"
	for _, d := range []struct{ name, schema string }{{db, "postgresql/v12/temporal"}, {vis, "postgresql/v12/visibility"}} {
		createClusterDatabase(t, sqlTool, pg, d.name, d.schema)
	}
	env := map[string]string{
		"GPUGOV_TEMPORAL_PG_HOST": pg.Host, "GPUGOV_TEMPORAL_PG_PORT": strconv.Itoa(int(pg.Port)),
		"GPUGOV_TEMPORAL_PG_USER": pg.User, "GPUGOV_TEMPORAL_PG_PASSWORD": pg.Password,
		"GPUGOV_TEMPORAL_DB": db, "GPUGOV_TEMPORAL_VISIBILITY_DB": vis, "GPUGOV_TEMPORAL_LOG_LEVEL": "error",
		// A test's server shares the PostgreSQL server (max_connections 100)
		// with the other tests' services running in parallel: 6 + 3
		// connections instead of production's 20 + 10.
		"GPUGOV_TEMPORAL_MAX_CONNS": "6", "GPUGOV_TEMPORAL_VISIBILITY_MAX_CONNS": "3",
		"GPUGOV_TEMPORAL_DYNAMIC_CONFIG": filepath.Join(root, "deploy", "temporal", "dynamicconfig", "development.yaml"),
	}
	var (
		c        client.Client
		proc     *process
		hostPort string
		metrics  int
	)
	for attempt := 1; ; attempt++ {
		ports := freeClusterPorts(t, len(clusterPortVars))
		for i, k := range clusterPortVars {
			env[k] = strconv.Itoa(ports[i])
		}
		hostPort, metrics = "127.0.0.1:"+env["GPUGOV_TEMPORAL_PORT"], mustAtoi(env["GPUGOV_TEMPORAL_METRICS_PORT"])
		var out *lockedBuffer
		c, proc, out, err = startClusterOnce(t, server, root, hostPort, env)
		if err == nil {
			break
		}
		if attempt < startAttempts && lostPort(out.String()) {
			t.Logf("temporal server at %s lost a port (attempt %d): retrying on new ones", hostPort, attempt)
			continue
		}
		t.Fatalf("temporal server on PostgreSQL at %s: %v\n%s", hostPort, err, out.String())
	}
	t.Cleanup(c.Close)
	if err := registerDefault(c); err != nil {
		t.Fatalf("temporal server on PostgreSQL at %s: register namespace default: %v", hostPort, err)
	}
	return &DevServer{HostPort: hostPort, Client: c, MetricsURL: metricsURL(metrics), proc: proc}
}

// clusterPortVars are cluster.yaml's port settings: each gets a free port.
var clusterPortVars = []string{
	"GPUGOV_TEMPORAL_PORT", "GPUGOV_TEMPORAL_HTTP_PORT", "GPUGOV_TEMPORAL_METRICS_PORT",
	"GPUGOV_TEMPORAL_HISTORY_PORT", "GPUGOV_TEMPORAL_MATCHING_PORT", "GPUGOV_TEMPORAL_WORKER_PORT",
	"GPUGOV_TEMPORAL_FRONTEND_MEMBERSHIP_PORT", "GPUGOV_TEMPORAL_HISTORY_MEMBERSHIP_PORT",
	"GPUGOV_TEMPORAL_MATCHING_MEMBERSHIP_PORT", "GPUGOV_TEMPORAL_WORKER_MEMBERSHIP_PORT",
}

// freeClusterPorts returns n distinct ports of 20000–32767 that are free on
// 127.0.0.1 when chosen. The server records its services' ports in PostgreSQL as
// smallint (cluster_membership), so the kernel's ephemeral ports (from
// 32768) are out; this range is also below the kernel's ephemeral range, so
// other processes' outgoing connections do not take it meanwhile.
func freeClusterPorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range 1000 {
		if len(ports) == n {
			return ports
		}
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		port := 20000 + (int(b[0])<<8|int(b[1]))%(32768-20000)
		if slices.Contains(ports, port) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports = append(ports, port)
	}
	t.Fatalf("temporaltest: no %d free ports in 20000-32767", n)
	return nil
}

// startClusterOnce starts one server process and waits until its frontend
// answers; on failure the process has been stopped and its output is
// returned, on success t's cleanup stops it.
func startClusterOnce(t testing.TB, server, root, hostPort string, env map[string]string) (client.Client, *process, *lockedBuffer, error) {
	t.Helper()
	cmd := exec.Command(server, "--root", root, "--config", "deploy/temporal", "--env", "cluster", "--allow-no-auth", "start")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", server, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p := &process{cmd: cmd, exited: exited}
	c, err := dialUntilReady(hostPort, exited, 90*time.Second)
	if err != nil {
		p.stop()
		return nil, nil, out, err
	}
	t.Cleanup(p.stop)
	return c, p, out, nil
}

// registerDefault creates the namespace default (what the dev server has
// from the start) and gpugov's search attributes on it, retrying while the
// server's namespace registry (refreshed every 2 s) does not know it yet.
func registerDefault(c client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: "default", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return err
	}
	for {
		err = temporalx.RegisterSearchAttributes(ctx, c, "default")
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// createClusterDatabase creates database name on pg's server and applies
// schema (an embedded schema of the SQL tool) with it, as deploy/dev/cluster.sh
// setup does; t's cleanup drops the database (after the server has stopped:
// cleanups run last registered first).
func createClusterDatabase(t testing.TB, sqlTool string, pg *pgx.ConnConfig, name, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, pg)
	if err != nil {
		t.Fatalf("temporaltest: connect to PostgreSQL (%s): %v", AdminURL(), err)
	}
	defer admin.Close(context.Background())
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		t.Fatalf("temporaltest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		admin, err := pgx.ConnectConfig(ctx, pg)
		if err != nil {
			t.Errorf("temporaltest: drop %s: connect: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("temporaltest: drop database %s: %v", name, err)
		}
	})
	base := []string{"--plugin", "postgres12", "--endpoint", pg.Host, "--port", strconv.Itoa(int(pg.Port)),
		"--user", pg.User, "--password", pg.Password, "--database", name}
	for _, step := range [][]string{{"setup-schema", "-v", "0.0"}, {"update-schema", "--schema-name", schema}} {
		cmd := exec.CommandContext(ctx, sqlTool, append(base, step...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("temporaltest: %s %s on %s: %v\n%s", filepath.Base(sqlTool), step[0], name, err, out)
		}
	}
}

var unsafeDBChars = regexp.MustCompile(`[^a-z0-9_]+`)

// clusterDatabaseName is "temporal_test_" + a sanitised prefix of the test
// name + 8 random hex digits, with room for the "_vis" suffix within
// PostgreSQL's 63-byte identifier limit.
func clusterDatabaseName(testName string) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	base := unsafeDBChars.ReplaceAllString(strings.ToLower(testName), "_")
	if len(base) > 32 {
		base = base[:32]
	}
	return "temporal_test_" + strings.Trim(base, "_") + "_" + hex.EncodeToString(b[:])
}

// moduleRoot is the directory holding go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}
