package servicebus

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/babelqueue-go/babelqueue"
	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// As a new user meets it, with the real SDK: a namespace that is not there makes the
// App fail at start, within connect_timeout, with one error that says so.
func TestRunWithoutNamespaceFailsAtStart(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(brokerproc.FreePort(t))
	cs := "Endpoint=sb://" + addr + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=" + testKey + ";UseDevelopmentEmulator=true"
	tr, err := Open(context.Background(), "sb://?connect_timeout=2s", WithConnectionString(cs))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	a, err := babelqueue.New(tr, babelqueue.WithQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Run without a namespace = %v, want an error matching ErrUnreachable", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run waited for its context instead of failing at start")
	}
	for _, want := range []string{`"orders"`, "connect_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("error echoes the key: %v", err)
	}
}

// Consume says when the queue is missing or the credential may not read it.
func TestConsumeChecksTheQueue(t *testing.T) {
	b := newFakeBroker()
	b.strict = true
	tr := openFake(t, b)
	_, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
	if err == nil || !strings.Contains(err.Error(), `queue "orders" does not exist`) {
		t.Fatalf("Consume of a missing queue = %v", err)
	}
	b.declare("orders")
	b.failPeek = func(context.Context) error { return &azservicebus.Error{Code: azservicebus.CodeUnauthorizedAccess} }
	_, err = tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
	if err == nil || !strings.Contains(err.Error(), "Listen right") {
		t.Fatalf("Consume without the Listen right = %v", err)
	}
	b.failPeek = nil
	c, err := tr.Consume(context.Background(), "orders", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close(context.Background())
}

// Every write is checked against max_message_size (the Standard tier's 256 KB by
// default), counting the body with its properties; a settle write over it acknowledges
// nothing.
func TestSizeLimit(t *testing.T) {
	b := newFakeBroker()
	tr := openFake(t, b)
	ctx := context.Background()
	m := &transport.Message{Queue: "orders", Headers: map[string]string{"h": "v"}, Projection: transport.Projection{URN: "urn:babel:orders:created", MessageID: "m-1"}}
	m.Body = []byte("{}")
	sm, err := Project(m, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	overhead := messageSize(sm) - len(m.Body)

	m.Body = bytes.Repeat([]byte("x"), DefaultMaxMessageSize-overhead+1)
	err = tr.Publish(ctx, m)
	var tl *transport.TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("Publish over the limit = %v, want a *transport.TooLargeError", err)
	}
	if tl.Broker != "servicebus" || tl.Queue != "orders" || tl.Size != DefaultMaxMessageSize+1 || tl.Limit != DefaultMaxMessageSize {
		t.Errorf("TooLargeError = %+v", tl)
	}
	m.Body = m.Body[1:]
	if err := tr.Publish(ctx, m); err != nil {
		t.Fatalf("Publish at the limit: %v", err)
	}

	c, err := tr.Consume(ctx, "orders", transport.ConsumeOptions{Prefetch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	d := transporttest.Receive(t, c, 5*time.Second)
	err = c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack, Writes: []*transport.Message{
		{Queue: "orders.dlq", Body: bytes.Repeat([]byte("z"), DefaultMaxMessageSize+1)},
	}})
	if !errors.Is(err, transport.ErrSettleWrite) || !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("oversized settle write = %v, want ErrSettleWrite and ErrTooLarge", err)
	}
	if w, _ := b.counts("orders.dlq"); w != 0 {
		t.Errorf("the oversized write reached the namespace")
	}
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Rewind}); err != nil {
		t.Fatal(err)
	}
	d = transporttest.Receive(t, c, 5*time.Second)
	if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
		t.Fatal(err)
	}
}

// A Premium entity allows more: max_message_size raises the limit; an entity that allows
// less than max_message_size is caught by the SDK's own check, reported the same way.
func TestSizeLimitFollowsTheEntity(t *testing.T) {
	b := newFakeBroker()
	tr := newTransport(b.client(), newConfig([]Option{WithMaxMessageSize(1 << 20)}))
	ctx := context.Background()
	if err := tr.Publish(ctx, &transport.Message{Queue: "big", Body: bytes.Repeat([]byte("x"), 512<<10)}); err != nil {
		t.Fatalf("512 KiB with max_message_size=1MiB: %v", err)
	}
	b.linkLimit = 256 << 10
	err := tr.Publish(ctx, &transport.Message{Queue: "big", Body: bytes.Repeat([]byte("x"), 512<<10)})
	if !errors.Is(err, transport.ErrTooLarge) || !errors.Is(err, azservicebus.ErrMessageTooLarge) || !strings.Contains(err.Error(), "max_message_size=1048576") {
		t.Fatalf("a message the entity refuses = %v, want ErrTooLarge naming max_message_size", err)
	}
}
