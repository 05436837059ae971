package babelqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/memory"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

func TestRedriveMovesEnvelopesBackAndKeepsPoison(t *testing.T) {
	tr := memory.New()
	h := newHarness(t, tr, babelqueue.WithDeadLetter(true), babelqueue.WithMaxAttempts(1))
	h.app.Handle("urn:babel:orders:created", func(context.Context, *babelqueue.Message) error { return errors.New("down") })
	h.inject(good, memory.Stored{Key: []byte{}, Headers: map[string]string{"traceparent": "tp"}})
	h.inject(`not json`, memory.Stored{})
	h.run()
	h.waitQueue("orders.dlq", 2)
	h.stop()

	res, err := h.app.Redrive(context.Background(), 0, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || res.Kept != 1 {
		t.Fatalf("Redrive = %+v, want 1 moved and 1 kept", res)
	}
	back := tr.Messages("orders")
	if len(back) != 1 {
		t.Fatalf("orders holds %d after redrive", len(back))
	}
	if string(back[0].Body) != good {
		t.Errorf("redriven body is not the original:\n got %s\nwant %s", back[0].Body, good)
	}
	if back[0].Key == nil || len(back[0].Key) != 0 || back[0].Headers["traceparent"] != "tp" {
		t.Errorf("redrive lost the key or headers: %#v %v", back[0].Key, back[0].Headers)
	}
	left := tr.Messages("orders.dlq")
	if len(left) != 1 || !strings.Contains(string(left[0].Body), `"raw":"not json"`) {
		t.Errorf("the wrapped poison body should stay on the DLQ: %v", bodies(left))
	}
}

func TestRedriveFailedWriteLosesNothing(t *testing.T) {
	tr := memory.New()
	dead := strings.TrimSuffix(good, "}") + `,"dead_letter":{"reason":"failed","original_queue":"orders","attempts":3}}`
	tr.Inject("orders.dlq", memory.Stored{Body: []byte(dead)})
	tr.FailWrites(func(m *transport.Message) error { return errors.New("orders unavailable") })
	a, err := babelqueue.New(tr, babelqueue.WithQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Redrive(context.Background(), 0, 100*time.Millisecond); !errors.Is(err, transport.ErrSettleWrite) {
		t.Fatalf("Redrive with a failing write = %v, want ErrSettleWrite", err)
	}
	if got := tr.Messages("orders.dlq"); len(got) != 1 || string(got[0].Body) != dead {
		t.Fatalf("the dead letter was not kept after a failed redrive: %v", bodies(got))
	}
}

// A Redrive stopped (SIGTERM) while its settlement waits on a silent connection
// returns within the shutdown grace, its settlement and its consumer's Close
// abandoned, though the settle timeout is far longer (issue 38). The dead letter stays
// where it was.
func TestRedriveStopsWithinGraceOnSilentConnection(t *testing.T) {
	tr := memory.New()
	dead := strings.TrimSuffix(good, "}") + `,"dead_letter":{"reason":"failed","original_queue":"orders","attempts":3}}`
	tr.Inject("orders.dlq", memory.Stored{Body: []byte(dead)})
	a, err := babelqueue.New(transporttest.SilentSettles(tr), babelqueue.WithQueue("orders"),
		babelqueue.WithShutdownGrace(300*time.Millisecond), babelqueue.WithSettleTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.Redrive(ctx, 0, time.Minute)
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the message is received, its settlement waits
	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Redrive returned nil though its settlement was abandoned")
		}
		t.Logf("Redrive returned %s after its context ended (grace 300 ms): %v", time.Since(stopped).Round(10*time.Millisecond), err)
	case <-time.After(10 * time.Second): // a hang guard: the grace is 300 ms, the settle timeout an hour
		t.Fatal("Redrive still waits on its silent settlement 10 s after its context ended")
	}
	if got := tr.Messages("orders.dlq"); len(got) != 1 {
		t.Errorf("the dead letter left the dead-letter queue though its redrive was abandoned: %v", bodies(got))
	}
}
