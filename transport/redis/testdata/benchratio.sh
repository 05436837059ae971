#!/usr/bin/env bash
# benchratio.sh runs BenchmarkPaired ROUNDS times (default 5; each round one test process,
# BENCHTIME messages per side, default 8000x) and prints each round's ratios and their
# medians. In BenchmarkPaired the raw, transport and lua-floor sides alternate in chunks of
# 256 messages, so each ratio compares sides that saw the same load on this shared
# machine. Run from the module root with the brokers' env:
#
#	eval "$(bash scripts/brokers.sh env)"
#	bash transport/redis/testdata/benchratio.sh [ROUNDS] [BENCHTIME]
set -euo pipefail
rounds=${1:-5}
benchtime=${2:-8000x}
out=$(mktemp)
bin=$(mktemp)
trap 'rm -f "$out" "$bin"' EXIT
go test -c -o "$bin" ./transport/redis/
for r in $(seq 1 "$rounds"); do
	"$bin" -test.run '^$' -test.bench '^BenchmarkPaired$' -test.benchtime "$benchtime" -test.count 1 |
		awk -v r="$r" '/^BenchmarkPaired/ {
			sub(/-[0-9]+$/, "", $1); sub(/.*\//, "", $1)
			for (i = 3; i < NF; i += 2) v[$(i + 1)] = $i
			print r, $1, v["raw-ns/msg"], v["bq-ns/msg"], v["lua-ns/msg"], v["raw/bq"], v["raw/lua"], v["bqd-ns/msg"], v["raw/bqd"]
		}' >>"$out"
done
awk '
function median(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	printf "round %s %s: raw %d ns/msg, transport %d, deferred acks %d, lua floor %d; raw/transport %.2f, raw/deferred %.2f, raw/lua %.2f\n", $1, $2, $3, $4, $8, $5, $6, $9, $7
	raw[$2] = raw[$2] " " $3; bq[$2] = bq[$2] " " $4; lua[$2] = lua[$2] " " $5; bqd[$2] = bqd[$2] " " $8
	rb[$2] = rb[$2] " " $6; rl[$2] = rl[$2] " " $7; rd[$2] = rd[$2] " " $9
}
END {
	for (w in raw)
		printf "MEDIAN %s: raw %d ns/msg, transport %d, deferred acks %d, lua floor %d; raw/transport %.2f, raw/deferred %.2f, raw/lua %.2f\n",
			w, median(raw[w]), median(bq[w]), median(bqd[w]), median(lua[w]), median(rb[w]), median(rd[w]), median(rl[w])
}' "$out"
