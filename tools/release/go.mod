// babelqueue:unpublished: the release tooling (scripts/release.sh and the install and
// API checks of make test). It is never tagged: it is not in go.work and its
// dependencies (golang.org/x/mod, golang.org/x/exp/apidiff, golang.org/x/tools) never
// reach a module that users install.
module github.com/babelqueue-go/babelqueue/tools/release

go 1.26.0

require (
	golang.org/x/exp v0.0.0-20261120182113-8801fbdfac81
	golang.org/x/mod v0.43.0
)

require (
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/tools v0.53.0
)
