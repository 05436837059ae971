package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/semaphore"
)

// producerRoom admits the transport's records into the producer's buffer, so that
// franz-go never blocks a Produce for room (it fails every record buffered behind one
// whose context ends): a record waits for room here, where its caller's context can end
// the wait, and gives it back in its delivery promise. The room is an eighth smaller
// than MaxBufferedRecords (franz-go counts a record down after its promise returns).
type producerRoom struct {
	sem *semaphore.Weighted
	max int64 // franz-go's MaxBufferedRecords
}

// newProducerRoom returns the room of cl's buffer, or nil when cl bounds it in bytes too
// (records are then handed over with produceUncancelled).
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
