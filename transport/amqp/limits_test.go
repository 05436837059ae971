package amqp

import (
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// A body longer than the broker's max_message_size fails before it is sent, with the
// limit in the error; an oversized settle write acknowledges nothing.
func TestSizeLimit(t *testing.T) {
	cfg := transporttest.Config{NewQueue: func(t *testing.T) string { return newQueue(t) }}
	transporttest.RunSizeLimit(t, cfg, "amqp", func(t *testing.T, limit int) transport.Transport {
		return openT(t, WithMaxMessageSize(limit))
	})
}

func TestOpenerLogsThroughTheAppLogger(t *testing.T) {
	tr, logs := transporttest.OpenWithLogger(t, brokerURL(t))
	tr.(*Transport).log.Warn("probe from the test")
	if !strings.Contains(logs.String(), "probe from the test") {
		t.Fatalf("the transport does not log through the opener's logger; got %q", logs.String())
	}
}
