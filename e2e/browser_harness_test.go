package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The browser tests' timeouts: one page load or action, and the whole
// browser (its start included).
const (
	browserActionTimeout = 30 * time.Second
	browserWindowWidth   = 1400
	browserWindowHeight  = 1000
)

// chromiumPath returns the Chromium the browser tests drive: $GPUGOV_CHROMIUM,
// else chromium (Debian's package, deploy/dev/ensure-chromium.sh) or
// chromium-browser on PATH. When none is there the test is skipped, unless
// GPUGOV_REQUIRE_BROWSER=1 (set by `make test`) or CI=true, where it fails:
// make test installs Chromium first, so a missing one is a broken setup.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUGOV_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("GPUGOV_CHROMIUM=%q: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("GPUGOV_REQUIRE_BROWSER") == "1" || inCI() {
		t.Fatal("chromium not found on PATH and GPUGOV_REQUIRE_BROWSER=1 or CI=true: " +
			"`make test` installs it (deploy/dev/ensure-chromium.sh); or set GPUGOV_CHROMIUM")
	}
	t.Skip("chromium not found on PATH (run deploy/dev/ensure-chromium.sh, or set GPUGOV_CHROMIUM)")
	return ""
}

// screenshotDir is where the browser tests save their PNG screenshots:
// $GPUGOV_SCREENSHOTS (created if missing), else a directory of the test's
// own. The path is logged so that a run's screenshots can be collected.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUGOV_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s (set GPUGOV_SCREENSHOTS to keep them)", abs)
	return abs
}

// browser is one headless Chromium process, stopped when the test ends.
type browser struct {
	root  context.Context // the first tab's context, which started Chromium
	base  *url.URL        // the service's base URL (http://host:port)
	shots string          // the screenshot directory
}

// startBrowser starts headless Chromium for the service at base. It runs
// with --no-sandbox, because the tests may run as root (Chromium refuses
// its sandbox then), and with a profile of its own in a temporary directory.
func startBrowser(t *testing.T, exe, base, shots string) *browser {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(browserWindowWidth, browserWindowHeight),
		chromedp.Flag("lang", "en-US"),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	// The first context of an allocator starts the browser; the tabs are
	// opened from it, each in a new browser context.
	root, cancelRoot := chromedp.NewContext(alloc)
	t.Cleanup(cancelRoot)
	// The first action on a context allocates what it runs on (here the
	// browser) for that context's lifetime, so it runs on root itself, not on
	// a context with a timeout.
	if err := chromedp.Do(root, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium (%s): %v", exe, err)
	}
	return &browser{root: root, base: u, shots: shots}
}

// tab is one tab in a browser context of its own (its own cookies: one
// signed-in principal), closed when the test ends. It records the page's
// uncaught JavaScript exceptions.
type tab struct {
	t    *testing.T
	b    *browser
	ctx  context.Context
	name string // who is signed in, for messages and screenshot names

	mu         sync.Mutex
	exceptions []string
}

// newTab opens a tab in a new browser context and starts recording its JavaScript exceptions (chromedp enables
// the Runtime domain on every tab it attaches to).
func (b *browser) newTab(t *testing.T, name string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.root, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{t: t, b: b, ctx: ctx, name: name}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // on ctx itself: see startBrowser
		t.Fatalf("open a tab: %v", err)
	}
	thrown := chromedp.Events(ctx, runtime.ExceptionThrown) // subscribed from here on
	go func() {
		for ev, err := range thrown {
			if err != nil {
				return
			}
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil && ev.ExceptionDetails.Exception.Description != "" {
				msg = ev.ExceptionDetails.Exception.Description
			}
			tb.mu.Lock()
			tb.exceptions = append(tb.exceptions, fmt.Sprintf("%s:%d: %s", ev.ExceptionDetails.URL, ev.ExceptionDetails.LineNumber, msg))
			tb.mu.Unlock()
		}
	}()
	return tb
}

// url resolves a path (with its query) against the service's base URL.
func (tb *tab) url(path string) string {
	ref, err := url.Parse(path)
	if err != nil {
		tb.t.Fatalf("bad path %q: %v", path, err)
	}
	return tb.b.base.ResolveReference(ref).String()
}

// run runs steps within browserActionTimeout, failing the test with what.
func (tb *tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserActionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.t.Fatalf("%s (%s): %v", what, tb.name, err)
	}
}

// open loads path and returns the HTTP status of the document.
func (tb *tab) open(path string) int64 {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserActionTimeout)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(tb.url(path)))
	if err != nil {
		tb.t.Fatalf("open %s (%s): %v", path, tb.name, err)
	}
	return statusOf(resp)
}

// openOK loads path and fails the test unless it answers 200.
func (tb *tab) openOK(path string) {
	tb.t.Helper()
	if status := tb.open(path); status != 200 {
		tb.t.Fatalf("open %s (%s): status %d, want 200; page: %s", path, tb.name, status, tb.bodyText(600))
	}
}

// clickNavigate clicks the first element matching css, waits for the page it
// leads to (a link or a form's submission) and returns that page's status.
func (tb *tab) clickNavigate(css string) int64 {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserActionTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(css), chromedp.NodeVisible))
	if err != nil {
		tb.t.Fatalf("click %s (%s) on %s: %v", css, tb.name, tb.location(), err)
	}
	return statusOf(resp)
}

// statusOf is a document response's status (0 without one).
func statusOf(resp *network.Response) int64 {
	if resp == nil {
		return 0
	}
	return resp.Status
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func evalIn[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserActionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluate %s (%s): %v", expr, tb.name, err)
	}
	return v
}

// evalAwait evaluates a JavaScript expression that gives a promise and
// decodes the value it resolves to.
func evalAwait[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserActionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate %s (%s): %v", expr, tb.name, err)
	}
	return v
}

// waitUntil evaluates the boolean JavaScript expression cond every 250 ms
// until it is true, and fails the test with what after timeout.
func (tb *tab) waitUntil(timeout time.Duration, what, cond string) {
	tb.t.Helper()
	deadline := time.Now().Add(timeout)
	for !evalIn[bool](tb, cond) {
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s (%s, %s): not within %s", what, tb.name, tb.location(), timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// count is how many elements match css on the page.
func (tb *tab) count(css string) int {
	tb.t.Helper()
	return evalIn[int](tb, fmt.Sprintf("document.querySelectorAll(%q).length", css))
}

// text is the visible text of the first element matching css ("" when none).
func (tb *tab) text(css string) string {
	tb.t.Helper()
	return evalIn[string](tb, fmt.Sprintf("(document.querySelector(%q) || {innerText: ''}).innerText", css))
}

// attr is an attribute of the first element matching css ("" when none).
func (tb *tab) attr(css, name string) string {
	tb.t.Helper()
	return evalIn[string](tb, fmt.Sprintf("((document.querySelector(%q) || {getAttribute: () => ''}).getAttribute(%q) || '')", css, name))
}

// bodyText is the page's text, cut to n characters, for failure messages.
func (tb *tab) bodyText(n int) string {
	tb.t.Helper()
	s := strings.Join(strings.Fields(tb.text("body")), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// location is the tab's current URL.
func (tb *tab) location() string {
	ctx, cancel := context.WithTimeout(tb.ctx, browserActionTimeout)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "(location unknown: " + err.Error() + ")"
	}
	return loc
}

// screenshot saves a full-page PNG as <dir>/<name>.png and logs its path.
func (tb *tab) screenshot(name string) string {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserActionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot %s (%s): %v", name, tb.name, err)
	}
	path := filepath.Join(tb.b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("screenshot %s (%d KiB, %s)", path, len(png)/1024, tb.location())
	return path
}

// checkNoExceptions fails the test when a page threw an uncaught exception.
func (tb *tab) checkNoExceptions() {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, e := range tb.exceptions {
		tb.t.Errorf("JavaScript exception (%s): %s", tb.name, e)
	}
}
