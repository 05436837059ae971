module github.com/babelqueue-go/babelqueue/schema

go 1.26.0

require github.com/babelqueue-go/babelqueue v0.0.0-00010101000000-000000000000

replace github.com/babelqueue-go/babelqueue => ..

require (
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	golang.org/x/text v0.14.0
)

replace github.com/babelqueue-go/babelqueue/transport/redis => ../transport/redis
