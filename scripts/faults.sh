#!/usr/bin/env bash
# scripts/faults.sh — the fault suite's full form (issue 16), as `make faults` runs it:
# 3,000 messages a run on every broker, four worker processes, one message in ten failing
# into the dead-letter queue, through every scenario (worker SIGKILL, connection cut,
# broker restart of a private broker, dead-letter writes refused). The results go to
# docs/reliability.json and their tables into docs/reliability.md. The node failures of
# the clusters (issue 35, TestClusterFaults*, each on a private cluster) run after
# them; their rows in docs/reliability.md, "Clusters", are written from this run's log.
#
#   scripts/faults.sh                       every broker, one after the other (~30 min)
#   BQ_FAULTS_ONLY=redis,kafka scripts/faults.sh
#   BQ_FAULTS_SCENARIOS=restart scripts/faults.sh
#
# The worker and broker logs of the run stay in $BQ_FAULTS_LOGS (default
# /tmp/babelqueue-faults). The short form (300 messages) runs in `make test`.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/brokers.sh up || exit 1
eval "$(bash scripts/brokers.sh env)"
# The Kafka cluster (issue 35) for TestClusterFaultsKafka, stopped at the end.
bash scripts/brokers.sh up kafka-cluster || exit 1
eval "$(bash scripts/brokers.sh env kafka-cluster)"
trap 'bash scripts/brokers.sh down kafka-cluster' EXIT

export BQ_FAULTS=full
export BQ_FAULTS_OUT="$PWD/docs/reliability.json"
export BQ_FAULTS_LOGS="${BQ_FAULTS_LOGS:-/tmp/babelqueue-faults}"
rm -rf "$BQ_FAULTS_LOGS"
mkdir -p "$BQ_FAULTS_LOGS"

go test -count=1 -timeout 120m -run '^(TestFaults|TestClusterFaults.*)$' -v ./faults/ 2>&1 | tee "$BQ_FAULTS_LOGS/go-test.log" \
  | grep -E '^\s+[a-z_]+_test.go|^(---|    ---|        ---|ok|FAIL|PASS)'
status=${PIPESTATUS[0]}

go run ./faults/cmd/reliability -in "$BQ_FAULTS_OUT" -doc docs/reliability.md || exit 1
echo "docs/reliability.md updated from $BQ_FAULTS_OUT (go test exit status $status; logs in $BQ_FAULTS_LOGS)"
exit "$status"
