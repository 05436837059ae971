package main

// The command speaks to every broker BabelQueue for Go supports: each import
// registers its URL schemes. A program built on the library imports only the
// brokers it uses.
import (
	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
	_ "github.com/babelqueue-go/babelqueue/transport/artemis"
	_ "github.com/babelqueue-go/babelqueue/transport/kafka"
	_ "github.com/babelqueue-go/babelqueue/transport/pulsar"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
	_ "github.com/babelqueue-go/babelqueue/transport/servicebus"
	_ "github.com/babelqueue-go/babelqueue/transport/sqs"
)
