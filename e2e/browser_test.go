package e2e

import "testing"

// TestBrowserConsole drives the console in headless Chromium against a live stack.
func TestBrowserConsole(t *testing.T) {
	exe := chromiumPath(t)
	st := startConsoleStack(t)
	b := startBrowser(t, exe, "http://"+st.e.svc.APIAddr(), screenshotDir(t))
	_ = b
}
