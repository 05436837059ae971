// Package memory is the in-process transport behind memory:// URLs: a broker that lives
// in the program's memory, for tests and local runs.
//
// It behaves as a careful broker does: deliveries handed out are tracked until settled,
// a rewound delivery comes back with a higher redelivery count, delayed messages wait
// until due, and a test can make writes fail ([Transport.FailWrites]) to see that nothing
// is lost. Each memory:// URL opened is a new, empty broker; share one by building it
// with [New] and handing it to babelqueue.New.
//
// A delivery's body is the stored message's bytes, not a copy (a publish stores a copy of
// what it is given): treat it as read-only, as the runtime does. Headers are not copied
// at all: a publish keeps the message's header map as the stored message's, and each
// delivery of it carries that same map. Change neither the map given to a publish (or a
// settlement's write) once it is handed over nor a delivery's map, as the runtime never
// does; copy a map to change it ([maps.Clone]).
//
// The memory broker keeps no attempts header of its own beyond [transport.Message.Attempts],
// which it stores beside the body so a poison body's count survives a re-publish.
package memory

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

func init() {
	transport.Register("memory", func(ctx context.Context, u *url.URL) (transport.Transport, error) {
		if err := transport.CheckParams(u); err != nil {
			return nil, err
		}
		if u.Host != "" || (u.Path != "" && u.Path != "/") {
			return nil, &transport.BadURLError{Scheme: "memory", Param: "host", Reason: "memory:// takes no host or path"}
		}
		return New(WithLogger(transport.LoggerFrom(ctx))), nil
	})
}

// Option configures a memory transport.
type Option func(*Transport)

// WithCapabilities makes the memory broker report c, so the runtime applies another
// binding's rules (a HandOff broker like SQS, a schema gate, Redis's poison rule) in
// tests. With c.SchemaGate the delivery's schema-version header is read from the
// "bq-schema-version" header.
func WithCapabilities(c transport.Capabilities) Option {
	return func(t *Transport) { t.caps = c }
}

// WithLogger sets the logger of the broker's consumers (settlements that keep
// failing). Default slog.Default(); a memory:// URL opened by the runtime logs through
// the application's logger.
func WithLogger(l *slog.Logger) Option {
	return func(t *Transport) {
		if l != nil {
			t.log = l
		}
	}
}

// WithMaxMessageSize makes the broker refuse a message whose body is longer than n
// bytes, as a broker with a size limit does: the write fails with a
// [*transport.TooLargeError]. Zero (the default) is no limit.
func WithMaxMessageSize(n int) Option {
	return func(t *Transport) { t.maxSize = n }
}

// Transport is the in-process broker. It is safe for concurrent use.
type Transport struct {
	mu      sync.Mutex
	queues  map[string]*queue
	caps    transport.Capabilities
	fail    func(m *transport.Message) error
	closed  bool
	nextID  uint64
	now     func() time.Time
	log     *slog.Logger
	maxSize int
}

// Stored is a message as the memory broker holds it.
type Stored struct {
	Body          []byte
	Key           []byte
	Headers       map[string]string
	Attempts      int
	Redeliveries  int
	SchemaVersion any // what Delivery.SchemaVersion reports, when set
	DueAt         time.Time
	id            uint64
	inFlight      bool // handed out and not settled
}

type queue struct {
	ready     []*Stored
	delayed   []*Stored
	inflight  int // messages handed out and not settled
	handedOff []*Stored
	wake      chan struct{} // closed and replaced whenever the queue changes
}

// New returns an empty in-process broker.
func New(opts ...Option) *Transport {
	t := &Transport{
		queues: map[string]*queue{},
		caps:   transport.Capabilities{Attempts: transport.AttemptsFromBody, Delay: true, PublishConfirmed: true},
		now:    time.Now,
		log:    slog.Default(),
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// FailWrites installs fn, called before every publish and settle write; a non-nil
// error fails that write as a broker would. Pass nil to stop failing.
func (t *Transport) FailWrites(fn func(m *transport.Message) error) {
	t.mu.Lock()
	t.fail = fn
	t.mu.Unlock()
}

// Capabilities reports what the memory broker does (see [WithCapabilities]).
func (t *Transport) Capabilities() transport.Capabilities { return t.caps }

func (t *Transport) q(name string) *queue {
	q, ok := t.queues[name]
	if !ok {
		q = &queue{wake: make(chan struct{})}
		t.queues[name] = q
	}
	return q
}

// settled counts s out of the messages in flight, once.
func (q *queue) settled(s *Stored) {
	if s.inFlight {
		s.inFlight = false
		q.inflight--
	}
}

func (q *queue) notify() {
	close(q.wake)
	q.wake = make(chan struct{})
}

// Publish stores one message.
func (t *Transport) Publish(_ context.Context, m *transport.Message) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.writeLocked(m)
}

func (t *Transport) writeLocked(m *transport.Message) error {
	if t.closed {
		return transport.ErrClosed
	}
	if m.Queue == "" {
		return errors.New("memory: message has no queue")
	}
	if err := transport.CheckSize("memory", m.Queue, len(m.Body), t.maxSize); err != nil {
		return err
	}
	if t.fail != nil {
		if err := t.fail(m); err != nil {
			return err
		}
	}
	s := &Stored{
		Body:     append([]byte(nil), m.Body...),
		Key:      cloneKey(m.Key),
		Headers:  m.Headers, // kept, not copied: see the package doc
		Attempts: m.Attempts,
	}
	if t.caps.SchemaGate {
		if v, ok := m.Headers["bq-schema-version"]; ok {
			s.SchemaVersion = v
		} else if m.Projection.SchemaVersion != 0 {
			s.SchemaVersion = "1"
			if m.Projection.SchemaVersion != 1 {
				s.SchemaVersion = strconv.Itoa(m.Projection.SchemaVersion)
			}
		}
	}
	t.enqueueLocked(m.Queue, s, m.Delay)
	return nil
}

func (t *Transport) enqueueLocked(name string, s *Stored, delay time.Duration) {
	q := t.q(name)
	t.nextID++
	s.id = t.nextID
	if delay > 0 {
		s.DueAt = t.now().Add(delay)
		q.delayed = append(q.delayed, s)
	} else {
		s.DueAt = time.Time{}
		q.ready = append(q.ready, s)
	}
	q.notify()
}

// Inject stores s on queue as if a producer had written it, for tests that need a
// delivery with facts a publish cannot set (a redelivery count, a typed schema header).
func (t *Transport) Inject(queue string, s Stored) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := s
	c.Body = append([]byte(nil), s.Body...)
	c.Key = cloneKey(s.Key)
	c.Headers = cloneHeaders(s.Headers)
	t.enqueueLocked(queue, &c, 0)
}

// Messages returns copies of the messages waiting on queue (ready first, then delayed).
func (t *Transport) Messages(queue string) []Stored {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.queues[queue]
	if !ok {
		return nil
	}
	out := make([]Stored, 0, len(q.ready)+len(q.delayed))
	for _, s := range q.ready {
		out = append(out, *s)
	}
	for _, s := range q.delayed {
		out = append(out, *s)
	}
	return out
}

// HandedOff returns the deliveries of queue that were handed to the (simulated)
// broker redrive with [transport.HandOff].
func (t *Transport) HandedOff(queue string) []Stored {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.queues[queue]
	if !ok {
		return nil
	}
	out := make([]Stored, len(q.handedOff))
	for i, s := range q.handedOff {
		out[i] = *s
	}
	return out
}

// InFlight counts the deliveries of queue handed out and not settled.
func (t *Transport) InFlight(queue string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q, ok := t.queues[queue]; ok {
		return q.inflight
	}
	return 0
}

// Consume opens a consumer on queue. Deliveries it handed out and did not settle go
// back to the front of the queue when it closes, in the order they were handed out,
// with a higher redelivery count.
func (t *Transport) Consume(_ context.Context, queue string, opts transport.ConsumeOptions) (transport.Consumer, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, transport.ErrClosed
	}
	c := &consumer{t: t, queue: queue, q: t.q(queue)}
	t.mu.Unlock()
	k, err := driverkit.New[*Stored](c, driverkit.Config{
		Broker:            "memory",
		Queue:             queue,
		Logger:            t.log,
		HandOff:           t.caps.HandOff,
		AtomicAcks:        true,
		ConcurrentReceive: true,
	}, opts)
	if err != nil {
		return nil, err
	}
	c.kit = k
	return k, nil
}

// Close closes the broker; waiting receivers return [transport.ErrClosed].
func (t *Transport) Close(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	for _, q := range t.queues {
		q.notify()
	}
	return nil
}

func cloneKey(k []byte) []byte {
	if k == nil {
		return nil
	}
	return append([]byte{}, k...)
}

func cloneHeaders(h map[string]string) map[string]string {
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	return out
}
