#!/usr/bin/env bash
# Builds the pinned Temporal UI server (the UI the Temporal CLI embeds) into
# bin/temporal-ui-server when it is missing, for `make run-cluster`'s UI
# (the dev server serves its own). The first build took 2 min 19 s (29 s of
# CPU) here, most of its modules already fetched for the CLI.
set -euo pipefail
source "$(dirname "$0")/env.sh"
mod=github.com/temporalio/ui-server/v2
if has_module_version "$TEMPORAL_UI_SERVER_BIN" "$mod" "$TEMPORAL_UI_VERSION"; then
  exit 0
fi
log "building Temporal UI server $TEMPORAL_UI_VERSION into $TEMPORAL_UI_SERVER_BIN"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" go install "$mod/cmd/server@$TEMPORAL_UI_VERSION"
mkdir -p "$(dirname "$TEMPORAL_UI_SERVER_BIN")"
mv "$tmp/server" "$TEMPORAL_UI_SERVER_BIN"
