package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/crashpoint"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/store/storetest"
)

// This file is the rig of the crash-at-every-step tests (crash_test.go): a
// real `gpugov serve` process, built once by the test, on its own database
// and its own dev server whose state is in a SQLite file (so the dev server
// can be restarted too), started with a crash point (internal/crashpoint)
// and SIGKILLed when the point's marker file appears.

// crashToken is the admin token of the rig's token file (project platform).
const crashToken = "crash-admin"

// crashVisionToken is the rig's submitter token of project vision, the
// project submitCrash submits to: what only the owning project may do (keep
// a reclaimed allocation) is done with it.
const crashVisionToken = "crash-vision"

// gpugovBuild is the gpugov binary the crash tests share: built once per
// test binary (gpugovBinary), removed by TestMain.
var gpugovBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// gpugovBinary builds cmd/gpugov once into a temporary directory and returns
// its path; a failed build fails the test.
func gpugovBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	gpugovBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpugov-crash-")
		if err != nil {
			gpugovBuild.err = err
			return
		}
		gpugovBuild.dir = dir
		bin := filepath.Join(dir, "gpugov")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/gpugov")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			gpugovBuild.err = fmt.Errorf("go build ./cmd/gpugov: %v\n%s", err, out)
			return
		}
		gpugovBuild.bin = bin
	})
	if gpugovBuild.err != nil {
		t.Fatal(gpugovBuild.err)
	}
	return gpugovBuild.bin
}

// TestMain runs the package's tests and removes the shared gpugov build.
func TestMain(m *testing.M) {
	code := m.Run()
	if gpugovBuild.dir != "" {
		_ = os.RemoveAll(gpugovBuild.dir)
	}
	os.Exit(code)
}

// crashRig is one serve process at a time on one database and dev server.
type crashRig struct {
	t         *testing.T
	bin       string
	dir       string // the rig's files: policy, inventory, tokens, markers
	inventory string // the inventory file
	dev       *temporaltest.DevServer
	dbURL     string        // the database, for the test's checks
	serveDB   string        // what serve connects to (the database or a proxy)
	db        *pgxpool.Pool // the test's direct connection
	apiAddr   string
	client    *apiclient.Client // with crashToken (admin)
	vision    *apiclient.Client // with crashVisionToken (project vision's submitter)
	simSpd    float64
	logs      *logBuffer // every serve process's output, one after the other

	proc    *serveProcess   // the serve on apiAddr (start, kill, stop)
	running []*serveProcess // every serve process not yet stopped or killed, proc included
	starts  int
}

// serveProcess is one `gpugov serve` process of a rig.
type serveProcess struct {
	name    string // "serve 3", "replica b", for the log
	apiAddr string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// crashRigOptions configure newCrashRig.
type crashRigOptions struct {
	policy    string // policy file text (gpugov.policy/v1)
	inventory string // inventory file text: static YAML, or an Alibaba node-list CSV when inventoryCSV
	// inventoryCSV says inventory is an Alibaba node-list CSV.
	inventoryCSV bool
	simSpeed     float64 // serve --sim-speed
	// viaProxy, when set, maps the database's host:port to the one serve
	// connects to (a tcpProxy in front of PostgreSQL).
	viaProxy func(host string) string
}

// newCrashRig writes the rig's files, creates its database and starts its
// persistent dev server; no serve process runs yet.
func newCrashRig(t *testing.T, bin string, o crashRigOptions) *crashRig {
	t.Helper()
	dir := t.TempDir()
	r := &crashRig{t: t, bin: bin, dir: dir, simSpd: o.simSpeed, logs: &logBuffer{}}
	r.inventory = filepath.Join(dir, "inventory.yaml")
	if o.inventoryCSV {
		r.inventory = filepath.Join(dir, "inventory.csv")
	}
	for name, text := range map[string]string{
		"policy.yaml":              o.policy,
		filepath.Base(r.inventory): o.inventory,
		"tokens.yaml": crashToken + ": {name: crash-admin, project: platform, role: admin}\n" +
			crashVisionToken + ": {name: crash@vision, project: vision, role: submitter}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "markers"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.dev = temporaltest.StartPersistent(t, filepath.Join(dir, "temporal.db"))
	r.dbURL = storetest.NewDatabase(t)
	r.serveDB = r.dbURL
	if o.viaProxy != nil {
		r.serveDB = o.viaProxy(r.dbURL)
	}
	var err error
	if r.db, err = pgxpool.New(context.Background(), r.dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.db.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.apiAddr = l.Addr().String()
	_ = l.Close()
	if r.client, err = apiclient.New("http://"+r.apiAddr, crashToken); err != nil {
		t.Fatal(err)
	}
	if r.vision, err = apiclient.New("http://"+r.apiAddr, crashVisionToken); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("serve output (all processes):\n%s", r.logs.tail(12000))
		}
	})
	return r
}

// env is the rig as an *env for the e2e helpers that take one.
func (r *crashRig) env() *env { return &env{dbURL: r.dbURL, db: r.db, client: r.client, logs: r.logs} }

// start starts serve with crash point point ("" for none), limited to the
// workflows whose ID starts with workflow, and waits until /readyz answers
// 200.
func (r *crashRig) start(point, workflow string) {
	r.t.Helper()
	if r.proc != nil {
		r.t.Fatal("crash rig: serve already running")
	}
	r.starts++
	p := r.spawn(fmt.Sprintf("serve start %d", r.starts), r.apiAddr, point, workflow)
	r.proc = p
	r.waitReady(p)
}

// spawn starts a serve process on apiAddr with crash point point ("" for
// none, limited to the workflows whose ID starts with workflow) without
// waiting for it to be ready: several replicas on the rig's database and
// dev server start so at once (waitReady then waits for each).
func (r *crashRig) spawn(name, apiAddr, point, workflow string) *serveProcess {
	r.t.Helper()
	fmt.Fprintf(r.logs, "=== %s on %s, crash point %q (workflow %q)\n", name, apiAddr, point, workflow)
	cmd := exec.Command(r.bin, "serve", "--database-url", r.serveDB, "--temporal-address", r.dev.HostPort,
		"--api-addr", apiAddr, "--tokens-file", filepath.Join(r.dir, "tokens.yaml"),
		"--inventory-file", r.inventory, "--policy", filepath.Join(r.dir, "policy.yaml"),
		"--cycle-interval", "1s", "--reconcile-interval", "2s", "--sim-speed", strconv.FormatFloat(r.simSpd, 'g', -1, 64),
		"--log-level", "info")
	cmd.Env = append(os.Environ(), crashpoint.EnvPoint+"="+point, crashpoint.EnvDir+"="+r.markers(),
		crashpoint.EnvWorkflow+"="+workflow)
	// The output also goes to serve.log in the rig's directory, to follow a
	// long run while it goes.
	f, err := os.OpenFile(filepath.Join(r.dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout = io.MultiWriter(r.logs, f)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		r.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close() // only now: a closed writer would break serve's stdout pipe
		close(exited)
	}()
	p := &serveProcess{name: name, apiAddr: apiAddr, cmd: cmd, exited: exited}
	r.running = append(r.running, p)
	return p
}

// waitReady waits until p's /readyz answers 200, failing the test when p
// exits first or is not ready within 90 s.
func (r *crashRig) waitReady(p *serveProcess) {
	r.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + p.apiAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.exited:
			r.t.Fatalf("%s exited before it was ready:\n%s", p.name, r.logs.tail(4000))
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s not ready within 90 s:\n%s", p.name, r.logs.tail(4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kill SIGKILLs the serve process and waits for it to be gone.
func (r *crashRig) kill() {
	r.t.Helper()
	if r.proc == nil {
		return
	}
	r.killProcess(r.proc)
	r.proc = nil
}

// killProcess SIGKILLs p and waits for it to be gone.
func (r *crashRig) killProcess(p *serveProcess) {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	fmt.Fprintf(r.logs, "=== %s killed (SIGKILL)\n", p.name)
	r.forget(p)
}

// stop ends every serve process of the rig gracefully (SIGTERM), or kills
// it after 15 s.
func (r *crashRig) stop() {
	for len(r.running) > 0 {
		p := r.running[0]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
		r.forget(p)
	}
	r.proc = nil
}

// forget drops p from the running processes.
func (r *crashRig) forget(p *serveProcess) {
	for i, q := range r.running {
		if q == p {
			r.running = append(r.running[:i], r.running[i+1:]...)
			return
		}
	}
}

// markers is the crash points' marker directory.
func (r *crashRig) markers() string { return filepath.Join(r.dir, "markers") }

// crashAt starts serve with the crash point activity:when (limited to
// workflow IDs starting with workflow), runs trigger (nil for none) once
// it is ready, waits up to timeout for the point's marker, runs atPoint
// (nil for none) while the activity is held there, and SIGKILLs the
// process. A marker left by an earlier use of the same point is removed
// first, so the point fires again. It returns how long the point took to
// be reached.
func (r *crashRig) crashAt(activity string, when crashpoint.When, workflow string, timeout time.Duration, trigger, atPoint func()) time.Duration {
	r.t.Helper()
	begin := time.Now()
	marker := crashpoint.MarkerPath(r.markers(), activity, when)
	if err := os.Remove(marker); err != nil && !os.IsNotExist(err) {
		r.t.Fatal(err)
	}
	r.start(activity+":"+string(when), workflow)
	if trigger != nil {
		trigger()
	}
	waitFor(r.t, timeout, "crash point "+activity+":"+string(when)+" reached", func() (bool, string) {
		_, err := os.Stat(marker)
		return err == nil, "no marker " + marker
	})
	took := time.Since(begin)
	if atPoint != nil {
		atPoint()
	}
	r.kill()
	return took
}

// queryInt runs a SQL query returning one integer on the rig's database.
func (r *crashRig) queryInt(sql string, args ...any) int {
	r.t.Helper()
	return r.env().queryInt(r.t, sql, args...)
}

// crashRow is one line of the crash-at-every-step table.
type crashRow struct {
	Workflow, Step, Checked, Result string
	Took                            time.Duration
}
