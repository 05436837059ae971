module github.com/babelqueue-go/babelqueue/console

go 1.26.0

require (
	github.com/babelqueue-go/babelqueue v0.0.0-00010101000000-000000000000
	github.com/babelqueue-go/babelqueue/transport/amqp v0.0.0-00010101000000-000000000000
	github.com/babelqueue-go/babelqueue/transport/kafka v0.0.0-00010101000000-000000000000
	github.com/babelqueue-go/babelqueue/transport/redis v0.0.0-00010101000000-000000000000
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.24.0
	github.com/rabbitmq/amqp091-go v1.17.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/twmb/franz-go v1.22.3
	github.com/twmb/franz-go/pkg/kadm v1.20.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	github.com/twmb/franz-go/plugin/kslog v1.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace (
	github.com/babelqueue-go/babelqueue => ..
	github.com/babelqueue-go/babelqueue/transport/amqp => ../transport/amqp
	github.com/babelqueue-go/babelqueue/transport/kafka => ../transport/kafka
	github.com/babelqueue-go/babelqueue/transport/redis => ../transport/redis
)
