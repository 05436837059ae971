#!/usr/bin/env bash
# The runtime's and each broker's figures of two commits in turns (issue 32's "before
# and after in one run"): bash scripts/bench-before-after.sh [BEFORE [TURNS]].
# BEFORE (default c50a339) is checked out in a temporary work tree; "after" is this
# tree. Each side's test binaries are built first, then run in turns (before, after,
# …) from this tree's package directories, on the brokers of scripts/brokers.sh. The
# results are in $BQ_BA_OUT (default /tmp/bench-before-after), a file per side and
# package.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
before_rev="${1:-c50a339}"
turns="${2:-2}"
out="${BQ_BA_OUT:-/tmp/bench-before-after}"
mkdir -p "$out"
wt="$(mktemp -d)/before"
git worktree add -q --detach "$wt" "$before_rev"
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
declare -A bench=(
  [.]='^Benchmark(Runtime|RuntimeConsume|ChannelConsume)$'
  [transport/amqp]='^Benchmark(ConsumeAck|PublishConfirm)$'
  [transport/kafka]='^Benchmark(ConsumeCommitAlternating|PublishAlternating)$'
  [transport/redis]='^BenchmarkPaired$'
  [transport/sqs]='^Benchmark(RawReceiveDelete|TransportReceiveAck)$'
  [transport/artemis]='^Benchmark(RawConsumeAck|TransportConsumeAck)$'
  [transport/pulsar]='^Benchmark(RawSendReceiveAck|TransportSendReceiveAck)$'
)
for side in before after; do
  tree="$wt"; [ "$side" = after ] && tree="$root"
  for p in "${!bench[@]}"; do
    n=$(echo "$p" | tr / _)
    (cd "$tree/$p" && go test -c -o "$out/$side-$n.test" .) || echo "building $side $p failed" >&2
  done
done
bash scripts/brokers.sh up >/dev/null
eval "$(bash scripts/brokers.sh env)"
for _ in $(seq "$turns"); do
  for side in before after; do
    for p in "${!bench[@]}"; do
      n=$(echo "$p" | tr / _)
      (cd "$root/$p" && "$out/$side-$n.test" -test.run '^$' -test.bench "${bench[$p]}" -test.benchmem -test.count 1 >>"$out/$side-$n.txt" 2>&1)
    done
  done
done
echo "results in $out"
