package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/babelqueue-go/babelqueue/transport"
)

// MaxDelay is the longest per-message delay SQS accepts (DelaySeconds 900).
const MaxDelay = 15 * time.Minute

// DefaultGroupID is the MessageGroupId of a FIFO write that has neither a configured
// group id nor a key.
const DefaultGroupID = "babelqueue"

// fifoSuffix ends the name of every SQS FIFO queue.
const fifoSuffix = ".fifo"

// api is the part of the SQS client the transport uses.
type api interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
	ReceiveMessage(ctx context.Context, in *awssqs.ReceiveMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *awssqs.DeleteMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *awssqs.ChangeMessageVisibilityInput, optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *awssqs.ChangeMessageVisibilityBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, optFns ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error)
	CreateQueue(ctx context.Context, in *awssqs.CreateQueueInput, optFns ...func(*awssqs.Options)) (*awssqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *awssqs.GetQueueAttributesInput, optFns ...func(*awssqs.Options)) (*awssqs.GetQueueAttributesOutput, error)
}

// MaxMessageSize is the largest message SQS accepts, in bytes (1 MiB): the body and
// every message attribute's name, type and value together. It is the default limit of
// the size check; [WithMaxMessageSize] lowers it for a queue whose MaximumMessageSize
// attribute is smaller.
const MaxMessageSize = 1 << 20

// Option configures a [Transport].
type Option func(*Transport)

// WithLogger sets the logger for warnings (a failed heartbeat, a receive error). The
// default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(t *Transport) {
		if l != nil {
			t.log = l
		}
	}
}

// WithQueueURLPrefix makes the queue URL of a queue prefix + "/" + its SQS name, so the
// transport never calls GetQueueUrl or CreateQueue (the queues must exist). It is the
// URL's prefix parameter.
func WithQueueURLPrefix(prefix string) Option {
	return func(t *Transport) { t.prefix = strings.TrimRight(prefix, "/") }
}

// WithFIFO makes every logical queue a FIFO queue named <queue>.fifo (the URL's fifo=1).
// The transport then reports no per-message delay, which SQS FIFO queues lack.
func WithFIFO(on bool) Option {
	return func(t *Transport) { t.fifo = on }
}

// WithGroupID sets the MessageGroupId of every FIFO write (the URL's group_id).
func WithGroupID(id string) Option {
	return func(t *Transport) { t.groupID = id }
}

// WithWaitTime sets the long-poll wait of ReceiveMessage (the URL's wait_time),
// clamped to SQS's 0 to 20 seconds and rounded up to a whole second. The default is 10
// seconds. Closing a consumer waits for a poll in progress, so the wait time also
// bounds how long Close takes.
func WithWaitTime(d time.Duration) Option {
	return func(t *Transport) {
		t.waitTime = int32((min(max(d, 0), 20*time.Second) + time.Second - 1) / time.Second)
	}
}

// WithVisibilityTimeout asks ReceiveMessage for this visibility timeout instead of the
// queue's own; the heartbeat extends held deliveries by the same amount. Zero (the
// default) uses the queue's VisibilityTimeout attribute.
func WithVisibilityTimeout(d time.Duration) Option {
	return func(t *Transport) { t.visibility = min(max(d, 0), 12*time.Hour) }
}

// WithMaxMessageSize sets the size check's limit in bytes (the URL's max_message_size;
// default and most [MaxMessageSize]): set it to the MaximumMessageSize attribute of
// queues that have a smaller one. A write whose body and attributes together are
// larger fails before it is sent, with an error matching [transport.ErrTooLarge] that
// names the limit.
func WithMaxMessageSize(n int) Option {
	return func(t *Transport) {
		if n > 0 {
			t.maxSize = min(n, MaxMessageSize)
		}
	}
}

// WithConnectTimeout bounds each start-up check of [Open] (the URL's connect_timeout;
// default [DefaultConnectTimeout]). [New] makes no such checks.
func WithConnectTimeout(d time.Duration) Option {
	return func(t *Transport) {
		if d > 0 {
			t.connectTimeout = d
		}
	}
}

// WithCreateQueues controls whether a queue that GetQueueUrl does not find is created
// (CreateQueue, with FifoQueue for a ".fifo" name). The default is true.
func WithCreateQueues(on bool) Option {
	return func(t *Transport) { t.create = on }
}

// Transport is an SQS connection. It is safe for concurrent use.
type Transport struct {
	client     api
	log        *slog.Logger
	prefix     string
	fifo       bool
	groupID    string
	waitTime   int32
	visibility time.Duration
	create     bool
	maxSize    int

	connectTimeout time.Duration

	urlMu sync.RWMutex
	urls  map[string]string // SQS queue name -> queue URL

	mu          sync.Mutex
	closed      bool
	consumers   map[*consumer]struct{}
	warnedDelay bool
}

// New returns a transport around a client the caller built (credentials, endpoint,
// retries and HTTP settings are the client's).
func New(client *awssqs.Client, opts ...Option) *Transport {
	return newTransport(client, opts...)
}

func newTransport(client api, opts ...Option) *Transport {
	t := &Transport{
		client:   client,
		log:      slog.Default(),
		waitTime: 10,
		create:   true,
		maxSize:  MaxMessageSize,

		connectTimeout: DefaultConnectTimeout,
		urls:           map[string]string{},
		consumers:      map[*consumer]struct{}{},
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Capabilities reports the SQS binding: attempts are max(body, ApproximateReceiveCount−1),
// delays up to 15 minutes (none on FIFO queues), hand-off to the RedrivePolicy, the
// schema-version gate, and "-dlq" dead-letter names placed before ".fifo".
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

// QueueName returns the SQS queue name of a logical queue: the queue itself, with
// ".fifo" appended when the transport is FIFO and the name lacks it.
func (t *Transport) QueueName(queue string) string {
	if t.fifo && !strings.HasSuffix(queue, fifoSuffix) {
		return queue + fifoSuffix
	}
	return queue
}

// QueueURL returns the URL of a logical queue, creating the queue when it does not
// exist (unless [WithCreateQueues](false) or a prefix is set). URLs are cached.
func (t *Transport) QueueURL(ctx context.Context, queue string) (string, error) {
	if queue == "" {
		return "", errors.New("sqs: empty queue name")
	}
	name := t.QueueName(queue)
	t.urlMu.RLock()
	u, ok := t.urls[name]
	t.urlMu.RUnlock()
	if ok {
		return u, nil
	}
	if t.prefix != "" {
		u = t.prefix + "/" + name
	} else {
		out, err := t.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
		var missing *types.QueueDoesNotExist
		switch {
		case err == nil && out != nil && out.QueueUrl != nil:
			u = *out.QueueUrl
		case err == nil:
			return "", fmt.Errorf("sqs: GetQueueUrl %q returned no URL", name)
		case errors.As(err, &missing) && t.create:
			in := &awssqs.CreateQueueInput{QueueName: aws.String(name)}
			if strings.HasSuffix(name, fifoSuffix) {
				in.Attributes = map[string]string{string(types.QueueAttributeNameFifoQueue): "true"}
			}
			cout, cerr := t.client.CreateQueue(ctx, in)
			if cerr != nil {
				return "", fmt.Errorf("sqs: create queue %q: %w", name, cerr)
			}
			if cout == nil || cout.QueueUrl == nil {
				return "", fmt.Errorf("sqs: CreateQueue %q returned no URL", name)
			}
			u = *cout.QueueUrl
		default:
			return "", fmt.Errorf("sqs: queue URL of %q: %w", name, err)
		}
	}
	t.urlMu.Lock()
	t.urls[name] = u
	t.urlMu.Unlock()
	return u, nil
}

// Publish sends one message (SendMessage). It returns once SQS accepted it.
func (t *Transport) Publish(ctx context.Context, m *transport.Message) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if m == nil {
		return errors.New("sqs: nil message")
	}
	return t.send(ctx, m, "")
}

// send writes m; dedupSeed, when set, makes the FIFO deduplication id of a settle write.
// A settle write's group falls back to fallbackGroup (the consumed message's group).
func (t *Transport) send(ctx context.Context, m *transport.Message, dedupSeed string, fallbackGroup ...string) error {
	if m.Queue == "" {
		return errors.New("sqs: message has no queue")
	}
	if err := checkBody(m.Body); err != nil {
		return err
	}
	attrs, err := buildAttributes(m)
	if err != nil {
		return err
	}
	if err := transport.CheckSize("sqs", m.Queue, messageSize(m.Body, attrs), t.maxSize); err != nil {
		return err
	}
	qurl, err := t.QueueURL(ctx, m.Queue)
	if err != nil {
		return err
	}
	in := &awssqs.SendMessageInput{
		QueueUrl:          aws.String(qurl),
		MessageBody:       aws.String(string(m.Body)),
		MessageAttributes: attrs,
	}
	if strings.HasSuffix(t.QueueName(m.Queue), fifoSuffix) {
		in.MessageGroupId = aws.String(t.groupFor(m, fallbackGroup...))
		in.MessageDeduplicationId = aws.String(dedupID(m, dedupSeed))
		if m.Delay > 0 {
			t.warnFIFODelay(m.Queue)
		}
	} else if m.Delay > 0 {
		secs := (min(m.Delay, MaxDelay) + time.Second - 1) / time.Second
		in.DelaySeconds = int32(secs)
	}
	_, err = t.client.SendMessage(ctx, in)
	if err != nil && isMissingQueue(err) && t.prefix == "" {
		// The cached URL names a queue that was deleted: resolve it again once.
		t.forgetURL(m.Queue)
		if qurl, rerr := t.QueueURL(ctx, m.Queue); rerr == nil {
			in.QueueUrl = aws.String(qurl)
			_, err = t.client.SendMessage(ctx, in)
		}
	}
	if err != nil {
		return fmt.Errorf("sqs: send to %q: %w", m.Queue, err)
	}
	return nil
}

// messageSize is the size SQS counts of a message: the body and each attribute's name,
// data type and value.
func messageSize(body []byte, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for name, a := range attrs {
		n += len(name) + len(aws.ToString(a.DataType)) + len(aws.ToString(a.StringValue)) + len(a.BinaryValue)
	}
	return n
}

// forgetURL drops the cached URL of a logical queue.
func (t *Transport) forgetURL(queue string) {
	t.urlMu.Lock()
	delete(t.urls, t.QueueName(queue))
	t.urlMu.Unlock()
}

// isMissingQueue reports an error saying the queue does not exist.
func isMissingQueue(err error) bool {
	var missing *types.QueueDoesNotExist
	return errors.As(err, &missing)
}

func (t *Transport) warnFIFODelay(queue string) {
	t.mu.Lock()
	warned := t.warnedDelay
	t.warnedDelay = true
	t.mu.Unlock()
	if !warned {
		t.log.Warn("sqs: FIFO queues have no per-message delay; sending at once", "queue", queue)
	}
}

// groupFor picks the MessageGroupId of a FIFO write: the configured group id, else the
// key (hashed when it is not a valid group id), else the fallback, else DefaultGroupID.
func (t *Transport) groupFor(m *transport.Message, fallback ...string) string {
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
	if len(fallback) > 0 && fallback[0] != "" {
		return fallback[0]
	}
	return DefaultGroupID
}

// dedupID is the MessageDeduplicationId of a FIFO write. A user publish uses meta.id and
// the attempts, so a retry re-publish (attempts+1) is a new message; a settle write is
// seeded by the delivery it settles, so re-settling the same delivery is deduplicated
// while a release of an unchanged body is not.
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
		h.Write([]byte(seed))
		h.Write([]byte{0})
		h.Write([]byte(m.Queue))
		h.Write([]byte{0})
		h.Write([]byte(m.Projection.MessageID))
	}
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(m.Attempts)))
	return hex.EncodeToString(h.Sum(nil))
}

// validFIFOID reports whether s can be a MessageGroupId or MessageDeduplicationId:
// 1 to 128 ASCII letters, digits and punctuation.
func validFIFOID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Close stops every consumer (their unsettled deliveries are made visible again) and
// refuses further publishes. The client is the caller's and stays usable.
func (t *Transport) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	cs := make([]*consumer, 0, len(t.consumers))
	for c := range t.consumers {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
