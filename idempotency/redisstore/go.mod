module github.com/babelqueue-go/babelqueue/idempotency/redisstore

go 1.26.0

require (
	github.com/babelqueue-go/babelqueue v0.0.0-00010101000000-000000000000
	github.com/babelqueue-go/babelqueue/transport/amqp v0.0.0-00010101000000-000000000000
	github.com/babelqueue-go/babelqueue/transport/redis v0.0.0-00010101000000-000000000000
	github.com/rabbitmq/amqp091-go v1.17.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace (
	github.com/babelqueue-go/babelqueue => ../..
	github.com/babelqueue-go/babelqueue/transport/amqp => ../../transport/amqp
	github.com/babelqueue-go/babelqueue/transport/redis => ../../transport/redis
)
