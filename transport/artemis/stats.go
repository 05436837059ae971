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

// QueueStats asks the broker's management API for the queue's counts: one request
// message per attribute of the queue's QueueControl, sent to activemq.management on the
// transport's connection and answered on a temporary queue, on a session of its own.
// InFlight is deliveringCount (delivered to a consumer, not acknowledged), Delayed
// scheduledCount, Ready messageCount less both (Artemis counts them in its message
// count), Appended messagesAdded (which starts again from zero when the broker
// restarts), and Oldest firstMessageTimestamp, the timestamp of the queue's first
// message (the AMQP creation-time, which the binding sets to meta.created_at; a message
// written without one, such as a raw dead-letter write, has none, and Oldest is then
// unknown).
// The user needs the manage permission on the management address (the default role
// of an Artemis instance has it). A queue that does not exist has Exists false.
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
	var answers [len(statsAttributes)]json.RawMessage
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
		answers[i] = json.RawMessage(body)
	}
	n := func(i int) (int64, error) {
		if len(answers[i]) == 0 {
			return -1, nil // the attribute is null (firstMessageTimestamp of an empty queue)
		}
		var v []*float64
		if err := json.Unmarshal(answers[i], &v); err != nil || len(v) != 1 {
			return 0, fmt.Errorf("artemis: stats %q: %s answered %q", queue, statsAttributes[i], answers[i])
		}
		if v[0] == nil {
			return -1, nil
		}
		return int64(*v[0]), nil
	}
	var count [len(statsAttributes)]int64
	for i := range statsAttributes {
		if count[i], err = n(i); err != nil {
			return s, err
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
