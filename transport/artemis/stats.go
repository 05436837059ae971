package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/babelqueue-go/babelqueue/transport"
)

var _ transport.QueueStatter = (*Transport)(nil)

// managementAddress is the address Artemis takes management requests on
// (management-address in broker.xml; this is its default).
const managementAddress = "activemq.management"

// The attributes of a queue's QueueControl that QueueStats reads, in this order.
var statsAttributes = [...]string{"messageCount", "deliveringCount", "scheduledCount", "messagesAdded", "firstMessageTimestamp"}

// QueueStats asks the broker's management API (activemq.management, answered on a
// temporary queue) for the attributes of the queue's QueueControl: InFlight is
// deliveringCount, Delayed scheduledCount, Ready messageCount less both, Appended
// messagesAdded (from zero again after a broker restart), and Oldest
// firstMessageTimestamp (meta.created_at; unknown for a message written without one).
// The user needs the manage permission on the management address (the default role
// has it). A queue that does not exist has Exists false (docs/transports/artemis.md).
func (t *Transport) QueueStats(ctx context.Context, queue string) (transport.QueueStats, error) {
	s := transport.QueueStats{}
	if queue == "" {
		return s, errors.New("artemis: stats: empty queue name")
	}
	sess, err := t.session(ctx)
	if err != nil {
		return s, err
	}
	defer func() { _ = closeQuietly(sess) }()
	// The answers come pre-settled and both links are closed before the session: a
	// session closed over an unsettled temporary-queue link took Artemis two seconds.
	replies, err := sess.NewReceiver(ctx, "", &amqp.ReceiverOptions{DynamicAddress: true, Credit: int32(len(statsAttributes)),
		RequestedSenderSettleMode: amqp.SenderSettleModeSettled.Ptr()})
	if err != nil {
		return s, fmt.Errorf("artemis: stats %q: attach a temporary queue for the answers: %w", queue, err)
	}
	defer func() { _ = replies.Close(ctx) }()
	requests, err := sess.NewSender(ctx, managementAddress, nil)
	if err != nil {
		return s, fmt.Errorf("artemis: stats %q: attach to %s: %w", queue, managementAddress, err)
	}
	defer func() { _ = requests.Close(ctx) }()
	replyTo := replies.Address()
	for i, attr := range statsAttributes {
		m := &amqp.Message{
			Properties: &amqp.MessageProperties{MessageID: "bq-stats-" + strconv.Itoa(i), ReplyTo: &replyTo},
			ApplicationProperties: map[string]any{
				"_AMQ_ResourceName": "queue." + queue,
				"_AMQ_Attribute":    attr,
			},
			Value: "[]",
		}
		if err := requests.Send(ctx, m, nil); err != nil {
			return s, fmt.Errorf("artemis: stats %q: ask %s: %w", queue, attr, err)
		}
	}
	var count [len(statsAttributes)]int64
	for range statsAttributes {
		m, err := replies.Receive(ctx, nil)
		if err != nil {
			return s, fmt.Errorf("artemis: stats %q: answer: %w", queue, err)
		}
		i := -1
		if m.Properties != nil {
			if id, ok := m.Properties.CorrelationID.(string); ok {
				i, _ = strconv.Atoi(strings.TrimPrefix(id, "bq-stats-"))
			}
		}
		if i < 0 || i >= len(statsAttributes) {
			return s, fmt.Errorf("artemis: stats %q: an answer that is not for a request made (correlation-id %v)", queue, m.Properties)
		}
		body, _ := m.Value.(string)
		if ok, _ := m.ApplicationProperties["_AMQ_OperationSucceeded"].(bool); !ok {
			if strings.Contains(body, "Problem while retrieving attribute") {
				// What the broker answers when it has no QueueControl of that name:
				// the queue does not exist (a denied request says so instead).
				return transport.QueueStats{}, nil
			}
			return s, fmt.Errorf("artemis: stats %q: %s: %s", queue, statsAttributes[i], body)
		}
		var v []*float64 // one number, or null (firstMessageTimestamp of an empty queue)
		switch err := json.Unmarshal([]byte(body), &v); {
		case body == "" || err == nil && len(v) == 1 && v[0] == nil:
			count[i] = -1
		case err != nil || len(v) != 1:
			return s, fmt.Errorf("artemis: stats %q: %s answered %q", queue, statsAttributes[i], body)
		default:
			count[i] = int64(*v[0])
		}
	}
	s.Exists = true
	s.InFlight, s.Delayed, s.Appended = count[1], count[2], count[3]
	s.Ready = max(count[0]-s.InFlight-s.Delayed, 0)
	if ts := count[4]; ts > 0 && s.Ready > 0 {
		s.Oldest = time.UnixMilli(ts)
	}
	return s, nil
}
