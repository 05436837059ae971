package pulsar

import (
	"math/rand/v2"
	"time"

	"github.com/apache/pulsar-client-go/pulsar/backoff"
)

// The reconnection backoff of the transport's consumers and producers doubles from
// minReconnect to maxReconnect. pulsar-client-go's own goes up to 60 s, so after an
// outage of a minute a consumer could stay away for another minute once the broker was
// back; with 2 s it resumes within about 2 s (found by the fault suite, issue 16, with
// a broker restart). A [WithConsumerOptions] or [WithProducerOptions] hook can set
// another policy.
const (
	minReconnect = 100 * time.Millisecond
	maxReconnect = 2 * time.Second
)

// reconnectBackoff implements backoff.Policy: minReconnect doubled at each attempt up
// to maxReconnect, plus up to 20 % jitter.
type reconnectBackoff struct{ d time.Duration }

func newReconnectBackoff() backoff.Policy { return &reconnectBackoff{} }

func (b *reconnectBackoff) Next() time.Duration {
	b.d = min(max(2*b.d, minReconnect), maxReconnect)
	return b.d + time.Duration(rand.Int64N(int64(b.d)/5+1))
}

func (b *reconnectBackoff) IsMaxBackoffReached() bool { return b.d >= maxReconnect }

func (b *reconnectBackoff) Reset() { b.d = 0 }
