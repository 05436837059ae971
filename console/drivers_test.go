package console_test

// The brokers the tests run the console against register their URL schemes.
import (
	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
	_ "github.com/babelqueue-go/babelqueue/transport/kafka"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
)
