package transporttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue"
)

// Recorder is a [babelqueue.Observer] that keeps every event, for tests that assert what
// the runtime did through the observer rather than through log text. It is safe for
// concurrent use.
type Recorder struct {
	mu            sync.Mutex
	changed       chan struct{}
	Received      []babelqueue.DeliveryInfo
	Handled       []babelqueue.HandledEvent
	Settled       []babelqueue.SettledEvent
	Published     []babelqueue.PublishedEvent
	ReceiveErrors []babelqueue.ReceiveErrorEvent
	SettleFailed  []babelqueue.SettleFailedEvent
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{changed: make(chan struct{})} }

func (r *Recorder) record(f func()) {
	r.mu.Lock()
	f()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// OnReceive implements [babelqueue.ReceiveHook].
func (r *Recorder) OnReceive(_ context.Context, d babelqueue.DeliveryInfo) {
	r.record(func() { r.Received = append(r.Received, d) })
}

// OnHandled implements [babelqueue.HandleHook].
func (r *Recorder) OnHandled(_ context.Context, e babelqueue.HandledEvent) {
	r.record(func() { r.Handled = append(r.Handled, e) })
}

// OnSettled implements [babelqueue.SettleHook].
func (r *Recorder) OnSettled(_ context.Context, e babelqueue.SettledEvent) {
	r.record(func() { r.Settled = append(r.Settled, e) })
}

// OnPublished implements [babelqueue.PublishHook].
func (r *Recorder) OnPublished(_ context.Context, e babelqueue.PublishedEvent) {
	r.record(func() { r.Published = append(r.Published, e) })
}

// OnReceiveError implements [babelqueue.ReceiveErrorHook].
func (r *Recorder) OnReceiveError(_ context.Context, e babelqueue.ReceiveErrorEvent) {
	r.record(func() { r.ReceiveErrors = append(r.ReceiveErrors, e) })
}

// OnSettleFailed implements [babelqueue.SettleFailedHook].
func (r *Recorder) OnSettleFailed(_ context.Context, e babelqueue.SettleFailedEvent) {
	r.record(func() { r.SettleFailed = append(r.SettleFailed, e) })
}

// SettleFailedEvents returns a copy of the late settle failures seen so far.
func (r *Recorder) SettleFailedEvents() []babelqueue.SettleFailedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]babelqueue.SettleFailedEvent(nil), r.SettleFailed...)
}

// SettledEvents returns a copy of the settlements seen so far.
func (r *Recorder) SettledEvents() []babelqueue.SettledEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]babelqueue.SettledEvent(nil), r.Settled...)
}

// WaitSettled waits until at least n settlements were seen and returns them; it fails
// the test after timeout.
func (r *Recorder) WaitSettled(t testing.TB, n int, timeout time.Duration) []babelqueue.SettledEvent {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got, changed := len(r.Settled), r.changed
		if got >= n {
			out := append([]babelqueue.SettledEvent(nil), r.Settled...)
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("saw %d settlements in %s, want %d", got, timeout, n)
			return nil
		}
	}
}
