# Shared settings for the dev scripts; sourced, not run.
# Everything a local run creates lives under .gpugov/ (git-ignored) and bin/ (git-ignored).
GPUGOV_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export GPUGOV_ROOT
export GPUGOV_STATE="${GPUGOV_STATE:-$GPUGOV_ROOT/.gpugov}"
export TEMPORAL_VERSION="${TEMPORAL_VERSION:-v1.5.1}"
export TEMPORAL_BIN="${TEMPORAL_BIN:-$GPUGOV_ROOT/bin/temporal}"
export TEMPORAL_ADDRESS="${TEMPORAL_ADDRESS:-127.0.0.1:7233}"
export TEMPORAL_UI_PORT="${TEMPORAL_UI_PORT:-8233}"
# `make run-cluster` (GPUGOV_TEMPORAL=cluster) keeps its jobs apart from `make
# run`'s: their workflows live in another Temporal.
if [ "${GPUGOV_TEMPORAL:-dev}" = cluster ]; then
  export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gpugov_cluster?sslmode=disable}"
else
  export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/gpugov?sslmode=disable}"
fi
export GPUGOV_API_ADDR="${GPUGOV_API_ADDR:-127.0.0.1:8080}"
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
# The custom search attributes every gpugov workflow may set (docs/design.md §3).
GPUGOV_SEARCH_ATTRIBUTES=(GpugovQueue=Keyword GpugovTier=Keyword GpugovPool=Keyword GpugovWaitReason=Keyword GpugovJobState=Keyword GpugovExperimentState=Keyword)
mkdir -p "$GPUGOV_STATE"
log() { printf '[gpugov] %s\n' "$*" >&2; }
# has_module_version BIN MODULE VERSION: true when BIN is an executable built
# from MODULE at VERSION (the module version `go install` records in it, read by
# `go version -m`; release builds' own version strings are not used).
has_module_version() {
  [ -x "$1" ] && go version -m "$1" 2>/dev/null |
    grep -Eq "^[[:space:]]+mod[[:space:]]+$2[[:space:]]+$3[[:space:]]"
}
# The Temporal server (all services in one process) that `make run-cluster`
# and the cluster tests run on PostgreSQL: the server version the CLI above
# embeds, so the dev server and the cluster behave alike (README "Temporal on PostgreSQL").
export TEMPORAL_SERVER_VERSION="${TEMPORAL_SERVER_VERSION:-v1.29.1}"
export TEMPORAL_SERVER_BIN="${TEMPORAL_SERVER_BIN:-$GPUGOV_ROOT/bin/temporal-server}"
export TEMPORAL_SQL_TOOL_BIN="${TEMPORAL_SQL_TOOL_BIN:-$GPUGOV_ROOT/bin/temporal-sql-tool}"
# The Temporal UI server `make run-cluster` runs beside it (the dev server has
# its own): the UI version the same CLI embeds (`bin/temporal --version`).
export TEMPORAL_UI_VERSION="${TEMPORAL_UI_VERSION:-v2.42.1}"
export TEMPORAL_UI_SERVER_BIN="${TEMPORAL_UI_SERVER_BIN:-$GPUGOV_ROOT/bin/temporal-ui-server}"
