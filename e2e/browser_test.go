package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
)

// browserResumeWait bounds how long the admin's preemption page waits for
// the stack's preemption to end (its resume verified) before it is read.
const browserResumeWait = 30 * time.Second

// browserLiveRefreshWait bounds the wait for a list to show a change
// without a reload: two of refresh.js's polls (console.RefreshInterval, 10 s)
// and some slack.
const browserLiveRefreshWait = 25 * time.Second

// TestBrowserConsole drives the web console (api/console, under /ui/) in
// headless Chromium against a live stack: make run's contended replay,
// shortened (browser_stack_test.go), running in the background while the
// pages are read, so that they show jobs waiting for capacity and a
// preemption from the service's own records. It signs in as an admin and as
// a submitter, opens every page, checks that the charts drew data (bars,
// segments, lanes; not the "no data" message), follows a waiting job's link
// from the queue page to its why page, holds and releases the submitter's
// job from its page (and sees both applied through the API), checks that a
// submitter gets the 403 page for another project's job, and saves
// full-page PNG screenshots (screenshotDir). It fails on any uncaught
// JavaScript exception of a page.
func TestBrowserConsole(t *testing.T) {
	temporaltest.SkipShort(t) // before the Chromium check: -short skips it wherever it runs
	exe := chromiumPath(t)
	started := time.Now()
	st := startConsoleStack(t)
	b := startBrowser(t, exe, "http://"+st.e.svc.APIAddr(), screenshotDir(t))

	t.Run("SignIn", func(t *testing.T) {
		tb := b.newTab(t, "anonymous")
		defer tb.checkNoExceptions()
		// A page without a session leads to the sign-in form.
		tb.openOK("/ui/overview")
		if !strings.Contains(tb.location(), "/ui/sign-in") || tb.count(`[data-testid="sign-in-form"]`) != 1 {
			t.Fatalf("without a session /ui/overview shows %s: %s", tb.location(), tb.bodyText(300))
		}
		tb.screenshot("sign-in")
		// A wrong token is refused on the form, with no session.
		tb.typeToken("not-a-token")
		tb.clickNavigate(`[data-testid="sign-in-button"]`)
		if tb.count(`[data-testid="sign-in-error"]`) != 1 || tb.count(`[data-testid="viewer"]`) != 0 {
			t.Fatalf("a wrong token: want the sign-in error and no viewer, got %s: %s", tb.location(), tb.bodyText(300))
		}
	})

	t.Run("Admin", func(t *testing.T) {
		tb := b.newTab(t, "admin")
		defer tb.checkNoExceptions()
		tb.signIn(adminToken, "admin", "platform")

		// Overview: the pool's GPUs, the waits per queue, the reason shares.
		tb.openOK("/ui/overview?window=1h")
		if n := tb.count(`[data-testid="pool-row"][data-pool="alibaba"]`); n != 1 {
			t.Errorf("overview: %d rows for pool alibaba, want 1", n)
		}
		if stage := tb.text(`[data-testid="pool-row"][data-pool="alibaba"] [data-testid="pool-stage"]`); !strings.Contains(stage, "trial") {
			t.Errorf("overview: pool alibaba's stage %q, want trial (replay-policy.yaml)", stage)
		}
		if n := tb.count(`[data-testid="wait-row"]`); n == 0 {
			t.Errorf("overview: no queue rows in the wait table: %s", tb.bodyText(400))
		}
		tb.checkChart("reason-share", `rect[data-segment]`)
		tb.screenshot("overview")

		// Queue: the wait histogram per tier with the objective, the waiting
		// jobs; then a waiting job's why page.
		tb.openOK("/ui/queue?window=1h")
		tb.checkChart("wait-histogram", `rect[data-count]:not([data-count="0"])`)
		if n := tb.count(`[data-testid="objective-marker"]`); n == 0 {
			t.Errorf("queue: no objective marked on the wait histograms")
		}
		if n := tb.count(`[data-testid="waiting-jobs"] [data-testid="job-row"]`); n == 0 {
			t.Errorf("queue: no waiting job listed: %s", tb.bodyText(400))
		}
		tb.screenshot("queue")
		tb.screenshotAt("/ui/queue?window=1h&tier=experiment", "queue-experiment")

		id := tb.followWaitingJob()
		job, err := st.e.client.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		tb.checkWhy(job.ID, job.State == "waiting")
		tb.checkChart("job-timeline", "rect, circle")
		tb.screenshot("waiting-job")

		// Jobs list.
		tb.openOK("/ui/jobs")
		if n := tb.count(`[data-testid="job-row"]`); n == 0 {
			t.Errorf("jobs: no job listed")
		}
		tb.screenshot("jobs")

		// Preemptions: the list, then one preemption's steps.
		tb.openOK("/ui/preemptions")
		if n := tb.count(`[data-testid="preemption-row"]`); n == 0 {
			t.Errorf("preemptions: none listed, want at least %s", st.preemption.ID)
		}
		tb.screenshot("preemptions")
		pid := st.preemption.ID
		// A preemption that went through all five steps shows them all; take
		// one when the replay has completed one by now.
		if done, err := st.e.client.Preemptions(context.Background(), apiclient.PreemptionOptions{Kind: "preemption",
			Outcome: "completed", Limit: 1}); err == nil && len(done.Preemptions) > 0 {
			pid = done.Preemptions[0].ID
		}
		// Else give the stack's a little time to verify its resume, so that
		// the screenshot shows the five steps and the run loss if it can; the
		// checks below hold either way.
		waitUntil := time.Now().Add(browserResumeWait)
		for pid == st.preemption.ID && time.Now().Before(waitUntil) {
			if p, err := st.e.client.Preemption(context.Background(), pid); err != nil || p.Outcome != "" {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		tb.openOK("/ui/preemptions/" + url.PathEscape(pid))
		p, err := st.e.client.Preemption(context.Background(), pid)
		if err != nil {
			t.Fatal(err)
		}
		loss := "not yet"
		if p.EffectiveLossGPUSeconds != nil {
			loss = fmt.Sprintf("%.1f GPU-s", *p.EffectiveLossGPUSeconds)
		}
		t.Logf("preemption %s: state %s, outcome %q, effective run loss %s", p.ID, p.State, p.Outcome, loss)
		if n := tb.count(`[data-testid="preemption-step"]`); n != 5 {
			t.Errorf("preemption %s: %d steps shown, want the five", p.ID, n)
		}
		// The page was read before the API, and steps only get done: the
		// API has at least the page's steps, and the release at least.
		doneOnPage := tb.count(`[data-testid="preemption-step"][data-done="true"]`)
		doneInAPI := 0
		for _, at := range []*time.Time{p.NotifiedAt, p.SavedAt, p.ReleasedAt, p.RescheduledAt, p.ResumedAt} {
			if at != nil {
				doneInAPI++
			}
		}
		if doneOnPage < 3 || doneOnPage > doneInAPI {
			t.Errorf("preemption %s: %d steps done on the page, %d in the API record (state %s, outcome %q); want at least notify, checkpoint and release",
				p.ID, doneOnPage, doneInAPI, p.State, p.Outcome)
		}
		tb.checkChart("preemption-timeline", "rect, circle")
		if href := tb.attr(`a[data-testid="temporal-link"]`, "href"); !strings.HasPrefix(href, browserTemporalUI+"/namespaces/") ||
			!strings.Contains(href, url.PathEscape(p.WorkflowID)) {
			t.Errorf("preemption %s: Temporal UI link %q, want %s/namespaces/…/workflows/%s", p.ID, href, browserTemporalUI, p.WorkflowID)
		}
		tb.screenshot("preemption")

		// The victim's why page lists its preemption.
		tb.openOK("/ui/jobs/" + url.PathEscape(p.VictimJobID))
		if n := tb.count(`[data-testid="preemption-row"] a[href$="` + p.ID + `"]`); n != 1 {
			t.Errorf("victim %s: its page links preemption %s %d times, want once", p.VictimJobID, p.ID, n)
		}
		tb.screenshot("preempted-job")

		// Reclaims (off in replay-policy.yaml: the page says none was
		// recorded), experiments (none run), policies (the replay's).
		tb.openOK("/ui/reclaims")
		if tb.count(`[data-testid="reclaim-row"]`)+tb.count(`[data-testid="no-reclaims"]`) == 0 {
			t.Errorf("reclaims: neither rows nor the empty list's message: %s", tb.bodyText(300))
		}
		tb.screenshot("reclaims")
		tb.openOK("/ui/experiments")
		if tb.count(`[data-testid="experiment-row"]`)+tb.count(`[data-testid="no-experiments"]`) == 0 {
			t.Errorf("experiments: neither rows nor the empty list's message: %s", tb.bodyText(300))
		}
		tb.screenshot("experiments")
		tb.openOK("/ui/policies")
		if n := tb.count(`[data-testid="policy-row"]`); n == 0 {
			t.Errorf("policies: no policy version listed (the service runs replay-policy.yaml)")
		}
		tb.screenshot("policies")
	})

	t.Run("Submitter", func(t *testing.T) {
		tb := b.newTab(t, "submitter")
		defer tb.checkNoExceptions()
		tb.signIn(browserSubmitterToken, "submitter", browserProject)
		if tb.count(`[data-testid="nav-policies"]`) != 0 {
			t.Errorf("a submitter is offered the policies page")
		}

		tb.openOK("/ui/overview?window=1h")
		tb.screenshot("submitter-overview")

		// The queue lists the submitter's own jobs only; its blocked job's
		// link leads to its why page.
		tb.openOK("/ui/queue?window=1h")
		projects := evalIn[[]string](tb, `Array.from(document.querySelectorAll('[data-testid="waiting-jobs"] [data-testid="job-row"] td:nth-child(2)')).map(td => td.innerText.trim())`)
		for _, p := range projects {
			if p != browserProject {
				t.Errorf("a submitter of %s sees a waiting job of %s", browserProject, p)
			}
		}
		link := fmt.Sprintf(`[data-testid="waiting-jobs"] [data-testid="job-row"][data-job=%q] a[data-testid="job-link"]`, st.blocked.ID)
		if tb.count(link) != 1 {
			t.Fatalf("queue: the submitter's waiting job %s is not listed: %s", st.blocked.ID, tb.bodyText(600))
		}
		tb.screenshot("submitter-queue")

		// The list refreshes without a reload: a hold made through the API
		// shows in the row within two polls (refresh.js), and the page's
		// JavaScript state survives (no navigation).
		evalIn[bool](tb, `(window.__gpugovNoReload = true)`)
		if _, err := st.submitter.Hold(context.Background(), st.blocked.ID, "live refresh check"); err != nil {
			t.Fatal(err)
		}
		row := fmt.Sprintf(`[data-testid="waiting-jobs"] [data-testid="job-row"][data-job=%q]`, st.blocked.ID)
		tb.waitUntil(browserLiveRefreshWait, "the hold to show in the waiting list without a reload", fmt.Sprintf(
			`(() => { const r = document.querySelector(%q); return !!r && r.lastElementChild.innerText.includes('held'); })()`, row))
		if !evalIn[bool](tb, `window.__gpugovNoReload === true`) {
			t.Errorf("queue: the page reloaded to show the hold, want the list refreshed in place")
		}
		if _, err := st.submitter.Release(context.Background(), st.blocked.ID, "live refresh check"); err != nil {
			t.Fatal(err)
		}
		// The next cycle gives the job its own reason back.
		waitFor(t, 30*time.Second, "the released job waiting on its prerequisite again", func() (bool, string) {
			j, err := st.submitter.GetJob(context.Background(), st.blocked.ID)
			if err != nil {
				return false, err.Error()
			}
			if j.Wait == nil {
				return false, "no wait event"
			}
			return j.Wait.Reason == "environment_not_ready", "reason " + j.Wait.Reason
		})
		if status := tb.clickNavigate(link); status != 200 {
			t.Fatalf("following %s: status %d", link, status)
		}
		tb.checkWhy(st.blocked.ID, true)
		if reason := tb.text(`[data-testid="wait-reason"]`); !strings.Contains(reason, "environment_not_ready") {
			t.Errorf("job %s: wait reason %q, want environment_not_ready (its prerequisite is not ready)", st.blocked.ID, reason)
		}
		if tb.count(`[data-testid="prerequisite-form"][data-prerequisite="dataset-snapshot"]`) != 1 {
			t.Errorf("job %s: no form to mark its prerequisite ready", st.blocked.ID)
		}
		tb.screenshot("submitter-waiting-job")

		// A POST without the page's CSRF token is refused and changes
		// nothing, though it carries the session cookie.
		status := evalAwait[int](tb, fmt.Sprintf(`fetch('/ui/jobs/%s/hold', {method: 'POST', credentials: 'same-origin',
			body: new URLSearchParams({reason: 'forged', csrf: 'not-the-token'})}).then(r => r.status)`, url.PathEscape(st.blocked.ID)))
		if status != 403 {
			t.Errorf("a hold posted with a wrong CSRF token: status %d, want 403", status)
		}
		tb.checkHeldThroughAPI(st.submitter, st.blocked.ID, false)

		// Hold, then release, from the page; each is applied (the page and
		// the API say so).
		tb.act("hold-button", st.blocked.ID, "true")
		tb.checkHeldThroughAPI(st.submitter, st.blocked.ID, true)
		tb.screenshot("submitter-held-job")
		tb.act("release-button", st.blocked.ID, "false")
		tb.checkHeldThroughAPI(st.submitter, st.blocked.ID, false)

		// Another project's job is the 403 page.
		if status := tb.open("/ui/jobs/" + url.PathEscape(st.foreign.ID)); status != 403 {
			t.Errorf("a submitter of %s opening job %s of %s: status %d, want 403", browserProject, st.foreign.ID, st.foreign.Project, status)
		}
		if got := tb.attr(`[data-testid="error-page"]`, "data-status"); got != "403" {
			t.Errorf("job %s of %s: error page status %q, want 403: %s", st.foreign.ID, st.foreign.Project, got, tb.bodyText(300))
		}
		tb.screenshot("submitter-forbidden")

		// Signing out ends the session: the pages lead to the sign-in form again.
		tb.clickNavigate(`[data-testid="sign-out-button"]`)
		tb.openOK("/ui/overview")
		if tb.count(`[data-testid="sign-in-form"]`) != 1 || tb.count(`[data-testid="viewer"]`) != 0 {
			t.Errorf("after signing out /ui/overview shows %s: %s", tb.location(), tb.bodyText(300))
		}
	})
	t.Logf("browser test: %s in all", time.Since(started).Round(time.Second))
}

// typeToken types token into the sign-in form's token field.
func (tb *tab) typeToken(token string) {
	tb.t.Helper()
	tb.run("type the token", chromedp.SetValue(chromedp.CSS(`[data-testid="token-input"]`), token))
}

// signIn signs in on the form with token and checks the viewer shown: role
// and project.
func (tb *tab) signIn(token, role, project string) {
	tb.t.Helper()
	tb.openOK("/ui/sign-in")
	tb.typeToken(token)
	if status := tb.clickNavigate(`[data-testid="sign-in-button"]`); status != 200 {
		tb.t.Fatalf("sign in as %s: status %d on %s: %s", tb.name, status, tb.location(), tb.bodyText(300))
	}
	if !strings.Contains(tb.location(), "/ui/overview") {
		tb.t.Errorf("after signing in as %s: at %s, want the overview", tb.name, tb.location())
	}
	gotRole, gotProject := tb.attr(`[data-testid="viewer"]`, "data-role"), tb.attr(`[data-testid="viewer"]`, "data-project")
	if gotRole != role || gotProject != project {
		tb.t.Fatalf("signed in as %s: viewer role %q project %q, want %q %q", tb.name, gotRole, gotProject, role, project)
	}
}

// checkChart fails the test unless the page has the chart testid as an SVG
// with at least one mark (marks: a CSS selector within it), and no "no data"
// message in its place.
func (tb *tab) checkChart(testid, marks string) {
	tb.t.Helper()
	svg := fmt.Sprintf(`svg[data-testid=%q]`, testid)
	if n := tb.count(svg); n == 0 {
		tb.t.Errorf("%s: no %s chart (%s): %s", tb.location(), testid, tb.text(fmt.Sprintf(`[data-chart=%q]`, testid)), tb.bodyText(300))
		return
	}
	if n := tb.count(svg + " " + marks); n == 0 {
		tb.t.Errorf("%s: the %s chart has no %s", tb.location(), testid, marks)
	}
}

// screenshotAt opens path and saves its screenshot.
func (tb *tab) screenshotAt(path, name string) {
	tb.t.Helper()
	tb.openOK(path)
	tb.screenshot(name)
}

// followWaitingJob clicks, on the queue page, the link of the first waiting
// job that waits for capacity (a replayed pod's), else of the first with a
// reason (the replay's queue may have drained by now), and returns its ID
// once its page is open.
func (tb *tab) followWaitingJob() string {
	tb.t.Helper()
	id := evalIn[string](tb, `(() => {
		const capacity = ['capacity_busy', 'fragmented', 'reserved_for_higher_priority', 'preemption_in_progress'];
		const rows = Array.from(document.querySelectorAll('[data-testid="waiting-jobs"] [data-testid="job-row"]'));
		const row = rows.find(r => capacity.includes(r.dataset.reason)) || rows.find(r => r.dataset.reason);
		return row ? row.dataset.job : '';
	})()`)
	if id == "" {
		tb.t.Fatalf("queue: no waiting job with a reason: %s", tb.bodyText(600))
	}
	link := fmt.Sprintf(`[data-testid="waiting-jobs"] [data-testid="job-row"][data-job=%q] a[data-testid="job-link"]`, id)
	if status := tb.clickNavigate(link); status != 200 {
		tb.t.Fatalf("following waiting job %s's link: status %d", id, status)
	}
	if loc := tb.location(); !strings.HasSuffix(loc, "/ui/jobs/"+url.PathEscape(id)) {
		tb.t.Fatalf("following waiting job %s's link: at %s", id, loc)
	}
	return id
}

// checkWhy checks the open job page: the job's why record and its timeline
// of wait events; a wait reason when it still waits.
func (tb *tab) checkWhy(id string, waiting bool) {
	tb.t.Helper()
	if tb.count(`[data-testid="job-why"]`) != 1 {
		tb.t.Errorf("job %s: no why record: %s", id, tb.bodyText(400))
	}
	if tb.count(`[data-testid="wait-events"] tr`) < 2 {
		tb.t.Errorf("job %s: no wait event listed", id)
	}
	if waiting && strings.TrimSpace(tb.text(`[data-testid="wait-reason"]`)) == "" {
		tb.t.Errorf("job %s waits, but its page shows no wait reason", id)
	}
}

// act clicks one of the job page's action buttons and checks the page it
// returns: the action done and the job's held flag as wantHeld.
func (tb *tab) act(button, id, wantHeld string) {
	tb.t.Helper()
	if status := tb.clickNavigate(fmt.Sprintf(`[data-testid=%q]`, button)); status != 200 {
		tb.t.Fatalf("job %s: %s: status %d: %s", id, button, status, tb.bodyText(300))
	}
	if tb.count(`[data-testid="action-done"]`) != 1 {
		tb.t.Errorf("job %s: %s: no confirmation on the page: %s", id, button, tb.bodyText(300))
	}
	if got := tb.attr(`[data-testid="job-state"]`, "data-held"); got != wantHeld {
		tb.t.Errorf("job %s after %s: the page shows held=%q, want %q", id, button, got, wantHeld)
	}
}

// checkHeldThroughAPI checks the job's held flag as the API reports it.
func (tb *tab) checkHeldThroughAPI(c *apiclient.Client, id string, want bool) {
	tb.t.Helper()
	j, err := c.GetJob(context.Background(), id)
	if err != nil {
		tb.t.Fatal(err)
	}
	if j.Held != want {
		tb.t.Errorf("job %s: the API says held=%v after the console's action, want %v", id, j.Held, want)
	}
}
