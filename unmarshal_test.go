package babelqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport/memory"
)

// WithUnmarshal's function binds the data of typed handlers and Message.Bind, and is
// given exactly the data member; a failure of it fails the delivery with its error,
// which is then retried and dead-lettered as any handler failure.
func TestWithUnmarshalBindsTypedHandlersAndMessageBind(t *testing.T) {
	errRefused := errors.New("refused by the custom decoder")
	var (
		seen  atomic.Value // the last data the function was given
		calls atomic.Int32
	)
	unmarshal := func(data []byte, v any) error {
		calls.Add(1)
		seen.Store(string(data))
		if strings.Contains(string(data), `"refuse":true`) {
			return errRefused
		}
		return json.Unmarshal(data, v)
	}
	h := newHarness(t, memory.New(), babelqueue.WithUnmarshal(unmarshal), babelqueue.WithMaxAttempts(2), babelqueue.WithDeadLetter(true))
	type order struct {
		OrderID int `json:"order_id"`
	}
	got := make(chan int, 4)
	babelqueue.Handle(h.app, "urn:babel:orders:created", func(_ context.Context, o order, m *babelqueue.Message) error {
		var again order
		if err := m.Bind(&again); err != nil || again != o {
			t.Errorf("Message.Bind = %+v, %v; want %+v", again, err, o)
		}
		got <- o.OrderID
		return nil
	})
	h.inject(good, memory.Stored{})
	refused := strings.Replace(good, `"order_id":1042`, `"order_id":7,"refuse":true`, 1)
	h.inject(refused, memory.Stored{})
	h.run()
	dead := h.waitQueue("orders.dlq", 1)
	h.settled()
	h.stop()

	if id := <-got; id != 1042 {
		t.Errorf("typed handler got order %d, want 1042", id)
	}
	if len(got) != 0 {
		t.Errorf("the handler ran for the refused body too")
	}
	// 1042: the typed bind and Message.Bind; the refused body: one bind per attempt.
	if n := calls.Load(); n != 4 {
		t.Errorf("the custom decoder ran %d times, want 4", n)
	}
	if s, _ := seen.Load().(string); !strings.HasPrefix(s, `{"order_id":7,"refuse":true`) {
		t.Errorf("the decoder was given %q, want the data member", s)
	}
	if body := string(dead[0].Body); !strings.Contains(body, errRefused.Error()) {
		t.Errorf("dead letter does not carry the decoder's error: %s", body)
	}
}
