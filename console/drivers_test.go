package console_test

// The brokers the tests run the console against.
import (
	_ "github.com/babelqueue-go/babelqueue/transport/amqp"
	_ "github.com/babelqueue-go/babelqueue/transport/kafka"
	_ "github.com/babelqueue-go/babelqueue/transport/redis"
)

import (
	_ "github.com/chromedp/cdproto/runtime"
	_ "github.com/chromedp/chromedp"
)
