#!/usr/bin/env bash
# Rerun every benchmark of BENCHMARKS.md (brokers started first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Each transport/<name> is its own module: from the root, go.work resolves
# ./transport/<name>/ to it (./... would stop at the nested go.mod).
bash scripts/brokers.sh up
eval "$(bash scripts/brokers.sh env)"
go test -run '^$' -bench 'Runtime|ChannelBaseline|ChannelConsume|LargeBodyConsume' -benchmem -benchtime 2s .
go test -run '^$' -bench 'LogOutcome' -benchmem -benchtime 2s ./internal/worker/
go test -run '^$' -bench . -benchmem ./envelope/
for d in transport/*/; do
  name="$(basename "$d")"
  [ "$name" = memory ] && continue
  go test -run '^$' -bench . -benchmem "./transport/$name/" || echo "benchmarks of $name failed" >&2
done
go test -run '^$' -bench . -benchmem ./transport/driverkit/
go test -run '^$' -bench . -benchmem -benchtime 300x ./benchmarks/bind/
go test -run '^$' -bench . -benchmem ./otel/ ./otel/metrics/
go test -run '^$' -bench . -benchmem ./schema/...
go test -run '^$' -bench . -benchmem ./idempotency/ ./idempotency/redisstore/ ./idempotency/pgstore/
go test -run '^$' -bench . -benchmem ./outbox/pgstore/ ./dlq/
go test -run '^$' -bench Index -benchmem -benchtime 5x ./console/
# The Go runtime beside the Python SDK and the raw clients, every broker (about 30 min).
bash scripts/sdkbench.sh -rounds 3
