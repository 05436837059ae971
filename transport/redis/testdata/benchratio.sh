#!/usr/bin/env bash
# benchratio.sh runs BenchmarkRaw and BenchmarkTransport ROUNDS times (default 5). Each
# round runs, per worker count, the raw benchmark and then the transport one back to back
# (one test process per pair), so the two sides of a ratio see the same machine load. It
# prints each round's ratio (raw ns/op ÷ transport ns/op) and the medians over the rounds. Run from the module root with the brokers' env:
#
#	eval "$(bash scripts/brokers.sh env)"
#	bash transport/redis/testdata/benchratio.sh [ROUNDS] [BENCHTIME]
set -euo pipefail
rounds=${1:-5}
benchtime=${2:-2s}
out=$(mktemp)
bin=$(mktemp)
trap 'rm -f "$out" "$bin"' EXIT
go test -c -o "$bin" ./transport/redis/
for r in $(seq 1 "$rounds"); do
	for w in 1 8; do
		"$bin" -test.run '^$' -test.bench "^Benchmark(Raw|Transport)\$/^workers=$w\$" -test.benchmem \
			-test.benchtime "$benchtime" -test.count 1 |
			awk -v r="$r" '/^Benchmark/ { sub(/-[0-9]+$/, "", $1); print r, $1, $3, $5, $7 }' >>"$out"
	done
done
awk '
function median(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	split($2, p, "/"); side = p[1]; w = p[2]
	ns[side, w] = ns[side, w] " " $3; bop[side, w] = $4; aop[side, w] = $5
	val[$1, side, w] = $3; ws[w] = 1; rs[$1] = 1
}
END {
	for (w in ws) {
		rl = ""
		for (r in rs) if (val[r, "BenchmarkRaw", w] && val[r, "BenchmarkTransport", w]) {
			x = val[r, "BenchmarkRaw", w] / val[r, "BenchmarkTransport", w]
			rl = rl " " x
			printf "round %s %s ratio %.2f\n", r, w, x
		}
		printf "MEDIAN %s raw %d ns/op (%s B/op %s allocs/op), transport %d ns/op (%s B/op %s allocs/op), ratio %.2f\n",
			w, median(ns["BenchmarkRaw", w]), bop["BenchmarkRaw", w], aop["BenchmarkRaw", w],
			median(ns["BenchmarkTransport", w]), bop["BenchmarkTransport", w], aop["BenchmarkTransport", w], median(rl)
	}
}' "$out" | sort
