// Package console is gpugov's web console (issue #15; docs/design.md §2 "Web
// console"), served by `gpugov serve` under /ui/. Pages are html/template
// pages with server-rendered SVG charts, embedded in the binary (go:embed);
// no JavaScript library is used, and every table renders without
// JavaScript. One small hand-written script (static/refresh.js) refreshes
// the lists by polling their fragment URLs, bounded (every
// RefreshInterval, at most MaxRefreshes times per page load, paused while
// the tab is hidden).
//
// Sign-in takes an API bearer token (the token file's or `gpugov token
// create`'s) on a form and makes a server-side session (console_sessions:
// the SHA-256 of the session ID and of the token, an expiry); the browser
// holds the session ID in an HttpOnly, SameSite=Strict cookie (Secure under
// TLS). Every form that changes something carries a CSRF token, an HMAC of
// the session ID, checked before anything is done. The pages read and act
// only through the API's own router in-process (api.Server.ServeAs) as the
// signed-in token, so role checks, tenancy and audit are the API's: a
// submitter sees its own project only, and another project's job is the
// API's 403, shown as a 403 page.
//
// URL scheme (stable: browser tests and bookmarks depend on it):
//
//	GET  /ui/                                   redirect to /ui/overview
//	GET  /ui/sign-in                            token form
//	POST /ui/sign-in                            token=…, csrf=… → session cookie, redirect to /ui/overview
//	POST /ui/sign-out                           csrf=… → session deleted, cookie cleared
//	GET  /ui/overview?window=24h                pools, queue/tier waits vs objective, starving/stuck jobs, reason shares, stage and readiness
//	GET  /ui/queue?window=1h&tier=&before=FROM,TO&after=FROM,TO
//	                                            wait histogram per tier (objective marked), waiting jobs, before/after overlay
//	GET  /ui/jobs?state=&queue=                 jobs list
//	GET  /ui/jobs/{id}                          a job's why record, timeline, priority parts, actions, Temporal link
//	POST /ui/jobs/{id}/hold|release|cancel      reason=…, csrf=…
//	POST /ui/jobs/{id}/amend                    gpus=…, gpu_memory_mib=…, reason=…, csrf=…
//	POST /ui/jobs/{id}/prerequisites/{name}     ready=true|false, message=…, csrf=…
//	GET  /ui/preemptions?state=&pool=           preemptions list
//	GET  /ui/preemptions/{id}                   the five steps on a timeline, checkpoints, resume check, run loss
//	GET  /ui/reclaims?state=&pool=              reclaims with keep/confirm forms
//	POST /ui/reclaims/{id}/keep|confirm         reason=…, csrf=…
//	GET  /ui/experiments, /ui/experiments/{id}  experiments: timeline, rollback checks, before/after charts, verdict
//	GET  /ui/policies?diff=FROM..TO             policy versions and a grouped diff
//	GET  /ui/fragment/{list}?…                  the list's HTML fragment for polling: waiting-jobs, jobs, preemptions, reclaims
//	GET  /ui/static/{file}                      console.css, refresh.js
//
// A GET page takes only the query parameters shown (a job page also done=,
// the reclaims page done= and its filters class, mode, state, pool, project);
// any other, or one given twice, is a 400 page naming it (api.CheckQueryParams,
// the API routes' own check; docs/design.md "Bounds of outside input").
//
// Stable data-testid attributes (for browser tests; the lists' sections
// also have id waiting-jobs, jobs, preemptions, reclaims):
//
//	sign-in:     sign-in-form, token-input, sign-in-button, sign-in-error
//	every page:  viewer (data-role, data-project), sign-out-form, sign-out-button, nav-<page>
//	overview:    pool-table, pool-row (data-pool), pool-stage, pool-readiness, gpus-used,
//	             gpus-fragmented, gpus-free, reason-share (an <svg>), main-problem,
//	             wait-table, wait-row (data-queue, data-tier), starving-table, stuck-table
//	queue:       tier-section (data-tier), wait-histogram and wait-overlay (<svg>s whose
//	             bars carry data-count), objective-marker, waiting-jobs, waiting-table
//	lists:       job-row (data-job, data-reason or data-state), job-link, jobs-table,
//	             preemption-row, reclaim-row (data-state), experiment-row, policy-row (data-hash)
//	job:         job-state (data-state, data-held), job-why, wait-reason, priority-parts,
//	             job-timeline, wait-events, hold-button, release-button, cancel-button,
//	             amend-form, amend-button, prerequisite-form (data-prerequisite),
//	             prerequisite-button, action-done, temporal-link
//	preemption:  preemption-timeline, preemption-steps, preemption-step (data-step, data-done),
//	             effective-loss, temporal-link
//	reclaims:    keep-button, confirm-button
//	experiment:  experiment-verdict, experiment-reason, experiment-timeline,
//	             experiment-checks, experiment-chart, experiment-event
//	policies:    policy-diff
//	charts:      no-data (with data-chart naming the chart) replaces a chart with nothing to draw
//	errors:      error-page (data-status), error-message, error-field
package console
