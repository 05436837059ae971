package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/semaphore"
)

// producerRoom admits the transport's records into the producer's buffer, so that
// franz-go never has to block a Produce for room: a record admitted is handed over
// with a context that never ends (franz-go fails every record buffered behind one whose
// context ends, and those include other callers' records), and a record that must wait
// for room waits here, where the caller's context can end the wait. Every record
// admitted gives its room back in its delivery promise.
//
// franz-go counts its buffered records down just after a record's promise returns, so
// the room here is a little smaller than its MaxBufferedRecords (by an eighth) and a
// record admitted never finds that buffer full. Records produced on the same client
// outside the transport (a client passed to [New] that is used elsewhere too) are not
// counted; each admission of several records checks franz-go's own count as well.
type producerRoom struct {
	sem *semaphore.Weighted
	max int64 // franz-go's MaxBufferedRecords
}

// newProducerRoom returns the room of cl's buffer, or nil when cl bounds its buffer in
// bytes too (MaxBufferedBytes): records are then handed over one at a time with a
// context that ends with the caller's while franz-go blocks (produceUncancelled).
func newProducerRoom(cl *kgo.Client) *producerRoom {
	if cl == nil {
		return nil
	}
	if b, _ := cl.OptValue(kgo.MaxBufferedBytes).(int64); b > 0 {
		return nil
	}
	maxRecs, _ := cl.OptValue(kgo.MaxBufferedRecords).(int64)
	if maxRecs < 1 {
		return nil
	}
	return &producerRoom{sem: semaphore.NewWeighted(max(maxRecs-maxRecs/8, 1)), max: maxRecs}
}

// take admits n records of a batch produced on cl at once, without waiting; false when
// there is no room for all of them now (or no room is kept).
func (p *producerRoom) take(cl *kgo.Client, n int) bool {
	if p == nil || !p.sem.TryAcquire(int64(n)) {
		return false
	}
	if n > 1 && cl.BufferedProduceRecords()+int64(n) > p.max {
		p.sem.Release(int64(n)) // records produced outside the transport fill it
		return false
	}
	return true
}

// wait admits one record, waiting for room until ctx ends.
func (p *producerRoom) wait(ctx context.Context) error {
	return p.sem.Acquire(ctx, 1)
}

// free gives back the room of one record admitted; it is called from the record's
// delivery promise. nil-safe.
func (p *producerRoom) free() {
	if p != nil {
		p.sem.Release(1)
	}
}
