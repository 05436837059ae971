module github.com/babelqueue-go/babelqueue/transport/artemis

go 1.25.0

require github.com/babelqueue-go/babelqueue v0.0.0-00010101000000-000000000000

replace github.com/babelqueue-go/babelqueue => ../..

require github.com/Azure/go-amqp v1.7.0

require github.com/stretchr/testify v1.12.1 // indirect
