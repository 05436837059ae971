#!/usr/bin/env bash
# The project's whole test run, as CI runs it: start every broker, create the Python
# peer, then vet, staticcheck and every test (race detector on), brokers included.
#
#   scripts/test.sh              everything: every module that go.work uses
#   scripts/test.sh ./transport/redis/...   only these packages (brokers are still started)
#
# The repository is a Go workspace of several modules (the root, one per broker,
# cmd/babelqueue; see "Modules" in README.md). From the root, ./... stops at a nested
# module's go.mod, so "everything" is <module dir>/... for each module that go.work
# lists (go list -m): a new module is tested once it has a "use" line in go.work.
# Each tool runs once over all of them, from the root in workspace mode, so the
# brokers' test packages still run in parallel.
#
# Needs nothing but Go and Debian: scripts/brokers.sh installs and starts the brokers,
# scripts/pyenv.sh the Python SDK babelqueue==1.24.0. Idempotent; a second run starts
# in seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== %s (%s)\n' "$*" "$(date +%H:%M:%S)"; }

step "brokers"
bash scripts/brokers.sh up
eval "$(bash scripts/brokers.sh env)"

step "python peer (babelqueue==1.24.0)"
BQ_PYTHON="$(bash scripts/pyenv.sh | tail -n 1)"
export BQ_PYTHON

step "prometheus and chromium (the otel dashboard test, the console tests)"
{ read -r BQ_PROMETHEUS; read -r BQ_CHROMIUM; } < <(bash scripts/prometheus.sh | tail -n 2)
export BQ_PROMETHEUS BQ_CHROMIUM

step "alert rules (promtool: docs/alerts.yml against docs/alerts_test.yml)"
# Debian's prometheus package ships promtool beside the server (scripts/prometheus.sh).
promtool="$(dirname "$BQ_PROMETHEUS")/promtool"
[ -x "$promtool" ] || promtool="$(command -v promtool)"
"$promtool" check rules docs/alerts.yml
"$promtool" test rules docs/alerts_test.yml

step "conformance data"
export BQ_CONFORMANCE_DIR="${BQ_CONFORMANCE_DIR:-$(cd .. && pwd)/shared/conformance}"
if [ ! -f "$BQ_CONFORMANCE_DIR/manifest.json" ]; then
  echo "conformance data not found at $BQ_CONFORMANCE_DIR (set BQ_CONFORMANCE_DIR)" >&2
  exit 1
fi
echo "$BQ_CONFORMANCE_DIR"

pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  step "modules (go.work)"
  while IFS= read -r dir; do
    rel="./$(realpath --relative-to=. "$dir")"
    echo "${rel%/.}"
    pkgs+=("${rel%/.}/...")
  done < <(go list -m -f '{{.Dir}}')
fi

step "gofmt"
unformatted="$(gofmt -l . | grep -v '^\.cache/' || true)"
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "no shipped code imports another module's internal/ packages"
bash scripts/check-internal.sh

step "go vet"
go vet "${pkgs[@]}"

step "staticcheck"
staticcheck_version=v0.8.2
if ! command -v staticcheck >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/staticcheck" ]; then
  go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
fi
PATH="$(go env GOPATH)/bin:$PATH" staticcheck "${pkgs[@]}"

# Clustered brokers (issue 35), up for the tests that use them, down after, pass or fail:
# Redis Sentinel and Redis Cluster (transport/redis, faults); the Artemis primary/backup
# pair (artemis-ha: the driver's kits run on it, BQ_ARTEMIS_CLUSTER_URL; the fault suite
# starts a private pair of its own to kill); the Kafka cluster (kafka-cluster, three
# KRaft nodes: transport/kafka's TestCluster* and the fault suite's
# TestClusterFaultsKafka, which kills its nodes; about 1.2 GB more while it runs); three
# RabbitMQ nodes (rabbitmq-cluster: transport/amqp's cluster tests, BQ_AMQP_CLUSTER_URL;
# the fault suite starts a cluster of its own to kill; about 390 MB).
step "clusters: redis-sentinel redis-cluster artemis-ha kafka-cluster rabbitmq-cluster"
bash scripts/brokers.sh up redis-sentinel redis-cluster artemis-ha kafka-cluster rabbitmq-cluster
eval "$(bash scripts/brokers.sh env redis-sentinel redis-cluster artemis-ha kafka-cluster rabbitmq-cluster)"

step "go test -race"
go_test_status=0
go test -race -count=1 -timeout 25m "${pkgs[@]}" || go_test_status=$?
bash scripts/brokers.sh down redis-sentinel redis-cluster artemis-ha kafka-cluster rabbitmq-cluster
[ "$go_test_status" = 0 ] || exit "$go_test_status"

# The release tooling (README.md, Modules, Releases) is a module of its own outside
# go.work, so that its dependencies stay out of the workspace: its own vet,
# staticcheck and tests, with GOWORK=off. Then the release check: the release state of
# the work tree zipped into a local module proxy, installed by version in scratch
# modules outside the tree (go get, the README quick start, go install
# cmd/babelqueue@version), the README's module counts compared, and each module's API
# compared with its last release once one is tagged. About a minute on a warm cache.
if [ "$#" -eq 0 ]; then
  step "release tooling (tools/release, GOWORK=off): go vet, staticcheck, go test -race"
  (
    cd tools/release
    export GOWORK=off
    go vet ./...
    PATH="$(go env GOPATH)/bin:$PATH" staticcheck ./...
    go test -race -count=1 -timeout 15m ./...
  )
  step "release check (install from a local module proxy; API against the last release)"
  repo="$PWD"
  (cd tools/release && GOWORK=off go run . check -repo "$repo")
fi

# The console's 100,000-dead-letter measure (README.md, Console): the race detector
# slows decoding tenfold, so go test -race above checks it at 10,000; here it runs
# once at full size without it.
if [ "$#" -eq 0 ]; then
  step "console: the dead-letter page at 100,000 messages (no race detector)"
  go test -count=1 -run '^TestDLQView100k$' -v ./console/ | grep -E 'dead letters|^(--- |ok|FAIL)'
fi

# The soak benchmark's short form (issue 39; `make soak` is the 30-minute one): the
# runtime in a worker process of its own on Redis, RabbitMQ and Kafka side by side, 90 s
# at half the peak measured first (10 s), with a failure mix; it fails when a message is
# lost or when RSS, Go heap, goroutines, open descriptors or p99 latency grow after the
# warm-up (BENCHMARKS.md, "Soak"). It runs here, not under go test -race: the worker's
# memory must be the runtime's as a user runs it, not the race detector's. About
# 1 min 50 s.
if [ "$#" -eq 0 ]; then
  step "soak, short form: Redis, RabbitMQ and Kafka side by side, about 2 minutes (no race detector)"
  go run ./faults/cmd/soak -form short
fi
