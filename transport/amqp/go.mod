module github.com/babelqueue-go/babelqueue/transport/amqp

go 1.24.0

require github.com/babelqueue-go/babelqueue v0.0.0-00010101000000-000000000000

replace github.com/babelqueue-go/babelqueue => ../..

require github.com/rabbitmq/amqp091-go v1.17.0
