// Package e2e holds gpugov's end-to-end tests and benchmarks: a real
// PostgreSQL database (store/storetest), a real Temporal dev server
// (internal/temporalx/temporaltest), and the serve command's components
// started in-process (package service), driven through the HTTP API with the
// real Alibaba trace (../shared/traces/alibaba-gpu-v2023 from the repository
// root, or $GPUGOV_TRACE_DIR).
//
// Outside CI a missing Temporal CLI or trace skips these tests; with CI=true
// they fail instead, so that CI cannot pass without running them.
package e2e
