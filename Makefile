# Stampede developer and CI targets. `make test` is what .ci/run executes.
GO ?= go
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
# Installed, at the version pinned in scripts/tools.sh, by `bash scripts/tools.sh lint`.
GOLANGCI_LINT ?= $(shell $(GO) env GOPATH)/bin/golangci-lint
ARGS ?=

.PHONY: services build migrate demo test lint test-go test-fuzz test-client test-e2e test-short bench bench-push bench-push-line bench-scale bench-services build-bench docs docs-check funclen fmt clean

services:
	bash scripts/services.sh

build:
	$(GO) build -buildvcs=auto -o bin/stampede ./cmd/stampede

migrate: services build
	bin/stampede migrate

# make demo ARGS=--once (the demo, the benchmarks and the tests run in
# development mode: demo login and checkout, built-in keys;
# docs/production.md, "Modes")
demo: services build
	STAMPEDE_MODE=development bin/stampede demo $(ARGS)

# Everything CI runs (scripts/test.sh): the docs check first (seconds: a
# broken page fails before the long suites start), lint, go vet and the Go
# tests (race detector on, system tests included), a short fuzz run, the
# client's unit tests and the browser end-to-end test (installs Debian's
# chromium and the client's npm packages when they are missing). The tests
# run on Redis, MariaDB and RabbitMQ servers of the run's own, started once
# and stopped at the end (scripts/testservices.sh), never on the servers of
# the default ports; STAMPEDE_TEST_SERVICES=external uses those (or the
# STAMPEDE_TEST_* addresses) in namespaces the tests create. The phases'
# times are printed at the end.
test:
	bash scripts/test.sh

# The docs check (docs/doc.go): every relative link and anchor of README.md,
# docs/*.md and */README.md resolves, every make target and stampede command
# of their shell blocks exists, every figure cites a report in bench/results
# that exists, and docs/configuration.md matches the flags. No services and
# no race detector: seconds with a warm build cache. go test ./... runs these
# tests too.
docs-check:
	bash scripts/test.sh docs

# Regenerate docs/configuration.md from the flag definitions of
# app/config.go, after adding or changing a setting.
docs:
	$(GO) test -count=1 -run '^TestConfigurationPage$$' ./app/ -update

# Functions longer than 80 lines, longest first (ARGS='-max 60 -tests=false ./pipeline').
funclen:
	$(GO) run ./scripts/funclen $(ARGS)

# go vet and go test -race ./... on test servers of their own (as in make test).
test-go:
	bash scripts/test.sh go

# The house rules (.golangci.yml: a small linter set, depguard's import
# direction); gofmt and a tidy go.mod first, which golangci-lint does not check.
lint:
	bash scripts/tools.sh lint
	@test -z "$$($(GOFMT) -l .)" || { echo "gofmt needed:"; $(GOFMT) -l .; exit 1; }
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...

# A short run of the order decoder/handler fuzz target (scripts/test.sh fuzz:
# what it checks, and why a count of inputs).
test-fuzz:
	bash scripts/test.sh fuzz

# The client's packages exactly as package-lock.json names them (npm ci),
# again whenever the lock file changes. The lock file keeps vite's optional
# Windows-only dependency (never installed here), which npm ci requires.
client/node_modules/.package-lock.json: client/package-lock.json
	cd client && npm ci --no-audit --no-fund --loglevel=error

test-client:
	bash scripts/test.sh client

test-e2e:
	bash scripts/test.sh e2e

test-short:
	bash scripts/test.sh short

# The benchmarks run on their own MySQL database, RabbitMQ vhost and Redis
# database, so the products and orders they leave never mix with the demo's
# (a later `make demo` would otherwise wait for thousands of old orders).
BENCH_ENV = STAMPEDE_MODE=development STAMPEDE_MYSQL_DSN='root@tcp(127.0.0.1:3306)/stampede_bench?parseTime=true' \
	STAMPEDE_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/stampede_bench STAMPEDE_REDIS_DB=6

bench-services:
	bash scripts/services.sh --bench

# The benchmark is a binary of its own, bin/stampede-bench (cmd/stampede-bench:
# the stampede commands plus bench, bench-scale and bench-push), so the
# production binary does not link the load generator.
build-bench:
	$(GO) build -buildvcs=auto -o bin/stampede-bench ./cmd/stampede-bench

# A full `make bench` (no ARGS) also runs the push benchmark, which appends
# its row to bench/results/push-<date>.md; with ARGS only `stampede-bench bench`
# runs (`make bench-push` runs the push benchmark alone).
bench: bench-services build-bench
	$(BENCH_ENV) bin/stampede-bench bench $(ARGS)
	@if [ -z "$(ARGS)" ]; then $(MAKE) --no-print-directory bench-push; else echo "make bench: ARGS given, push benchmark skipped (make bench-push)"; fi

bench-push: bench-services build-bench
	STAMPEDE_MODE=development STAMPEDE_MIGRATE=true bin/stampede-bench bench-push --amqp-url amqp://guest:guest@127.0.0.1:5672/stampede_bench_push

# The waiting room at sale-day scale (issue 28): a push hub in the bench
# process, --sockets (100,000) client sockets in child processes; needs no
# services, only file descriptors (docs/production.md "Many sockets per push process").
bench-push-line: build-bench
	STAMPEDE_MODE=development bin/stampede-bench bench-push --line $(ARGS)

# 1 vs 2 gateway+writer pairs, each pair its own process (docs/scaling.md).
bench-scale: bench-services build-bench
	$(BENCH_ENV) bin/stampede-bench bench-scale $(ARGS)

fmt:
	@out=$$(find . -name '*.go' -not -path './.git/*' -not -path './client/node_modules/*' -print0 \
		| xargs -0 -r $(GOFMT) -l) || exit 1; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin
