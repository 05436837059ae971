module github.com/babelqueue-go/babelqueue/schema

go 1.26.0

require github.com/babelqueue-go/babelqueue v0.0.0-00010101000000-000000000000

replace github.com/babelqueue-go/babelqueue => ..

require (
	github.com/babelqueue-go/babelqueue/transport/redis v0.0.0-00010101000000-000000000000
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	golang.org/x/text v0.14.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/babelqueue-go/babelqueue/transport/redis => ../transport/redis
