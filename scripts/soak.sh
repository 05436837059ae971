#!/usr/bin/env bash
# scripts/soak.sh — the soak benchmark's long form (issue 39), as `make soak` runs it:
# the runtime in a worker process of its own on Redis, RabbitMQ and Kafka side by side,
# 30 minutes each at half the peak the run measures first, with a failure mix (one
# message in ten always failing into the dead-letter queue, one in ten failing once);
# the worker's RSS, Go heap, goroutines and open descriptors and the p99 end-to-end
# latency are sampled every minute and must stay flat after a 5-minute warm-up, and
# every meta.id must be handled or dead-lettered (BENCHMARKS.md, "Soak").
#
#   scripts/soak.sh                          every broker, side by side (~32 min)
#   scripts/soak.sh -brokers kafka -serial   soak flags (go run ./faults/cmd/soak -h)
#
# The samples, tables and logs of the run stay in $BQ_SOAK_LOGS (default
# /tmp/babelqueue-soak): soak.md, soak.json, one log per worker. The short form
# (2 minutes) runs in `make test`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/brokers.sh up redis rabbitmq kafka >&2
eval "$(bash scripts/brokers.sh env)"

export BQ_SOAK_LOGS="${BQ_SOAK_LOGS:-/tmp/babelqueue-soak}"
rm -rf "$BQ_SOAK_LOGS"
mkdir -p "$BQ_SOAK_LOGS"
go run ./faults/cmd/soak -form long -logs "$BQ_SOAK_LOGS" -out "$BQ_SOAK_LOGS/soak.json" "$@" | tee "$BQ_SOAK_LOGS/soak.md"
