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
// Stable element IDs and data-testid attributes (for browser tests):
// wait-histogram, wait-overlay, reason-share, pool-table, wait-table,
// starving-table, stuck-table, waiting-jobs, job-row, job-why,
// job-timeline, priority-parts, hold-button, release-button,
// cancel-button, amend-form, prerequisite-form, temporal-link,
// preemption-row, preemption-timeline, reclaim-row, keep-button,
// confirm-button, experiment-row, experiment-checks, experiment-chart,
// policy-row, policy-diff, no-data (every chart's "no data in this
// window" message), error-page, sign-in-form, sign-out-button.
package console
