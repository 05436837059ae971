package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordBatchOverhead is the size of a record batch (magic 2) without its records.
const recordBatchOverhead = 8 + 4 + 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4

// batchSize is the size of a record batch holding r alone, uncompressed: what franz-go
// holds against ProducerBatchMaxBytes, and at least what the broker holds against
// message.max.bytes.
func batchSize(r *kgo.Record) int {
	n := 1 + 1 + 1 // attributes, timestamp delta, offset delta (each zero)
	n += bytesLen(r.Key) + bytesLen(r.Value)
	n += varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	return recordBatchOverhead + varintLen(int64(n)) + n
}

// bytesLen is the size of a nullable byte field of a record: its varint length (-1 for
// null) and the bytes.
func bytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the size of n as a zig-zag varint.
func varintLen(n int64) int {
	u := uint64(n<<1) ^ uint64(n>>63)
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}

// producerLimit is the largest record batch cl produces (ProducerBatchMaxBytes,
// 1,000,012 bytes unless configured).
func producerLimit(cl *kgo.Client) int {
	if cl == nil {
		return defaultBatchMax
	}
	if v, ok := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32); ok && v > 0 {
		return int(v)
	}
	return defaultBatchMax
}

// defaultBatchMax is franz-go's default ProducerBatchMaxBytes.
const defaultBatchMax = 1000012

// loadLimit lowers the transport's record limit to the broker's message.max.bytes when
// that is lower than the producer's own limit.
func (t *Transport) loadLimit(ctx context.Context) error {
	adm := kadm.NewClient(t.prod) // never closed: closing it would close the producer
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		return err
	}
	if len(brokers) == 0 {
		return errors.New("the cluster lists no broker")
	}
	// Without a broker id, DescribeConfigs answers for the cluster-wide dynamic
	// defaults only, which leave out a static message.max.bytes.
	rcs, err := adm.DescribeBrokerConfigs(ctx, brokers.NodeIDs()...)
	if err != nil {
		return err
	}
	found := false
	for _, rc := range rcs {
		if rc.Err != nil {
			return rc.Err
		}
		for _, c := range rc.Configs {
			if c.Key != "message.max.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.Atoi(*c.Value)
			if err != nil || n <= 0 {
				return fmt.Errorf("broker %s reports message.max.bytes=%q", rc.Name, *c.Value)
			}
			t.lowerLimit(n)
			found = true
		}
	}
	if !found {
		return errors.New("no broker reported message.max.bytes")
	}
	return nil
}

// lowerLimit sets the record limit to n unless it is lower already.
func (t *Transport) lowerLimit(n int) {
	for {
		cur := t.limit.Load()
		if cur > 0 && int64(n) >= cur || t.limit.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// MaxRecordBytes returns the largest record batch the transport produces: the lower of
// the producer's ProducerBatchMaxBytes and the brokers' message.max.bytes (once read).
func (t *Transport) MaxRecordBytes() int { return int(t.limit.Load()) }
