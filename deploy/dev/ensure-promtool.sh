#!/usr/bin/env bash
# Makes sure promtool (Prometheus' rule checker) is there for deploy's alert
# tests (`promtool check rules`, `promtool test rules` on
# deploy/prometheus/alerts.yml): on PATH or in bin/ it is used as it is.
# Otherwise, with apt-get, Debian's `prometheus` package (which ships
# /usr/bin/promtool) is downloaded and only its promtool is extracted into
# bin/ — nothing is installed system-wide and no Prometheus server is
# started. Without apt-get, the pinned Prometheus release for linux-amd64 is
# downloaded from GitHub and its SHA-256 checked before promtool is taken
# from it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-2.53.4}"
PROMETHEUS_SHA256_AMD64="${PROMETHEUS_SHA256_AMD64:-b8b497c4610d1b93208252b60c8f20f6b2e78596ae8df43397a2e805aa53d475}"
bin="$GPUGOV_ROOT/bin/promtool"
if command -v promtool >/dev/null || [ -x "$bin" ]; then
  exit 0
fi
mkdir -p "$(dirname "$bin")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then
  log "promtool not found: taking it from Debian's prometheus package into bin/"
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    # The package lists may be missing on a fresh machine (root only).
    apt-get update -qq >/dev/null
    (cd "$tmp" && apt-get download prometheus >/dev/null)
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
  install -m 0755 "$tmp/root/usr/bin/promtool" "$bin"
else
  arch=$(uname -m)
  [ "$arch" = x86_64 ] || { log "no apt-get and no pinned Prometheus release for $arch: install promtool on PATH"; exit 1; }
  name="prometheus-$PROMETHEUS_VERSION.linux-amd64"
  url="https://github.com/prometheus/prometheus/releases/download/v$PROMETHEUS_VERSION/$name.tar.gz"
  log "promtool not found and no apt-get: downloading $url"
  curl -fsSL -o "$tmp/p.tar.gz" "$url"
  echo "$PROMETHEUS_SHA256_AMD64  $tmp/p.tar.gz" | sha256sum -c --quiet -
  tar -xzf "$tmp/p.tar.gz" -C "$tmp" "$name/promtool"
  install -m 0755 "$tmp/$name/promtool" "$bin"
fi
"$bin" --version >&2
