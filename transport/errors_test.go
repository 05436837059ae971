package transport_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/babelqueue-go/babelqueue/transport"
)

func TestCheckSize(t *testing.T) {
	if err := transport.CheckSize("sqs", "q", 262144, 262144); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if err := transport.CheckSize("redis", "q", 1<<40, 0); err != nil {
		t.Fatalf("no limit: %v", err)
	}
	err := transport.CheckSize("sqs", "orders", 262145, 262144)
	var tl *transport.TooLargeError
	if !errors.Is(err, transport.ErrTooLarge) || !errors.As(err, &tl) || tl.Size != 262145 || tl.Limit != 262144 || tl.Broker != "sqs" {
		t.Fatalf("over the limit: %#v", err)
	}
	if !strings.Contains(err.Error(), "262144") || !strings.Contains(err.Error(), "orders") {
		t.Fatalf("the error does not give the limit and the queue: %v", err)
	}
	wrapped := &transport.SettleWriteError{Queue: "orders.dlq", Err: err}
	if !errors.Is(wrapped, transport.ErrTooLarge) || !errors.Is(wrapped, transport.ErrSettleWrite) {
		t.Fatal("a settle write refused for its size does not match both sentinels")
	}
}

func TestTakenBackError(t *testing.T) {
	lost := errors.New("redis: reservation lapsed")
	err := error(&transport.TakenBackError{Broker: "redis", Queue: "q", Reason: "the reservation lapsed", Err: lost})
	if !errors.Is(err, transport.ErrTakenBack) || !errors.Is(err, transport.ErrAlreadySettled) || !errors.Is(err, lost) {
		t.Fatalf("%v does not match ErrTakenBack, ErrAlreadySettled and the driver's sentinel", err)
	}
	if errors.Is(err, transport.ErrSettleWrite) {
		t.Fatal("a taken-back delivery is not a failed settle write")
	}
}
