// babelqueue:unpublished: a benchmark of WithUnmarshal (BENCHMARKS.md), for development only;
// scripts/release.sh neither tags nor publishes it.
module github.com/babelqueue-go/babelqueue/benchmarks/bind

go 1.26.0

require github.com/babelqueue-go/babelqueue v0.0.0-00010101000000-000000000000

require github.com/goccy/go-json v0.12.0

replace github.com/babelqueue-go/babelqueue => ../..
