package artemis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.Browser = (*Transport)(nil)

// browseCredit bounds the messages a browser may have in flight to it at once.
const browseCredit = 1000

// browseQuiet is how long a browse waits for the next message before it takes the
// queue for read to its end (Artemis does not answer a drain on a browser);
// browseFirst is the wait for the first one: a broker under load can take seconds to
// start a browser (half a second made a full queue's browse come back empty).
const (
	browseQuiet = time.Second
	browseFirst = 5 * time.Second
)

// Browse reads up to limit messages of queue from the place from without consuming
// them: it attaches a browser (a receiver whose source has the distribution mode
// "copy"), reads from+limit+1 messages or until none came for browseQuiet, and
// detaches. The messages stay on the queue, untouched (no delivery count); those a
// consumer holds unacknowledged are not shown. The cursor is a place in the queue
// ([transport.OffsetCursor]): a page far into a long queue reads everything in front.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	off, limit, err := driverkit.OffsetBrowse("artemis", queue, from, limit)
	if err != nil {
		return transport.Page{}, err
	}
	want := off + limit + 1
	if want > math.MaxInt32 {
		return transport.Page{}, &transport.BadCursorError{Cursor: from, Reason: "too far into the queue"}
	}
	sess, err := t.session(ctx)
	if err != nil {
		return transport.Page{}, err
	}
	defer func() { _ = closeQuietly(sess) }()
	r, err := sess.NewReceiver(ctx, queue, &amqp.ReceiverOptions{
		Credit:                    int32(min(want, browseCredit)),
		SourceCapabilities:        []string{capabilityQueue},
		SourceDistributionMode:    amqp.SourceDistributionModeCopy,
		RequestedSenderSettleMode: amqp.SenderSettleModeSettled.Ptr(),
	})
	if err != nil {
		return transport.Page{}, fmt.Errorf("artemis: browse %q: attach browser: %w", queue, err)
	}
	var msgs []*amqp.Message
	for len(msgs) < want {
		wait := browseQuiet
		if len(msgs) == 0 {
			wait = browseFirst
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		m, err := r.Receive(rctx, nil)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return transport.Page{}, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				break // the browser has nothing more to send
			}
			return transport.Page{}, fmt.Errorf("artemis: browse %q: %w", queue, err)
		}
		msgs = append(msgs, m)
	}
	return driverkit.OffsetPage(off, limit, msgs, func(m *amqp.Message) *transport.Delivery { return fromAMQP(queue, m) }), nil
}
