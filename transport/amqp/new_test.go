package amqp

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
)

// TestNewAroundUserConnection: a transport built around the caller's connection works,
// leaves that connection open on Close, stops with a clear error when the connection
// dies without a redial function, and carries on with one.
func TestNewAroundUserConnection(t *testing.T) {
	ctx := ctxT(t)
	q := newQueue(t)
	conn := rawConn(t)
	tr, err := New(conn, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if conn.IsClosed() {
		t.Fatal("Close closed the caller's connection")
	}
	if err := tr.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}

	// Without a redial function, a lost connection is an error, not a hang.
	own, err := amqp091.Dial(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tr2, err := New(own, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	_ = own.Close()
	if err := tr2.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{}`)}); err == nil {
		t.Error("Publish on a dead connection without redial succeeded")
	}
	_ = tr2.Close(ctx)

	// With one, the transport replaces the connection.
	first, err := amqp091.Dial(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	redials := 0
	var latest *amqp091.Connection
	tr3, err := New(first, WithLogger(testLogger(t)), WithRedial(func(context.Context) (*amqp091.Connection, error) {
		redials++
		c, err := amqp091.Dial(brokerURL(t))
		latest = c
		return c, err
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = tr3.Close(ctx)
		if latest != nil {
			_ = latest.Close()
		}
	}()
	_ = first.Close()
	if err := tr3.Publish(ctx, &transport.Message{Queue: q, Body: []byte(`{"n":2}`)}); err != nil {
		t.Fatalf("Publish after the connection was replaced: %v", err)
	}
	if redials != 1 {
		t.Errorf("redial called %d times, want 1", redials)
	}
	c, err := tr3.Consume(ctx, q, transport.ConsumeOptions{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, want := range []string{`{"n":1}`, `{"n":2}`} {
		d := receive(t, c, 30*time.Second)
		if string(d.Body) != want {
			t.Errorf("body %q, want %q", d.Body, want)
		}
		if err := c.Settle(ctx, d, transport.Settlement{Outcome: transport.Ack}); err != nil {
			t.Fatal(err)
		}
	}
}
