package driverkittest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Fake is a small in-process broker for testing the kit and showing what a driver
// does: queues of [Message], a consumer driver per queue ([Fake.Consume]) whose settle
// writes are made when their [driverkit.Confirm] runs (a broker that acknowledges a
// write when it confirms it), and counts of what happened to each message. It keeps
// the rules a real broker keeps and reports each breach in [Fake.Breaches]: a message
// acknowledged or given back that was not held, or held twice. Closing a consumer gives
// back what it still holds, as closing a channel does. It is safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	queues   map[string][]*Message    // ready messages, oldest first
	held     map[*Message]*fakeDriver // handed to a consumer, not finished
	acks     map[int]int              // ID → acknowledgements
	handed   map[int]int              // ID → hand-offs
	reasons  map[driverkit.Reason]int
	breaches []string
	nextID   int
	wake     chan struct{} // closed and replaced when a queue gains a message
}

// Message is a message of the [Fake] broker.
type Message struct {
	ID           int
	Queue        string
	Body         []byte
	Redeliveries int // times given back
}

// NewFake returns an empty broker.
func NewFake() *Fake {
	return &Fake{queues: map[string][]*Message{}, held: map[*Message]*fakeDriver{}, acks: map[int]int{},
		handed: map[int]int{}, reasons: map[driverkit.Reason]int{}, wake: make(chan struct{})}
}

// Publish stores a message on queue and returns its ID.
func (f *Fake) Publish(queue string, body []byte) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.publishLocked(queue, body)
}

func (f *Fake) publishLocked(queue string, body []byte) int {
	f.nextID++
	f.queues[queue] = append(f.queues[queue], &Message{ID: f.nextID, Queue: queue, Body: body})
	close(f.wake)
	f.wake = make(chan struct{})
	return f.nextID
}

// Ready returns the messages waiting on queue, oldest first.
func (f *Fake) Ready(queue string) []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Message, len(f.queues[queue]))
	for i, m := range f.queues[queue] {
		out[i] = *m
	}
	return out
}

// Held counts the messages handed to consumers and not finished.
func (f *Fake) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held)
}

// Acks returns how many times the message id was acknowledged.
func (f *Fake) Acks(id int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acks[id]
}

// HandedOff returns how many times the message id was handed off.
func (f *Fake) HandedOff(id int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.handed[id]
}

// GivenBack counts the messages given back for why.
func (f *Fake) GivenBack(why driverkit.Reason) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reasons[why]
}

// Breaches returns what the kit did that a broker forbids: acknowledging or giving
// back a message it did not hold.
func (f *Fake) Breaches() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.breaches...)
}

// Consume opens a consumer on queue: the kit's [driverkit.Consumer] around the fake's
// driver, with faults (which may be nil) between them. cfg.Broker defaults to "fake"
// and cfg.Queue is set to queue; the driver offers HandOff, and AtomicAcks when cfg
// asks for them.
func (f *Fake) Consume(queue string, cfg driverkit.Config, opts transport.ConsumeOptions, faults *Faults) (*driverkit.Consumer[*Message], error) {
	return f.consume(queue, cfg, opts, faults, false)
}

// ConsumeAsync is [Fake.Consume] with a driver that also implements
// [driverkit.AsyncWriter], as a client with delivery callbacks does: the kit hands
// pipelined settlements to WriteAsync, which makes the write (OpWrite) and calls done
// from a goroutine of its own once the confirmation (OpConfirm) is over.
func (f *Fake) ConsumeAsync(queue string, cfg driverkit.Config, opts transport.ConsumeOptions, faults *Faults) (*driverkit.Consumer[*Message], error) {
	return f.consume(queue, cfg, opts, faults, true)
}

func (f *Fake) consume(queue string, cfg driverkit.Config, opts transport.ConsumeOptions, faults *Faults, async bool) (*driverkit.Consumer[*Message], error) {
	if cfg.Broker == "" {
		cfg.Broker = "fake"
	}
	cfg.Queue = queue
	d := &fakeDriver{f: f, queue: queue}
	var drv driverkit.Driver[*Message] = d
	if faults != nil {
		drv = Wrap(drv, faults)
	}
	if async {
		drv = asyncDriver{drv}
	}
	k, err := driverkit.New(drv, cfg, opts)
	if err != nil {
		return nil, err
	}
	d.kit = k
	return k, nil
}

// fakeDriver is the fake broker's driver for one queue.
type fakeDriver struct {
	f     *Fake
	queue string
	kit   *driverkit.Consumer[*Message]
}

func (d *fakeDriver) Receive(ctx context.Context, into []*Message) (int, error) {
	f := d.f
	for {
		f.mu.Lock()
		if q := f.queues[d.queue]; len(q) > 0 {
			n := min(len(into), len(q))
			for i, m := range q[:n] {
				if f.held[m] != nil {
					f.breaches = append(f.breaches, fmt.Sprintf("message %d handed out twice", m.ID))
				}
				f.held[m] = d
				into[i] = m
			}
			f.queues[d.queue] = q[n:]
			f.mu.Unlock()
			return n, nil
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-d.kit.Done():
			return 0, transport.ErrClosed
		}
	}
}

func (d *fakeDriver) Decode(m *Message, out *transport.Delivery) {
	out.Body = m.Body
	out.Redeliveries = m.Redeliveries
}

// finishLocked ends the hold of m, reporting a breach when it was not held.
func (d *fakeDriver) finishLocked(m *Message, what string) bool {
	if d.f.held[m] != d {
		d.f.breaches = append(d.f.breaches, fmt.Sprintf("%s of message %d, which is not held", what, m.ID))
		return false
	}
	delete(d.f.held, m)
	return true
}

func (d *fakeDriver) Ack(_ context.Context, m *Message) error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.finishLocked(m, "ack") {
		d.f.acks[m.ID]++
	}
	return nil
}

func (d *fakeDriver) GiveBack(_ context.Context, ms []*Message, why driverkit.Reason) error {
	f := d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	back := make([]*Message, 0, len(ms))
	for _, m := range ms {
		if d.finishLocked(m, "give-back") {
			m.Redeliveries++
			f.reasons[why]++
			back = append(back, m)
		}
	}
	f.queues[d.queue] = append(back, f.queues[d.queue]...)
	close(f.wake)
	f.wake = make(chan struct{})
	return nil
}

func (d *fakeDriver) HandOff(_ context.Context, m *Message) error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.finishLocked(m, "hand-off") {
		d.f.handed[m.ID]++
	}
	return nil
}

// Write checks that m is held and returns the confirmation that makes the writes.
func (d *fakeDriver) Write(_ context.Context, m *Message, ws []*transport.Message) (driverkit.Confirm, error) {
	d.f.mu.Lock()
	held := d.f.held[m] == d
	d.f.mu.Unlock()
	if !held {
		return nil, &transport.TakenBackError{Broker: "fake", Queue: d.queue, Reason: "not held"}
	}
	return func(context.Context) error {
		d.f.mu.Lock()
		defer d.f.mu.Unlock()
		for _, w := range ws {
			d.f.publishLocked(w.Queue, w.Body)
		}
		return nil
	}, nil
}

// AckWrites makes the writes and the acknowledgement together.
func (d *fakeDriver) AckWrites(_ context.Context, m *Message, ws []*transport.Message) error {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if !d.finishLocked(m, "ack") {
		return nil
	}
	for _, w := range ws {
		d.f.publishLocked(w.Queue, w.Body)
	}
	d.f.acks[m.ID]++
	return nil
}

func (d *fakeDriver) IsRetryable(err error) bool { return errors.Is(err, ErrTransient) }

// Close gives back what the consumer still holds, as a broker does when a consumer's
// channel closes: a pipelined settlement that Close gave up waiting for, for example.
func (d *fakeDriver) Close(context.Context) error {
	f := d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	var back []*Message
	for m, owner := range f.held {
		if owner == d {
			delete(f.held, m)
			m.Redeliveries++
			back = append(back, m)
		}
	}
	slices.SortFunc(back, func(a, b *Message) int { return a.ID - b.ID })
	f.queues[d.queue] = append(back, f.queues[d.queue]...)
	return nil
}

// asyncDriver gives a driver the kit's AsyncWriter: the confirmation its Write returns
// is waited for on a goroutine of the driver's, which then calls done.
type asyncDriver struct {
	driverkit.Driver[*Message]
}

func (a asyncDriver) Write(ctx context.Context, m *Message, ws []*transport.Message) (driverkit.Confirm, error) {
	return a.Driver.(driverkit.Writer[*Message]).Write(ctx, m, ws)
}

func (a asyncDriver) AckWrites(ctx context.Context, m *Message, ws []*transport.Message) error {
	return a.Driver.(driverkit.AtomicAcker[*Message]).AckWrites(ctx, m, ws)
}

func (a asyncDriver) HandOff(ctx context.Context, m *Message) error {
	return a.Driver.(driverkit.HandOffer[*Message]).HandOff(ctx, m)
}

func (a asyncDriver) WriteAsync(ctx context.Context, m *Message, ws []*transport.Message, done func(error)) error {
	confirm, err := a.Write(ctx, m, ws)
	if err != nil {
		return err
	}
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		if confirm != nil {
			err = confirm(cctx)
		}
		done(err)
	}()
	return nil
}
