#!/usr/bin/env bash
# Memory of the brokers started by scripts/brokers.sh: RSS and PSS (MiB) of each broker's
# process tree (from its pid file), and the total. Used for the figures in docs/brokers.md.
set -u
STATE=${BQ_STATE_DIR:-/tmp/babelqueue-brokers}
tree() { local p=$1 c; echo "$p"; for c in $(ps -o pid= --ppid "$p"); do tree "$c"; done; }
tr=0; tp=0
for f in "$STATE"/*.pid; do
  [ -s "$f" ] || continue
  n=$(basename "$f" .pid); pid=$(cat "$f"); kill -0 "$pid" 2>/dev/null || continue
  r=0; s=0
  for p in $(tree "$pid"); do
    r=$((r + $(ps -o rss= -p "$p" 2>/dev/null || echo 0)))
    s=$((s + $(awk '/^Pss:/{print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)))
  done
  printf '%-9s RSS %5d MiB  PSS %5d MiB\n' "$n" $((r / 1024)) $((s / 1024))
  tr=$((tr + r)); tp=$((tp + s))
done
for p in $(pgrep -x epmd); do  # RabbitMQ's port mapper runs outside the server's tree
  e=$(ps -o rss= -p "$p"); printf '%-9s RSS %5d MiB\n' epmd $((e / 1024)); tr=$((tr + e))
done
printf '%-9s RSS %5d MiB  PSS %5d MiB\n' total $((tr / 1024)) $((tp / 1024))
