#!/usr/bin/env bash
# Builds the pinned staticcheck into bin/ when it is missing or another version.
# `make lint` runs it after `go vet`. STATICCHECK_VERSION is the module version
# of honnef.co/go/tools; v0.8.x is the release line that analyses Go 1.26 code.
set -euo pipefail
source "$(dirname "$0")/env.sh"
STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"
STATICCHECK_BIN="${STATICCHECK_BIN:-$GPUGOV_ROOT/bin/staticcheck}"
if has_module_version "$STATICCHECK_BIN" honnef.co/go/tools "$STATICCHECK_VERSION"; then
  exit 0
fi
log "building staticcheck $STATICCHECK_VERSION into $(dirname "$STATICCHECK_BIN")"
mkdir -p "$(dirname "$STATICCHECK_BIN")"
GOBIN="$(dirname "$STATICCHECK_BIN")" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
