package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// MaxDelay is the longest per-message delay SQS accepts (DelaySeconds 900).
const MaxDelay = 15 * time.Minute

// DefaultGroupID is the MessageGroupId of a FIFO write with no group id and no key.
const DefaultGroupID = "babelqueue"

// fifoSuffix ends the name of every SQS FIFO queue.
const fifoSuffix = ".fifo"

// api is the part of the SQS client the transport uses.
type api interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
	ListQueues(ctx context.Context, in *awssqs.ListQueuesInput, optFns ...func(*awssqs.Options)) (*awssqs.ListQueuesOutput, error)
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *awssqs.DeleteMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, optFns ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error)
	CreateQueue(ctx context.Context, in *awssqs.CreateQueueInput, optFns ...func(*awssqs.Options)) (*awssqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *awssqs.GetQueueAttributesInput, optFns ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error)
}

// MaxMessageSize is the largest message SQS accepts, in bytes (1 MiB), body and
// attributes together: the default limit of the size check ([WithMaxMessageSize]).
const MaxMessageSize = 1 << 20

// Option configures a [Transport]. A value an option cannot use is an error of [Open]
// or [New] that names the option and matches babelqueue.ErrInvalidOption.
type Option func(*Transport)

// WithLogger sets the logger for warnings (default slog.Default(); nil keeps it).
func WithLogger(l *slog.Logger) Option { return func(t *Transport) { t.common.SetLogger(l) } }

// WithQueueURLPrefix makes the URL of a queue prefix + "/" + its SQS name (prefix in
// the URL): GetQueueUrl and CreateQueue are never called, so the queues must exist.
func WithQueueURLPrefix(prefix string) Option {
	return func(t *Transport) {
		if why := driverkit.CheckHTTPURL(prefix); why != "" {
			t.common.Invalid("WithQueueURLPrefix", "%s", why)
			return
		}
		t.prefix = strings.TrimRight(prefix, "/")
	}
}

// WithFIFO makes every logical queue a FIFO queue named <queue>.fifo (fifo=1 in the URL).
func WithFIFO(on bool) Option { return func(t *Transport) { t.fifo = on } }

// WithGroupID sets the MessageGroupId of every FIFO write (group_id in the URL): 1 to
// 128 ASCII letters, digits or punctuation; empty is the default (the key's).
func WithGroupID(id string) Option {
	return func(t *Transport) {
		if why := checkGroupID(id); id != "" && why != "" {
			t.common.Invalid("WithGroupID", "%s, got %q", why, id)
			return
		}
		t.groupID = id
	}
}

// WithWaitTime sets the long-poll wait of ReceiveMessage (wait_time in the URL), 0 to
// 20 seconds rounded up (default 10s). It also bounds how long closing a consumer waits.
func WithWaitTime(d time.Duration) Option {
	return func(t *Transport) {
		if d < 0 || d > 20*time.Second {
			t.common.Invalid("WithWaitTime", "want 0 to 20s, got %s", d)
			return
		}
		t.waitTime = int32((d + time.Second - 1) / time.Second)
	}
}

// WithVisibilityTimeout asks ReceiveMessage for this visibility timeout (at most 12h,
// rounded up; visibility_timeout in the URL), which the heartbeat keeps up; zero (the
// default) uses the queue's own.
func WithVisibilityTimeout(d time.Duration) Option {
	return func(t *Transport) {
		if d < 0 || d > 12*time.Hour {
			t.common.Invalid("WithVisibilityTimeout", "want 0 (the queue's own) to 12h, got %s", d)
			return
		}
		t.visibility = (d + time.Second - 1).Truncate(time.Second)
	}
}

// WithMaxMessageSize sets the size check's limit in bytes, 1 to [MaxMessageSize] (the
// default; max_message_size in the URL): the MaximumMessageSize of queues that have a
// smaller one. A larger write fails with [transport.ErrTooLarge] before it is sent.
func WithMaxMessageSize(n int) Option { return func(t *Transport) { t.common.SetMaxMessageSize(n) } }

// WithConnectTimeout bounds each start-up check of [Open] (connect_timeout in the URL;
// default [DefaultConnectTimeout]). [New] makes no such checks.
func WithConnectTimeout(d time.Duration) Option {
	return func(t *Transport) { t.common.SetConnectTimeout(d) }
}

// WithCreateQueues sets whether a queue GetQueueUrl does not find is created (default true).
func WithCreateQueues(on bool) Option { return func(t *Transport) { t.create = on } }

// Transport is an SQS connection. It is safe for concurrent use.
type Transport struct {
	client     api
	common     driverkit.Common // logger, connect timeout, size limit, bad option values
	prefix     string
	fifo       bool
	groupID    string
	waitTime   int32
	visibility time.Duration
	create     bool

	publishWait time.Duration // WithPublishWait
	unreachable atomic.Bool   // a publish found the endpoint unreachable: the others wait for it

	urls sync.Map // SQS queue name -> queue URL

	consumers   driverkit.Group // closed by Close; Publish refuses once it is
	warnedDelay atomic.Bool
}

// New returns a transport around a client the caller built (credentials, endpoint,
// retries and HTTP settings are the client's). The transport calls SQS through a copy
// of the client whose requests carry their body in memory (a race of the SDK's request
// bodies with net/http otherwise makes the SDK send a request twice); client itself is
// not changed. New fails only for a nil client or an option's bad value.
func New(client *awssqs.Client, opts ...Option) (*Transport, error) {
	if client == nil {
		return nil, errors.New("sqs: New: nil client")
	}
	t := newTransport(inMemoryBodies(client), opts...)
	if err := t.common.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

// newCommon is the block of settings of a transport before its options.
func newCommon() driverkit.Common {
	return driverkit.NewCommon("sqs", DefaultConnectTimeout, MaxMessageSize, MaxMessageSize)
}

func newTransport(client api, opts ...Option) *Transport {
	t := &Transport{client: client, common: newCommon(), waitTime: 10, create: true, publishWait: DefaultPublishWait}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Capabilities reports the SQS binding: attempts are max(body, ApproximateReceiveCount−1),
// delays up to 15 minutes (none with fifo=1), hand-off to the RedrivePolicy, the schema
// gate, and "-dlq" dead-letter names placed before ".fifo".
func (t *Transport) Capabilities() transport.Capabilities {
	return transport.Capabilities{
		Attempts:         transport.AttemptsMaxNative,
		Delay:            !t.fifo,
		MaxDelay:         MaxDelay,
		HandOff:          true,
		SchemaGate:       true,
		DeadLetterSuffix: "-dlq",
		FIFOSuffix:       fifoSuffix,
		PublishConfirmed: true,
	}
}

// QueueName returns the SQS name of a logical queue: ".fifo" is appended on a FIFO
// transport when the name lacks it.
func (t *Transport) QueueName(queue string) string {
	if t.fifo && !strings.HasSuffix(queue, fifoSuffix) {
		return queue + fifoSuffix
	}
	return queue
}

// QueueURL returns the (cached) URL of a logical queue, creating the queue when it does
// not exist, unless [WithCreateQueues](false) or a prefix is set.
func (t *Transport) QueueURL(ctx context.Context, queue string) (string, error) {
	return t.lookup(ctx, queue, t.create)
}

// lookup returns the URL of a logical queue: cached, from the prefix, or GetQueueUrl
// (and CreateQueue when create is set).
func (t *Transport) lookup(ctx context.Context, queue string, create bool) (string, error) {
	if queue == "" {
		return "", errors.New("sqs: empty queue name")
	}
	name := t.QueueName(queue)
	if u, ok := t.urls.Load(name); ok {
		return u.(string), nil
	}
	u := t.prefix + "/" + name
	if t.prefix == "" {
		var found *string
		out, err := t.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err == nil && out != nil {
			found = out.QueueUrl
		} else if create && isMissingQueue(err) {
			in := &awssqs.CreateQueueInput{QueueName: aws.String(name)}
			if strings.HasSuffix(name, fifoSuffix) {
				in.Attributes = map[string]string{string(types.QueueAttributeNameFifoQueue): "true"}
			}
			var cout *awssqs.CreateQueueOutput
			if cout, err = t.client.CreateQueue(ctx, in); err == nil && cout != nil {
				found = cout.QueueUrl
			}
		}
		if err != nil {
			return "", fmt.Errorf("sqs: queue URL of %q: %w", name, err)
		}
		if found == nil {
			return "", fmt.Errorf("sqs: no URL for queue %q", name)
		}
		u = *found
	}
	t.urls.Store(name, u)
	return u, nil
}

// Publish sends one message (SendMessage). It returns once SQS accepted it.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if t.consumers.Closed() {
		return transport.ErrClosed
	}
	if m == nil {
		return errors.New("sqs: nil message")
	}
	return t.send(ctx, m, "", "", t.publish)
}

// send writes m with via (publish, or withURL for a settle write); seed and group are a
// settle write's FIFO deduplication seed and fallback group.
func (t *Transport) send(ctx context.Context, m *transport.Message, seed, group string, via sender) error {
	o, _, err := t.outgoing(m, seed, group)
	if err != nil {
		return err
	}
	return via(ctx, m.Queue, func(ctx context.Context, url string) error {
		_, err := t.client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: o.MessageBody,
			MessageAttributes: o.MessageAttributes, MessageGroupId: o.MessageGroupId,
			MessageDeduplicationId: o.MessageDeduplicationId, DelaySeconds: o.DelaySeconds})
		return err
	})
}

// outgoing checks m and builds what SQS takes of it (a batch entry without its Id),
// with the size SQS counts.
func (t *Transport) outgoing(m *transport.Message, seed, group string) (types.SendMessageBatchRequestEntry, int, error) {
	var e types.SendMessageBatchRequestEntry
	if m == nil || m.Queue == "" {
		return e, 0, errors.New("sqs: message has no queue")
	}
	if err := checkText(string(m.Body)); err != nil {
		return e, 0, fmt.Errorf("%w: %s", ErrBodyNotText, err.Error())
	}
	attrs, err := buildAttributes(m)
	if err != nil {
		return e, 0, err
	}
	size := messageSize(m.Body, attrs)
	if err := t.common.CheckSize(m.Queue, size, 0); err != nil {
		return e, 0, err
	}
	e = types.SendMessageBatchRequestEntry{MessageBody: aws.String(string(m.Body)), MessageAttributes: attrs}
	if strings.HasSuffix(t.QueueName(m.Queue), fifoSuffix) {
		e.MessageGroupId = aws.String(t.groupFor(m, group))
		e.MessageDeduplicationId = aws.String(dedupID(m, seed))
		if m.Delay > 0 && !t.warnedDelay.Swap(true) {
			t.common.Logger.Warn("sqs: FIFO queues have no per-message delay; sending at once", "queue", m.Queue)
		}
	} else if m.Delay > 0 {
		e.DelaySeconds = int32((min(m.Delay, MaxDelay) + time.Second - 1) / time.Second)
	}
	return e, size, nil
}

// sender makes call, one send to queue: [Transport.withURL] or [Transport.publish].
type sender func(ctx context.Context, queue string, call func(ctx context.Context, url string) error) error

// withURL makes call with the URL of queue, once more with a fresh URL when SQS
// answers that the queue does not exist (it was deleted since).
func (t *Transport) withURL(ctx context.Context, queue string, call func(ctx context.Context, url string) error) error {
	url, err := t.QueueURL(ctx, queue)
	if err != nil {
		return err
	}
	err = call(ctx, url)
	if err != nil && isMissingQueue(err) && t.prefix == "" {
		if url, rerr := t.freshURL(ctx, queue); rerr == nil {
			err = call(ctx, url)
		}
	}
	if err != nil {
		return fmt.Errorf("sqs: send to %q: %w", queue, err)
	}
	return nil
}

// messageSize is the size SQS counts: the body and each attribute's name, type and value.
func messageSize(body []byte, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for name, a := range attrs {
		n += len(name) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
	}
	return n
}

// freshURL looks the URL of a logical queue up again (creating the queue when creating
// is on), for a queue SQS said does not exist: it was deleted, or an emulator restarted.
func (t *Transport) freshURL(ctx context.Context, queue string) (string, error) {
	t.urls.Delete(t.QueueName(queue))
	return t.QueueURL(ctx, queue)
}

// isMissingQueue reports an error saying the queue does not exist.
func isMissingQueue(err error) bool {
	var missing *types.QueueDoesNotExist
	return errors.As(err, &missing)
}

// groupFor picks the MessageGroupId of a FIFO write: the group id, else the key (hashed
// when it is not a valid id), else the fallback, else DefaultGroupID.
func (t *Transport) groupFor(m *transport.Message, fallback string) string {
	if t.groupID != "" {
		return t.groupID
	}
	if len(m.Key) > 0 {
		if validFIFOID(string(m.Key)) {
			return string(m.Key)
		}
		sum := sha256.Sum256(m.Key)
		return "k-" + hex.EncodeToString(sum[:])
	}
	if fallback != "" {
		return fallback
	}
	return DefaultGroupID
}

// dedupID is the MessageDeduplicationId of a FIFO write: meta.id and the attempts for a
// publish (a retry is a new message), a hash seeded by the settled delivery for a
// settle write (settling it again is deduplicated, a release is not).
func dedupID(m *transport.Message, seed string) string {
	if seed == "" && m.Projection.MessageID != "" {
		id := m.Projection.MessageID + ":" + strconv.Itoa(m.Attempts)
		if validFIFOID(id) {
			return id
		}
	}
	h := sha256.New()
	if seed == "" {
		// No meta.id (a raw write): the body and attempts identify it.
		h.Write([]byte("body\x00"))
		h.Write(m.Body)
	} else {
		h.Write([]byte(seed + "\x00" + m.Queue + "\x00" + m.Projection.MessageID))
	}
	h.Write([]byte("\x00" + strconv.Itoa(m.Attempts)))
	return hex.EncodeToString(h.Sum(nil))
}

// validFIFOID reports whether s can be a MessageGroupId or MessageDeduplicationId: 1 to
// 128 ASCII letters, digits or punctuation.
var validFIFOID = regexp.MustCompile(`^[!-~]{1,128}$`).MatchString

// checkGroupID returns why id cannot be a MessageGroupId, or "".
func checkGroupID(id string) string {
	if !validFIFOID(id) {
		return "want 1 to 128 ASCII letters, digits or punctuation"
	}
	return ""
}

// Close stops every consumer (their unsettled deliveries are made visible again) and
// refuses further publishes. The client stays usable.
func (t *Transport) Close(ctx context.Context) error { return t.consumers.Close(ctx) }

// setVisibility sets the visibility timeout of up to ten messages in one
// ChangeMessageVisibilityBatch call. It fails when the call does, or SQS refuses an
// entry excused (which may be nil) does not excuse.
func (t *Transport) setVisibility(ctx context.Context, url string, receipts []string, secs int32, excused func(i int) bool) error {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(receipts))
	for i, r := range receipts {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r), VisibilityTimeout: secs}
	}
	out, err := t.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil || out == nil {
		return err
	}
	var refused []types.BatchResultErrorEntry
	for _, f := range out.Failed {
		if i := entryIndex(f.Id, len(receipts)); i < 0 || excused == nil || !excused(i) {
			refused = append(refused, f)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("%d of %d refused: %s: %s", len(refused), len(receipts), aws.ToString(refused[0].Code), aws.ToString(refused[0].Message))
	}
	return nil
}

// queueNumbers reads numeric queue attributes (GetQueueAttributes); one SQS gives no
// number for reads -1.
func (t *Transport) queueNumbers(ctx context.Context, url string, names ...types.QueueAttributeName) ([]int64, error) {
	out, err := t.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = &awssqs.GetQueueAttributesOutput{}
	}
	ns := make([]int64, len(names))
	for i, name := range names {
		ns[i] = -1
		if n, err := strconv.ParseInt(out.Attributes[string(name)], 10, 64); err == nil {
			ns[i] = n
		}
	}
	return ns, nil
}

// entryIndex returns the index a batch result's Id names, or -1 when none of n.
func entryIndex(id *string, n int) int {
	i, err := strconv.Atoi(aws.ToString(id))
	if err != nil || i < 0 || i >= n {
		return -1
	}
	return i
}
