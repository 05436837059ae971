package sqs

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

var _ transport.Browser = (*Transport)(nil)

// A browse hides each message it read, for about twice as long as the walk should take
// at browseRate messages a second, within these bounds; browseRetries bounds the
// receives of a walk that may fail in a row.
const (
	browseRate          = 300
	minBrowseVisibility = 5 * time.Second
	maxBrowseVisibility = 12 * time.Hour
	browseRetries       = 5
)

// Browse reads up to limit messages of a standard queue from the cursor from, in the
// order they were sent, without deleting any. SQS can be read only by receiving, so a
// browse walks the queue, hiding what it read, then makes it all visible again: each
// walk counts one receive of every message (browse dead-letter queues, not busy work
// queues). A FIFO queue cannot be browsed ([transport.ErrCannotPeek]); a queue that does
// not exist is empty.
func (t *Transport) Browse(ctx context.Context, queue string, from transport.Cursor, limit int) (transport.Page, error) {
	after, err := parseSentCursor(from)
	if err != nil {
		return transport.Page{}, err
	}
	if t.consumers.Closed() {
		return transport.Page{}, transport.ErrClosed
	}
	name := t.QueueName(queue)
	if strings.HasSuffix(name, fifoSuffix) {
		return transport.Page{}, &transport.CannotPeekError{Transport: "sqs", Reason: "a FIFO queue holds back the rest of a message group while its head is received, so a browse would miss them"}
	}
	limit = max(limit, 1)
	url, ok, err := t.existingURL(ctx, queue)
	if err != nil || !ok {
		return transport.Page{Next: from, End: true}, err
	}
	all, err := t.walk(ctx, queue, url)
	if err != nil {
		return transport.Page{}, err
	}
	i := sort.Search(len(all), func(i int) bool { return !all[i].pos.lessOrEqual(after) })
	p := transport.Page{Next: from}
	for ; i < len(all) && len(p.Deliveries) < limit; i++ {
		p.Deliveries = append(p.Deliveries, all[i].d)
		p.Next = all[i].pos.cursor()
	}
	p.End = i >= len(all)
	return p, nil
}

// sentPos orders messages by the time they were sent, then by id.
type sentPos struct {
	sent int64
	id   string
}

func (a sentPos) lessOrEqual(b sentPos) bool {
	return a.sent < b.sent || a.sent == b.sent && a.id <= b.id
}

func (a sentPos) cursor() transport.Cursor {
	return transport.Cursor(strconv.FormatInt(a.sent, 10) + "/" + a.id)
}

func parseSentCursor(c transport.Cursor) (sentPos, error) {
	if c == "" {
		return sentPos{sent: -1}, nil
	}
	ts, id, ok := strings.Cut(string(c), "/")
	n, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || n < 0 || id == "" {
		return sentPos{}, &transport.BadCursorError{Cursor: c, Reason: "want <sent ms>/<message id>"}
	}
	return sentPos{sent: n, id: id}, nil
}

type walked struct {
	pos sentPos
	d   *transport.Delivery
}

// walk receives every message of the queue once, hidden while the walk lasts, and
// makes them visible again; the result is in sent order.
func (t *Transport) walk(ctx context.Context, queue, url string) ([]walked, error) {
	seen := map[string]bool{}
	var out []walked
	receipts := map[string]string{} // message id → its latest receipt handle
	defer func() { t.reveal(context.WithoutCancel(ctx), queue, url, receipts) }()
	vis, err := t.browseVisibility(ctx, url)
	if err != nil && isMissingQueue(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqs: browse %q: %w", queue, err)
	}
	// A receive whose answer was lost may have hidden messages: the walk waits for them.
	var lostAt time.Time
	failures, start := 0, time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		round := time.Now()
		res, err := t.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         maxBatch,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           int32((vis + time.Second - 1) / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameSentTimestamp},
		}, func(o *awssqs.Options) { o.RetryMaxAttempts = 1 }) // a retry would hide a lost batch silently
		if err != nil && isMissingQueue(err) && len(out) == 0 {
			return nil, nil
		}
		if err != nil {
			if failures++; failures > browseRetries || ctx.Err() != nil {
				return nil, fmt.Errorf("sqs: browse %q: %w", queue, err)
			}
			lostAt = time.Now()
			t.common.Logger.Debug("sqs: a receive of a browse failed; its messages, if any, are waited for", "queue", queue, "back_in", vis, "error", err)
			_ = driverkit.Sleep(ctx, time.Duration(failures)*100*time.Millisecond) // the loop ends with ctx
			continue
		}
		if res == nil { // the SDK's client never answers nothing; a stand-in may
			res = &awssqs.ReceiveMessageOutput{}
		}
		failures = 0
		fresh := 0
		for i := range res.Messages {
			m := &res.Messages[i]
			id := aws.ToString(m.MessageId)
			if m.ReceiptHandle != nil {
				receipts[id] = *m.ReceiptHandle
			}
			if seen[id] {
				continue
			}
			seen[id] = true
			fresh++
			d := &transport.Delivery{Queue: queue}
			readDelivery(d, m)
			sent, _ := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
			out = append(out, walked{pos: sentPos{sent: sent, id: id}, d: d})
		}
		if lostAt.IsZero() {
			// Nothing new: the queue is read (or what is left came round again).
			if fresh == 0 {
				break
			}
			continue
		}
		// A lost receive's messages come back once its visibility lapses: only an empty
		// receive after that says the queue is read.
		back := lostAt.Add(vis + 2*time.Second)
		if len(res.Messages) == 0 && round.After(back) {
			break
		}
		if time.Since(start) > 4*vis+time.Minute {
			return nil, fmt.Errorf("sqs: browse %q: the queue could not be read whole within %s", queue, time.Since(start).Round(time.Second))
		}
		if len(res.Messages) == 0 {
			if err := driverkit.Sleep(ctx, min(time.Until(back), time.Second)); err != nil {
				return nil, err
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pos.lessOrEqual(out[j].pos) && out[i].pos != out[j].pos })
	return out, nil
}

// browseVisibility is how long a walk hides what it read, from the queue's size.
func (t *Transport) browseVisibility(ctx context.Context, url string) (time.Duration, error) {
	n, err := t.queueNumbers(ctx, url, types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)
	if err != nil {
		return 0, err
	}
	vis := 2*time.Duration(max(n[0], 0)+max(n[1], 0))*time.Second/browseRate + minBrowseVisibility
	return min(vis, maxBrowseVisibility), nil
}

// reveal makes the messages of receipts visible again, ten at a time, each call tried
// up to three times (making a message visible twice does no harm).
func (t *Transport) reveal(ctx context.Context, queue, url string, byID map[string]string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for batch := range slices.Chunk(slices.Collect(maps.Values(byID)), maxBatch) {
		tries := 0
		err := driverkit.Backoff{Min: 100 * time.Millisecond, Max: time.Second}.Retry(ctx,
			func(error) bool { tries++; return tries < 3 },
			func() error { return t.setVisibility(ctx, url, batch, 0, nil) })
		if err != nil {
			t.common.Logger.Warn("sqs: a browse could not make messages visible again; they return when their visibility timeout lapses", "queue", queue, "count", len(batch), "error", err)
		}
	}
}

// existingURL returns the URL of queue without creating it; ok is false when the
// queue does not exist.
func (t *Transport) existingURL(ctx context.Context, queue string) (string, bool, error) {
	u, err := t.lookup(ctx, queue, false)
	if isMissingQueue(err) {
		return "", false, nil
	}
	return u, err == nil, err
}
