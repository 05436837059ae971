package driverkit_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
	"github.com/babelqueue-go/babelqueue/transporttest"
)

// ackSender records the sends of a DeferredAcks and answers them with ok (true for
// every message when nil) or err.
type ackSender struct {
	mu    sync.Mutex
	sends [][]int
	ok    []bool
	err   error
}

func (s *ackSender) send(_ context.Context, ms []int) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sends = append(s.sends, slices.Clone(ms))
	if s.err != nil {
		return nil, s.err
	}
	if s.ok != nil {
		return s.ok, nil
	}
	ok := make([]bool, len(ms))
	for i := range ok {
		ok[i] = true
	}
	return ok, nil
}

func (s *ackSender) sent() [][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sends)
}

func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
	}
}

// The acknowledgements added within the linger go in one send when no receive request
// takes them first.
func TestDeferredAcksLingerSendsThemTogether(t *testing.T) {
	var s ackSender
	d := driverkit.NewDeferredAcks(20*time.Millisecond, slog.Default(), "x", "q", s.send)
	if !d.Add(1) || !d.Add(2) || !d.Waiting() {
		t.Fatal("Add refused, or nothing waits after it")
	}
	eventuallyTrue(t, "the linger's send", func() bool { return len(s.sent()) == 1 })
	if got := s.sent(); !slices.Equal(got[0], []int{1, 2}) || d.Waiting() {
		t.Fatalf("sends = %v, waiting %v; want [[1 2]] and nothing waiting", got, d.Waiting())
	}
}

// A receive request takes what waits (the linger then sends nothing); a failed send puts
// them back to go again after the linger; a refused acknowledgement is logged.
func TestDeferredAcksTakeSentAndRetry(t *testing.T) {
	var s ackSender
	var logs transporttest.LogBuffer
	d := driverkit.NewDeferredAcks(20*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)), "x", "q", s.send)
	d.Add(1)
	d.Add(2)
	if got := d.Take(); !slices.Equal(got, []int{1, 2}) || d.Waiting() {
		t.Fatalf("Take = %v (waiting %v), want [1 2] and nothing left", got, d.Waiting())
	}
	time.Sleep(100 * time.Millisecond)
	if got := s.sent(); len(got) != 0 {
		t.Fatalf("the linger sent what a receive request took: %v", got)
	}
	d.Sent([]int{1, 2}, nil, errors.New("connection lost"))
	if !d.Waiting() || !strings.Contains(logs.String(), "sending deferred acks failed") {
		t.Fatalf("a failed send: waiting %v, log %q; want them back and a warning", d.Waiting(), logs.String())
	}
	eventuallyTrue(t, "the send after a failure", func() bool { return len(s.sent()) == 1 })
	if got := s.sent()[0]; !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("sent again %v, want [1 2]", got)
	}
	d.Sent([]int{3, 4}, []bool{true, false}, nil)
	if !strings.Contains(logs.String(), "lapsed before its deferred ack") || !strings.Contains(logs.String(), "acks=1") {
		t.Fatalf("a refused acknowledgement is not logged: %q", logs.String())
	}
}

// Close sends what is left and returns its failure; Add refuses from then on; a nil
// DeferredAcks defers nothing.
func TestDeferredAcksClose(t *testing.T) {
	var s ackSender
	d := driverkit.NewDeferredAcks(time.Hour, slog.Default(), "x", "q", s.send)
	d.Add(7)
	if err := d.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.sent(); len(got) != 1 || !slices.Equal(got[0], []int{7}) {
		t.Fatalf("Close sent %v, want [[7]]", got)
	}
	if d.Add(8) || d.Waiting() {
		t.Fatal("Add after Close deferred an acknowledgement")
	}

	failing := &ackSender{err: errors.New("down")}
	d = driverkit.NewDeferredAcks(time.Hour, slog.Default(), "x", "q", failing.send)
	d.Add(1)
	if err := d.Close(context.Background()); !errors.Is(err, failing.err) || !strings.Contains(err.Error(), "1 deferred ack(s)") {
		t.Fatalf("Close with a failing send = %v, want its error", err)
	}
	if d.Waiting() {
		t.Fatal("a closed DeferredAcks keeps acknowledgements to retry")
	}

	var none *driverkit.DeferredAcks[int]
	if none.Add(1) || none.Waiting() || none.Take() != nil || none.Flush(context.Background()) != nil || none.Close(context.Background()) != nil {
		t.Fatal("a nil DeferredAcks deferred something")
	}
}
