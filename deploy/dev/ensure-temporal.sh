#!/usr/bin/env bash
# Builds the pinned Temporal CLI (dev server) into bin/ when it is missing.
# The first build takes about 7 minutes on 2 cores; later builds reuse Go's cache.
set -euo pipefail
source "$(dirname "$0")/env.sh"
if [ -x "$TEMPORAL_BIN" ] && "$TEMPORAL_BIN" --version 2>/dev/null | grep -q "${TEMPORAL_VERSION#v}"; then
  exit 0
fi
log "building Temporal CLI $TEMPORAL_VERSION into $(dirname "$TEMPORAL_BIN") (first time: ~7 min on 2 cores)"
mkdir -p "$(dirname "$TEMPORAL_BIN")"
GOBIN="$(dirname "$TEMPORAL_BIN")" go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_VERSION"
"$TEMPORAL_BIN" --version >&2
