#!/usr/bin/env bash
# Builds the pinned Temporal CLI (dev server) into bin/ when it is missing.
# The first build takes about 7 minutes on 2 cores; later builds reuse Go's cache.
set -euo pipefail
source "$(dirname "$0")/env.sh"
# `go install` leaves the CLI's own version string at 0.0.0-DEV (releases set it
# by linker flag), so the module version recorded in the binary is checked.
if [ -x "$TEMPORAL_BIN" ] && go version -m "$TEMPORAL_BIN" 2>/dev/null |
    grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/temporalio/cli[[:space:]]+$TEMPORAL_VERSION[[:space:]]"; then
  exit 0
fi
log "building Temporal CLI $TEMPORAL_VERSION into $(dirname "$TEMPORAL_BIN") (first time: ~7 min on 2 cores)"
mkdir -p "$(dirname "$TEMPORAL_BIN")"
GOBIN="$(dirname "$TEMPORAL_BIN")" go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_VERSION"
"$TEMPORAL_BIN" --version >&2
