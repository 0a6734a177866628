#!/usr/bin/env bash
# Builds the pinned Temporal server and its SQL schema tool into bin/ when
# either is missing (bin/temporal-server, bin/temporal-sql-tool). The version is
# the go.temporal.io/server the Temporal CLI (deploy/dev/ensure-temporal.sh)
# embeds. The first build takes about 4 minutes of CPU (13 min of wall time on
# 2 cores at a load average of 20, beside the CLI's build).
set -euo pipefail
source "$(dirname "$0")/env.sh"
mod=go.temporal.io/server
if has_module_version "$TEMPORAL_SERVER_BIN" "$mod" "$TEMPORAL_SERVER_VERSION" &&
  has_module_version "$TEMPORAL_SQL_TOOL_BIN" "$mod" "$TEMPORAL_SERVER_VERSION"; then
  exit 0
fi
log "building Temporal server $TEMPORAL_SERVER_VERSION into $(dirname "$TEMPORAL_SERVER_BIN") (first time: ~4 min of CPU)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" go install "$mod/cmd/server@$TEMPORAL_SERVER_VERSION" "$mod/cmd/tools/sql@$TEMPORAL_SERVER_VERSION"
mkdir -p "$(dirname "$TEMPORAL_SERVER_BIN")" "$(dirname "$TEMPORAL_SQL_TOOL_BIN")"
mv "$tmp/server" "$TEMPORAL_SERVER_BIN"
mv "$tmp/sql" "$TEMPORAL_SQL_TOOL_BIN"
"$TEMPORAL_SERVER_BIN" --help >/dev/null
