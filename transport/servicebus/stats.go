package servicebus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// queueAdmin is the part of the administration client (*admin.Client) QueueStats uses.
type queueAdmin interface {
	GetQueueRuntimeProperties(ctx context.Context, queue string, o *admin.GetQueueRuntimePropertiesOptions) (*admin.GetQueueRuntimePropertiesResponse, error)
}

// WithAdminClient sets the administration client ([admin.Client]) that QueueStats
// counts through. [Open] builds one from the same connection string or credential; a
// transport built by [New] counts only with this option.
func WithAdminClient(c *admin.Client) Option {
	return func(cfg *config) {
		if c != nil {
			cfg.admin = c
		}
	}
}

// newAdmin builds the administration client of a transport opened from a URL.
func newAdmin(cfg config, namespace string) (queueAdmin, error) {
	if cfg.connString != "" {
		c, err := admin.NewClientFromConnectionString(cfg.connString, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: administration client: %s", ErrConnectionString, scrubConnString(cfg.connString, err))
		}
		return c, nil
	}
	c, err := admin.NewClient(namespace, cfg.credential, nil)
	if err != nil {
		return nil, fmt.Errorf("servicebus: administration client for %s: %w", namespace, err)
	}
	return c, nil
}

// scrubConnString is err's text without the connection string's secrets.
func scrubConnString(cs string, err error) string {
	pc, perr := parseConnString(cs)
	if perr != nil {
		return "cannot parse it"
	}
	return pc.scrub(err.Error())
}

// oldestPeek bounds the messages QueueStats peeks to find the first active one.
const oldestPeek = 16

// QueueStats reads the queue's runtime properties through the administration client
// (the credential needs the Manage right) and peeks its first message: Ready is
// ActiveMessageCount (locked messages included; InFlight is unknown), Delayed is
// ScheduledMessageCount, Oldest the first active message's EnqueuedTime. Without an
// administration client it returns a [transport.CannotCountError].
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	s := transport.QueueStats{InFlight: transport.UnknownCount, Appended: transport.UnknownCount}
	if queue == "" {
		return s, errors.New("servicebus: stats: empty queue name")
	}
	if t.consumers.Closed() {
		return s, transport.ErrClosed
	}
	if t.cfg.admin == nil {
		return s, &transport.CannotCountError{Transport: "servicebus", Reason: "no administration client (servicebus.WithAdminClient)"}
	}
	resp, err := t.cfg.admin.GetQueueRuntimeProperties(ctx, queue, nil)
	if err != nil {
		return s, fmt.Errorf("servicebus: stats %q: %w", queue, err)
	}
	if resp == nil {
		return s, nil // the SDK's answer for a queue that does not exist
	}
	p := resp.QueueRuntimeProperties
	s.Exists = true
	s.Ready, s.Delayed = int64(p.ActiveMessageCount), int64(p.ScheduledMessageCount)
	if s.Ready > 0 {
		s.Oldest, err = t.firstEnqueued(ctx, queue)
		if err != nil {
			return s, fmt.Errorf("servicebus: stats %q: peek: %w", queue, err)
		}
	}
	return s, nil
}

// firstEnqueued returns the EnqueuedTime of the first active message a peek shows, or zero.
func (t *Transport) firstEnqueued(ctx context.Context, queue string) (time.Time, error) {
	fn, done, err := t.peeker(ctx, queue)
	if err != nil {
		return time.Time{}, err
	}
	defer done()
	msgs, err := fn(ctx, 0, oldestPeek)
	if err != nil {
		return time.Time{}, err
	}
	for _, m := range msgs {
		if m.State == azservicebus.MessageStateActive && m.EnqueuedTime != nil {
			return *m.EnqueuedTime, nil
		}
	}
	return time.Time{}, nil
}
