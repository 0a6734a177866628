// Package temporaltest starts a real Temporal dev server (the pinned Temporal
// CLI, `temporal server start-dev`), or the pinned Temporal server on
// PostgreSQL (StartCluster), for tests that need more than the SDK's
// testsuite: real workers, real heartbeat timeouts, recorded histories.
package temporaltest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// DevServer is a running Temporal server owned by one test — the CLI's dev
// server (Start, StartPersistent) or the server on PostgreSQL
// (StartCluster); it is stopped by the test's cleanup.
type DevServer struct {
	HostPort string        // frontend gRPC address, "127.0.0.1:<port>"
	Client   client.Client // client on the "default" namespace
	// MetricsURL is the server's Prometheus endpoint,
	// "http://127.0.0.1:<port>/metrics" (the benchmarks read its request
	// counters).
	MetricsURL string

	// Set by StartPersistent only: what Restart needs.
	bin         string
	port        int
	metricsPort int
	dbFile      string
	proc        *process
}

// Binary returns the Temporal CLI the tests use: $TEMPORAL_BIN, else bin/temporal
// at the module root (where `make temporal` builds it). ok is false when neither
// exists.
func Binary() (path string, ok bool) {
	if p := os.Getenv("TEMPORAL_BIN"); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "temporal")
			_, err := os.Stat(p)
			return p, err == nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Start starts an in-memory dev server on a free local port with gpugov's search
// attributes registered, waits until it answers, and stops it (SIGTERM, then
// SIGKILL after 10 s) when the test ends. It skips the test under
// `go test -short` (SkipShort) and when the Temporal CLI is not built (`make
// temporal` builds it) — except under CI (CI set), where a missing CLI is a
// broken set-up and fails the test — and fails it when the server does not
// come up within 60 s.
func Start(t testing.TB) *DevServer {
	t.Helper()
	return start(t, "")
}

// StartPersistent is Start with the server's state in the SQLite file
// dbFile (`--db-filename`), so that Restart brings back every workflow it
// held. The file is the caller's (a t.TempDir() path).
func StartPersistent(t testing.TB, dbFile string) *DevServer {
	t.Helper()
	if dbFile == "" {
		t.Fatal("temporaltest.StartPersistent: empty database file")
	}
	return start(t, dbFile)
}

// start starts a dev server, in memory when dbFile is "".
func start(t testing.TB, dbFile string) *DevServer {
	t.Helper()
	SkipShort(t)
	bin, ok := Binary()
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatalf("Temporal CLI not found (%q) under CI: `make test` builds it into bin/", bin)
		}
		t.Skipf("Temporal CLI not found (%q); run `make temporal` or set TEMPORAL_BIN", bin)
	}
	// The port is free when chosen but may be taken before the server binds
	// it (other test packages start dev servers whose internal services pick
	// random ports): a start that fails on "address already in use" is
	// retried on a new port, up to startAttempts times.
	var (
		c           client.Client
		hostPort    string
		port        int
		metricsPort int
		proc        *process
	)
	for attempt := 1; ; attempt++ {
		var out *lockedBuffer
		var err error
		port, metricsPort = freePort(t), freePort(t)
		hostPort, out, c, proc, err = startOnce(t, bin, port, metricsPort, dbFile)
		if err == nil {
			break
		}
		if attempt < startAttempts && lostPort(out.String()) {
			t.Logf("temporal dev server at %s lost its port (attempt %d): retrying on a new one", hostPort, attempt)
			continue
		}
		t.Fatalf("temporal dev server at %s: %v\n%s", hostPort, err, out.String())
	}
	t.Cleanup(c.Close)
	return &DevServer{HostPort: hostPort, Client: c, MetricsURL: metricsURL(metricsPort), bin: bin, port: port, metricsPort: metricsPort, dbFile: dbFile, proc: proc}
}

// Restart stops a server StartPersistent started (SIGTERM, as an operator
// restarting it would) and starts it again on the same port and database
// file, waiting until it answers; Client reconnects by itself. It fails the
// test when the server was not started persistent or does not come back.
func (d *DevServer) Restart(t testing.TB) {
	t.Helper()
	if d.dbFile == "" {
		t.Fatal("temporaltest: Restart needs a server started with StartPersistent")
	}
	d.proc.stop()
	_, out, c, proc, err := startOnce(t, d.bin, d.port, d.metricsPort, d.dbFile)
	if err != nil {
		t.Fatalf("temporal dev server restart at %s: %v\n%s", d.HostPort, err, out.String())
	}
	c.Close()
	d.proc = proc
}

// startAttempts bounds the port-collision retries of Start.
const startAttempts = 5

// lostPort reports whether a dev server's output says it could not bind a
// port because another process holds it.
func lostPort(output string) bool { return strings.Contains(output, "address already in use") }

// startOnce starts one dev server process on port and waits for it to
// answer. On failure the process has been stopped and its output is returned
// for the caller to inspect; on success it is stopped by t's cleanup.
func startOnce(t testing.TB, bin string, port, metricsPort int, dbFile string) (string, *lockedBuffer, client.Client, *process, error) {
	t.Helper()
	hostPort := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"server", "start-dev", "--headless", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(port), "--metrics-port", strconv.Itoa(metricsPort), "--log-level", "error"}
	if dbFile != "" {
		args = append(args, "--db-filename", dbFile)
	}
	args = append(args, temporalx.DevServerSearchAttributeArgs()...)
	cmd := exec.Command(bin, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p := &process{cmd: cmd, exited: exited}
	c, err := dialUntilReady(hostPort, exited, 60*time.Second)
	if err != nil {
		p.stop()
		return hostPort, out, nil, nil, err
	}
	t.Cleanup(p.stop)
	return hostPort, out, c, p, nil
}

// process is one dev server process; stop is idempotent.
type process struct {
	cmd    *exec.Cmd
	exited <-chan struct{}
	once   sync.Once
}

func (p *process) stop() { p.once.Do(func() { stop(p.cmd, p.exited) }) }

// SkipShort skips t under `go test -short`: the test needs a Temporal dev
// server, and -short is the tier that needs no service (`make test-unit`).
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the Temporal dev server: skipped under -short (make test-unit); `make test` runs it")
	}
}

// dialUntilReady dials until the server answers a health check, the process
// exits, or the deadline passes.
func dialUntilReady(hostPort string, exited <-chan struct{}, timeout time.Duration) (client.Client, error) {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Logger: quietLogger{}})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			if err == nil {
				cancel()
				return c, nil
			}
			c.Close()
		}
		cancel()
		select {
		case <-exited:
			return nil, fmt.Errorf("server exited before answering: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// stop ends the server process gracefully, then forcibly.
func stop(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// lockedBuffer collects the server's output for failure messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// quietLogger drops the SDK's connection-retry logs while the server starts.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// PID is the process ID of the running dev server (for a benchmark that
// reads its CPU time); it changes on Restart.
func (d *DevServer) PID() int { return d.proc.cmd.Process.Pid }

// metricsURL is the dev server's Prometheus endpoint on port.
func metricsURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics" }
