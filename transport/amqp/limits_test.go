package amqp

import (
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestOpenerLogsThroughTheAppLogger(t *testing.T) {
	tr, logs := transporttest.OpenWithLogger(t, brokerURL(t))
	tr.(*Transport).log.Warn("probe from the test")
	if !strings.Contains(logs.String(), "probe from the test") {
		t.Fatalf("the transport does not log through the opener's logger; got %q", logs.String())
	}
}
