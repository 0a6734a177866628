#!/usr/bin/env bash
# Builds the pinned Temporal CLI (dev server) into bin/ when it is missing.
# The first build takes about 7 minutes on 2 cores; later builds reuse Go's cache.
set -euo pipefail
source "$(dirname "$0")/env.sh"
# `go install` leaves the CLI's own version string at 0.0.0-DEV (releases set it
# by linker flag), so the module version recorded in the binary is checked.
if has_module_version "$TEMPORAL_BIN" github.com/temporalio/cli "$TEMPORAL_VERSION"; then
  exit 0
fi
log "building Temporal CLI $TEMPORAL_VERSION into $(dirname "$TEMPORAL_BIN") (first time: ~7 min on 2 cores)"
mkdir -p "$(dirname "$TEMPORAL_BIN")"
GOBIN="$(dirname "$TEMPORAL_BIN")" go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_VERSION"
"$TEMPORAL_BIN" --version >&2
