#!/usr/bin/env bash
# The Go runtime beside the Python SDK (babelqueue 1.24.0) and a raw client on each
# broker, each in processes of its own, every message checked handled exactly once, with
# the end-to-end latency and memory of a steady run (Go SDK and raw client):
# BENCHMARKS.md, "Go runtime vs Python SDK 1.24.0 vs raw client".
#   bash scripts/sdkbench.sh [sdkcompare flags: -brokers redis,kafka -rounds 3 -n 4000 -v]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/brokers.sh up redis rabbitmq kafka sqs artemis pulsar >&2
eval "$(bash scripts/brokers.sh env)"
BQ_PYTHON="${BQ_PYTHON:-$(bash scripts/pyenv.sh | tail -n 1)}"
export BQ_PYTHON
bin="$(mktemp -d)/sdkcompare"
go build -o "$bin" ./benchmarks/sdkcompare
"$bin" "$@"
