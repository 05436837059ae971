#!/usr/bin/env bash
# Release every published module of go.work at one version (README.md, "Modules",
# Releases):
#
#   scripts/release.sh v0.3.0                  dry run: print every module, its tag and
#                                              the changes; tag nothing
#   scripts/release.sh v0.3.0 -dry-run=false   tag, pushing the tags into this repository
#   scripts/release.sh v0.3.0 -v               print every go command too
#
# It works in a scratch clone of the checked-out commit and refuses a dirty work tree,
# a version without a CHANGELOG.md section, and a version that is not a semantic
# version above the last tag. The tool is the module tools/release, which is not in
# go.work: GOWORK=off.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$#" -eq 0 ]; then
  echo "usage: scripts/release.sh vX.Y.Z [-dry-run=false] [-v]" >&2
  exit 2
fi
cd "$repo/tools/release"
GOWORK=off exec go run . release -repo "$repo" "$@"
