package artemis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.Browser = (*Transport)(nil)

// browseCredit bounds the messages a browser may have in flight to it at once.
const browseCredit = 1000

// browseQuiet is how long a browse waits for the next message before it takes the
// queue for read to its end: Artemis does not answer a drain on a browser, so nothing
// else says so. browseFirst is the wait for the first message: a broker under load
// (a garbage collection, a busy journal) can take seconds to start a browser, and half
// a second there made a browse of a full queue come back empty (the CLI's kill test,
// at a load average of 10).
const (
	browseQuiet = time.Second
	browseFirst = 5 * time.Second
)

// Browse reads up to limit messages of queue from the place from without consuming
// them: it attaches a browser (an AMQP 1.0 receiver whose source has the distribution
// mode "copy", which Artemis serves as a queue browser), reads from+limit+1 messages
// or until none came for browseQuiet (browseFirst before the first one: the end of the
// queue, as Artemis does not answer a drain on a browser), and detaches. The messages stay on the queue, untouched (no delivery count).
// Messages a consumer holds unacknowledged are not shown. The cursor is a place in the
// queue ([transport.OffsetCursor]); a page far into a long queue reads everything in
// front of it.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	off, err := from.Offset()
	if err != nil {
		return transport.Page{}, err
	}
	if queue == "" {
		return transport.Page{}, errors.New("artemis: browse: empty queue name")
	}
	limit = max(limit, 1)
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
	p := transport.Page{End: len(msgs) <= off+limit}
	for i := off; i < len(msgs) && i < off+limit; i++ {
		d := fromAMQP(queue, msgs[i])
		p.Deliveries = append(p.Deliveries, d)
	}
	p.Next = transport.OffsetCursor(off + len(p.Deliveries))
	return p, nil
}
