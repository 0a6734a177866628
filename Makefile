# gpugov developer entry points. README.md explains each.
SHELL := /bin/bash
export CGO_CFLAGS ?= -Wno-deprecated-declarations
export TEMPORAL_BIN ?= $(CURDIR)/bin/temporal
GO_TEST_FLAGS ?= -count=1 -timeout 60m

.PHONY: run run-cluster test test-unit lint build temporal temporal-server postgres promtool chromium staticcheck bench bench-throughput fuzz stop clean demo-governance load load-burst load-backlog

## run: the main job — local Temporal dev server + PostgreSQL, migrate, import a
## contended 6-GPU pool cut from the Alibaba nodes, start gpugov serve and replay the
## trace's busiest six hours on it (GPUGOV_POOL_GPUS=0: the busiest day on the whole cluster).
run:
	deploy/dev/run.sh

## run-cluster: `make run` on the Temporal server on PostgreSQL instead of the dev
## server (deploy/dev/cluster.sh start: databases temporal and temporal_visibility,
## deploy/temporal/cluster.yaml, 4 history shards; gpugov's own database gpugov_cluster).
run-cluster:
	GPUGOV_TEMPORAL=cluster deploy/dev/run.sh

## test: every test, including end-to-end (needs PostgreSQL, the Temporal CLI, the
## Temporal server with its SQL tool, promtool and Chromium for the console's browser
## tests; each is set up if missing). The tests on the Temporal server on PostgreSQL
## and the browser tests fail rather than skip without them.
test: postgres temporal temporal-server promtool chromium
	PATH="$(CURDIR)/bin:$$PATH" GPUGOV_REQUIRE_TEMPORAL_SERVER=1 GPUGOV_REQUIRE_BROWSER=1 go test $(GO_TEST_FLAGS) ./...

## test-unit: every test that needs no service (no PostgreSQL, no Temporal dev server):
## `go test -short`, under which store/storetest and temporaltest skip what needs one.
test-unit:
	go test -short $(GO_TEST_FLAGS) ./...

## lint: gofmt, go vet and the pinned staticcheck (built into bin/ if missing; staticcheck.conf holds its settings).
lint: staticcheck
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	bin/staticcheck ./...

## build: the gpugov binary into bin/.
build:
	go build -o bin/gpugov ./cmd/gpugov

temporal:
	deploy/dev/ensure-temporal.sh

## temporal-server: the Temporal server and temporal-sql-tool at the version the CLI
## embeds, into bin/ when missing (about 4 minutes the first time).
temporal-server:
	deploy/dev/ensure-temporal-server.sh

postgres:
	deploy/dev/ensure-postgres.sh

## promtool: Prometheus' rule checker for deploy's alert tests (into bin/ from Debian's prometheus package if missing).
promtool:
	deploy/dev/ensure-promtool.sh

## chromium: Debian's chromium for the console's browser tests (apt-get, if missing).
chromium:
	deploy/dev/ensure-chromium.sh

staticcheck:
	deploy/dev/ensure-staticcheck.sh

## bench: the performance targets (scheduling cycle, snapshot load, simulation, reports).
bench: postgres
	go test -run '^$$' -bench . -benchmem ./...

## bench-throughput: gpugov's job lifecycles against the floor (a minimal job-shaped
## workflow) on the same dev server, in one run each, THROUGHPUT_RUNS runs
## (docs/design.md "Throughput against the floor"; -v prints the server's
## operations per lifecycle). Compare the medians of x-floor and cpu-x-floor.
## BENCH_TEMPORAL=cluster: on the Temporal server on PostgreSQL instead of the dev server.
THROUGHPUT_RUNS ?= 5
BENCH_TEMPORAL ?= dev
bench-throughput: postgres temporal $(if $(filter cluster,$(BENCH_TEMPORAL)),temporal-server)
	GPUGOV_BENCH_TEMPORAL=$(BENCH_TEMPORAL) go test ./e2e/ -run '^$$' -bench 'Service/lifecycle$$' -benchtime 200x -count $(THROUGHPUT_RUNS) -v -timeout 30m

## fuzz: every fuzz target for FUZZTIME each (go test -fuzz takes one target per
## package run, so one run per target); a failure stops it, and the crasher
## lands in the package's testdata/fuzz/FuzzXxx/ (commit it with the fix:
## plain `go test`, and so `make test`, runs every committed corpus).
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./api:FuzzJobSpecJSON ./api:FuzzCheckpointReport ./api:FuzzSamplesReport \
	./api:FuzzNodeInventoryReport ./api:FuzzReportQuery ./cmd/gpugov:FuzzJobSpecYAML \
	./internal/policy:FuzzPolicy ./internal/inventory/static:FuzzStaticInventory \
	./internal/trace/alibaba:FuzzAlibabaNodes ./internal/trace/alibaba:FuzzAlibabaPods \
	./internal/executor/process:FuzzStatusFile ./internal/experiment:FuzzExperimentSpec
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

## demo-governance: a live preemption and reclaim on an isolated stack (database
## gpugov_demo, Temporal on :7243, API on :8091; never touches `make run`'s). About 2.5 minutes.
demo-governance: temporal
	deploy/dev/demo-governance.sh

## load: the sustained-load test on an isolated stack (database gpugov_load,
## Temporal on :7263, API on :8093; never touches `make run`'s): 50 submissions/s
## plus queries and cancels for 5 minutes, then the nothing-lost check and the
## report (latency per kind, serve's memory over time). About 7 minutes.
load: temporal
	deploy/dev/load.sh

## load-burst: on the same isolated stack, 10,000 submissions as fast as the API
## takes them (GPUGOV_LOAD_JOBS; GPUGOV_LOAD_FLOOR_RATE: the floor/s of
## bench-throughput), then durability at answer time, the time until every
## workflow started and all settled against the floor's prediction, nothing lost
## or duplicated (docs/design.md §8 "Bursts and backlogs").
load-burst: temporal
	GPUGOV_LOAD_MODE=burst deploy/dev/load.sh

## load-backlog: on the same isolated stack, 100,000 pending jobs (GPUGOV_LOAD_JOBS)
## stored through the store while serve runs; serve's RSS, live heap and cycles
## sampled for 3 minutes (GPUGOV_LOAD_HOLD).
load-backlog: temporal
	GPUGOV_LOAD_MODE=backlog deploy/dev/load.sh

## stop: stop what `make run` started.
stop:
	deploy/dev/stop.sh

clean: stop
	rm -rf bin .gpugov
