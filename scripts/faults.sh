#!/usr/bin/env bash
# scripts/faults.sh — the fault suite's full form (issue 16), as `make faults` runs it:
# 3,000 messages a run on every broker, four worker processes, one message in ten failing
# into the dead-letter queue, through every scenario (worker SIGKILL, connection cut,
# broker restart of a private broker, dead-letter writes refused). The results go to
# docs/reliability.json and their tables into docs/reliability.md. The node failures of
# the clusters (issue 35, TestClusterFaults*, each on a private cluster) run after
# them, into the same results: every broker, and every cluster, gets a table of its own
# in docs/reliability.md (duplicates, recovery, dead connections found and publish errors
# through the cut against their bounds), and a row over a bound fails the run, named.
#
#   scripts/faults.sh                       every broker, one after the other (~30 min)
#   BQ_FAULTS_ONLY=redis,kafka scripts/faults.sh
#   BQ_FAULTS_SCENARIOS=restart scripts/faults.sh     (only those rows of docs/reliability.json replaced)
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
# The run's results; a run of every broker and scenario replaces docs/reliability.json,
# one narrowed by BQ_FAULTS_ONLY or BQ_FAULTS_SCENARIOS replaces only its rows in it.
export BQ_FAULTS_LOGS="${BQ_FAULTS_LOGS:-/tmp/babelqueue-faults}"
export BQ_FAULTS_OUT="$BQ_FAULTS_LOGS/results.json"
rm -rf "$BQ_FAULTS_LOGS"
mkdir -p "$BQ_FAULTS_LOGS"

go test -count=1 -timeout 120m -run '^(TestFaults|TestClusterFaults.*)$' -v ./faults/ 2>&1 | tee "$BQ_FAULTS_LOGS/go-test.log" \
  | grep -E '^\s+[a-z_]+_test.go|^(---|    ---|        ---|ok|FAIL|PASS)'
status=${PIPESTATUS[0]}

# The tables, one per broker (the clusters' among them), into docs/reliability.md; every
# row over one of its bounds is listed by name and fails the run.
merge=()
[ -n "${BQ_FAULTS_ONLY:-}${BQ_FAULTS_SCENARIOS:-}" ] && merge=(-merge docs/reliability.json)
[ ${#merge[@]} -eq 0 ] && { cp "$BQ_FAULTS_OUT" docs/reliability.json || exit 1; }
go run ./faults/cmd/reliability -in "$BQ_FAULTS_OUT" "${merge[@]}" -doc docs/reliability.md
report=$?
echo "docs/reliability.md rendered from docs/reliability.json (go test exit status $status, rows over their bounds: exit status $report; logs in $BQ_FAULTS_LOGS)"
[ "$status" -ne 0 ] && exit "$status"
exit "$report"
