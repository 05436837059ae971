package pulsar

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pc "github.com/apache/pulsar-client-go/pulsar"
)

// ackRecorder is a Pulsar consumer that records the acknowledgement requests it is
// sent; each request waits until the test lets it answer.
type ackRecorder struct {
	pc.Consumer
	mu       sync.Mutex
	requests [][]pc.MessageID
	answer   chan error // each request takes its answer from here
}

func (r *ackRecorder) AckID(id pc.MessageID) error { return r.AckIDList([]pc.MessageID{id}) }

func (r *ackRecorder) AckIDList(ids []pc.MessageID) error {
	r.mu.Lock()
	r.requests = append(r.requests, append([]pc.MessageID(nil), ids...))
	r.mu.Unlock()
	return <-r.answer
}

func (r *ackRecorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, q := range r.requests {
		out = append(out, len(q))
	}
	return out
}

// The acknowledgements made while a request is on its way go together in the next one,
// and each caller learns its own outcome: a request's error, or the one the broker gave
// its message alone.
func TestAckerGroupsAcknowledgements(t *testing.T) {
	rec := &ackRecorder{answer: make(chan error)}
	c := &consumer{pc: rec}
	c.acks.Send = c.ackIDs
	a := &c.acks
	ctx, cancelAll := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelAll()
	answer := func(err error) {
		t.Helper()
		select {
		case rec.answer <- err:
		case <-ctx.Done():
			t.Fatalf("no request to answer with %v; requests so far: %v", err, rec.sizes())
		}
	}
	ids := make([]pc.MessageID, 11)
	for i := range ids {
		ids[i] = pc.NewMessageID(7, int64(i), -1, 0)
	}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	ack := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.Do(ctx, ids[i])
		}()
	}
	ack(0)
	for len(rec.sizes()) == 0 && ctx.Err() == nil { // the first request is on its way
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < len(ids); i++ {
		ack(i)
	}
	time.Sleep(50 * time.Millisecond) // let the ten queue behind the first request
	refused := errors.New("refused by the broker")
	answer(nil)
	answer(pc.AckError{ids[3]: refused})
	wg.Wait()
	if got := rec.sizes(); len(got) != 2 || got[0] != 1 || got[1] != 10 {
		t.Fatalf("requests of %v acknowledgements, want 1 then the 10 made meanwhile in one", got)
	}
	for i, err := range errs {
		if want := error(nil); i == 3 && !errors.Is(err, refused) || i != 3 && err != want {
			t.Errorf("ack %d = %v", i, err)
		}
	}

	// A request that fails as a whole fails each of its acknowledgements; a caller
	// whose context ends stops waiting.
	gone := errors.New("connection closed")
	go func() { rec.answer <- gone }()
	if err := a.Do(ctx, ids[0]); !errors.Is(err, gone) {
		t.Errorf("ack of a failed request = %v, want %v", err, gone)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := a.Do(short, ids[1]); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ack whose context ended = %v, want DeadlineExceeded", err)
	}
	answer(nil) // the request still goes out; the sender is left idle
}
