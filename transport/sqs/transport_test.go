package sqs

import (
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestTransportKit(t *testing.T) {
	transporttest.Run(t, transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			return openTest(t, WithWaitTime(time.Second))
		},
		TextBodiesOnly:     true,
		NativeRedeliveries: true,
		ReceiveTimeout:     20 * time.Second,
	})
}

func TestRuntimeSettlement(t *testing.T) {
	transporttest.RunRuntime(t, transporttest.Config{
		Open: func(t *testing.T) transport.Transport {
			return openTest(t)
		},
		TextBodiesOnly:     true,
		NativeRedeliveries: true,
		ReceiveTimeout:     20 * time.Second,
	})
}
