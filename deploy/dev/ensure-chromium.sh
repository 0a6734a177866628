#!/usr/bin/env bash
# Makes sure a Chromium the console's browser tests (e2e/browser_test.go,
# driven by chromedp) can run headless is there: $GPUGOV_CHROMIUM, or
# chromium on PATH, is used as it is. Otherwise Debian's `chromium` package
# (/usr/bin/chromium, with its recommended fonts so that screenshots show
# text) is installed with apt-get, as root or through passwordless sudo;
# the package lists are refreshed only when the first try finds nothing.
# Idempotent and quiet: prints nothing when Chromium is already there.
set -euo pipefail
source "$(dirname "$0")/env.sh"
if [ -n "${GPUGOV_CHROMIUM:-}" ] && [ -x "$GPUGOV_CHROMIUM" ]; then exit 0; fi
if command -v chromium >/dev/null; then exit 0; fi
if ! command -v apt-get >/dev/null; then
  log "chromium not found and no apt-get: install Chromium and set GPUGOV_CHROMIUM to its path"
  exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    log "chromium not found: installing Debian's chromium needs root (or set GPUGOV_CHROMIUM)"
    exit 1
  fi
fi
log "chromium not found: installing Debian's chromium for the browser tests"
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y -qq chromium >/dev/null 2>&1; then
  # The package lists may be missing or stale on a fresh machine.
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" apt-get install -y -qq chromium >/dev/null
fi
chromium --version >&2
