#!/usr/bin/env bash
# Fails when shipped code of one module imports another module's internal/ packages.
#
# Go allows such an import by path (the importer sits under internal's parent), but once
# the modules are tagged apart, a module built against one version's internal/ package
# breaks when a user's build selects another version of the module that holds it.
# "Shipped" is what a user's build compiles: the non-test files of every module that go.work
# lists, except the modules that are never published (benchmarks/, faults/). Test files
# may use the root's test harnesses (internal/pyinterop, internal/brokerproc, ...).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Every package of the workspace with its module: "import/path module/path".
owners="$(go list -f '{{.ImportPath}} {{.Module.Path}}' $(go list -m -f '{{.Dir}}/...' | sed "s#^$PWD#.#"))"
# Every non-test import edge of a published module: "importer importer-module imported".
edges="$(go list -f '{{$m := .Module.Path}}{{$p := .ImportPath}}{{range .Imports}}{{$p}} {{$m}} {{.}}
{{end}}' $(go list -m -f '{{.Dir}}/...' | sed "s#^$PWD#.#" | grep -v -e '^\./benchmarks/' -e '^\./faults/'))"

bad="$(awk 'NR == FNR { mod[$1] = $2; next }
  $3 ~ /(^|\/)internal(\/|$)/ && ($3 in mod) && mod[$3] != $2 {
    printf "  %s (module %s) imports %s (module %s)\n", $1, $2, $3, mod[$3]
  }' <(printf '%s\n' "$owners") <(printf '%s\n' "$edges"))"
if [ -n "$bad" ]; then
  echo "shipped code imports another module's internal/ packages:" >&2
  printf '%s\n' "$bad" >&2
  exit 1
fi
echo "no shipped code imports another module's internal/ packages"
