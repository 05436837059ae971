package servicebus

import (
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// fakeBroker behaves as a Service Bus namespace does for the calls the transport makes:
// peek-lock delivery with a lock token and a lock that expires, DeliveryCount starting
// at 1 and rising on every abandon or lock expiry, MaxDeliveryCount moving a message to
// the queue's dead-letter sub-queue, scheduled enqueue times, and settlement that fails
// with CodeLockLost once a lock is gone. Queues are created on first use unless strict
// is set, in which case an unknown queue fails with CodeNotFound, as on Service Bus.
type fakeBroker struct {
	mu               sync.Mutex
	queues           map[string]*fakeQueue
	strict           bool
	maxDeliveryCount uint32
	lockDuration     time.Duration
	seq              int64
	failSend         func(queue string, m *azservicebus.Message) error
	failSettle       func(op string, rm *azservicebus.ReceivedMessage) error
	failReceive      func() error
	failPeek         func(ctx context.Context) error
	linkLimit        int // the SDK's check of a message against the link's limit; 0: none
	renewals         int
}

type fakeQueue struct {
	ready       []*fakeMsg // by sequence number
	scheduled   []*fakeMsg
	locked      map[[16]byte]*fakeMsg
	deadLetters []*fakeMsg
	wake        chan struct{}
}

type fakeMsg struct {
	m                *azservicebus.Message
	seq              int64
	deliveryCount    uint32
	enqueuedAt       time.Time
	availableAt      time.Time
	lockedUntil      time.Time
	deadLetterReason string
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{queues: map[string]*fakeQueue{}, maxDeliveryCount: 10, lockDuration: 5 * time.Second}
}

// declare creates queues (for strict brokers).
func (b *fakeBroker) declare(names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range names {
		b.queueLocked(n, true)
	}
}

func (b *fakeBroker) queueLocked(name string, create bool) *fakeQueue {
	q, ok := b.queues[name]
	if !ok && create {
		q = &fakeQueue{locked: map[[16]byte]*fakeMsg{}, wake: make(chan struct{})}
		b.queues[name] = q
	}
	return q
}

func (q *fakeQueue) notify() {
	close(q.wake)
	q.wake = make(chan struct{})
}

func notFound() error                   { return &azservicebus.Error{Code: azservicebus.CodeNotFound} }
func lockLost() error                   { return &azservicebus.Error{Code: azservicebus.CodeLockLost} }
func closedErr() error                  { return &azservicebus.Error{Code: azservicebus.CodeClosed} }
func (b *fakeBroker) client() namespace { return fakeNamespace{b} }

// tick moves due scheduled messages to ready and expired locks back (or to the
// dead-letter sub-queue); it returns the next time something is due.
func (b *fakeBroker) tickLocked(q *fakeQueue, now time.Time) time.Time {
	var next time.Time
	soon := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	kept := q.scheduled[:0]
	for _, m := range q.scheduled {
		if !m.availableAt.After(now) {
			q.insertReady(m)
			continue
		}
		soon(m.availableAt)
		kept = append(kept, m)
	}
	q.scheduled = kept
	for tok, m := range q.locked {
		if now.After(m.lockedUntil) {
			delete(q.locked, tok)
			b.returnLocked(q, m)
			continue
		}
		soon(m.lockedUntil)
	}
	return next
}

// returnLocked gives a message back after an abandon or a lock expiry.
func (b *fakeBroker) returnLocked(q *fakeQueue, m *fakeMsg) {
	if m.deliveryCount >= b.maxDeliveryCount {
		m.deadLetterReason = "MaxDeliveryCountExceeded"
		q.deadLetters = append(q.deadLetters, m)
		return
	}
	q.insertReady(m)
}

func (q *fakeQueue) insertReady(m *fakeMsg) {
	i, _ := slices.BinarySearchFunc(q.ready, m.seq, func(x *fakeMsg, s int64) int {
		switch {
		case x.seq < s:
			return -1
		case x.seq > s:
			return 1
		}
		return 0
	})
	q.ready = slices.Insert(q.ready, i, m)
	q.notify()
}

func cloneMessage(m *azservicebus.Message) *azservicebus.Message {
	c := *m
	c.Body = append([]byte(nil), m.Body...)
	if m.ApplicationProperties != nil {
		c.ApplicationProperties = maps.Clone(m.ApplicationProperties)
	}
	return &c
}

// send stores a message as the broker does after a confirmed send.
func (b *fakeBroker) send(queue string, m *azservicebus.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failSend != nil {
		if err := b.failSend(queue, m); err != nil {
			return err
		}
	}
	q := b.queueLocked(queue, !b.strict)
	if q == nil {
		return notFound()
	}
	b.seq++
	now := time.Now()
	fm := &fakeMsg{m: cloneMessage(m), seq: b.seq, enqueuedAt: now}
	if m.ScheduledEnqueueTime != nil && m.ScheduledEnqueueTime.After(now) {
		fm.availableAt = *m.ScheduledEnqueueTime
		q.scheduled = append(q.scheduled, fm)
		q.notify()
		return nil
	}
	q.insertReady(fm)
	return nil
}

// inject stores m with a given delivery count already spent, as if earlier deliveries
// had been abandoned.
func (b *fakeBroker) inject(queue string, m *azservicebus.Message, spent uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queueLocked(queue, true)
	b.seq++
	q.insertReady(&fakeMsg{m: cloneMessage(m), seq: b.seq, enqueuedAt: time.Now(), deliveryCount: spent})
}

// deadLettered returns the messages in the dead-letter sub-queue of queue.
func (b *fakeBroker) deadLettered(queue string) []*fakeMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queueLocked(queue, false)
	if q == nil {
		return nil
	}
	b.tickLocked(q, time.Now())
	return slices.Clone(q.deadLetters)
}

// counts returns how many messages of queue are ready or scheduled, and locked.
func (b *fakeBroker) counts(queue string) (waiting, locked int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queueLocked(queue, false)
	if q == nil {
		return 0, 0
	}
	b.tickLocked(q, time.Now())
	return len(q.ready) + len(q.scheduled), len(q.locked)
}

// waitingMessages returns copies of what waits on queue, ready first.
func (b *fakeBroker) waitingMessages(queue string) []*fakeMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queueLocked(queue, false)
	if q == nil {
		return nil
	}
	b.tickLocked(q, time.Now())
	return append(slices.Clone(q.ready), q.scheduled...)
}

type fakeNamespace struct{ b *fakeBroker }

func (n fakeNamespace) newSender(queue string) (sender, error) {
	return &fakeSender{b: n.b, queue: queue}, nil
}

func (n fakeNamespace) newReceiver(queue string) (receiver, error) {
	return &fakeReceiver{b: n.b, queue: queue}, nil
}

func (n fakeNamespace) close(context.Context) error { return nil }

type fakeSender struct {
	b      *fakeBroker
	queue  string
	mu     sync.Mutex
	closed bool
}

func (s *fakeSender) SendMessage(ctx context.Context, m *azservicebus.Message, _ *azservicebus.SendMessageOptions) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return closedErr()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if lim := s.b.linkLimit; lim > 0 && messageSize(m)+fakeFraming > lim {
		return azservicebus.ErrMessageTooLarge
	}
	return s.b.send(s.queue, m)
}

// fakeFraming is what the fake counts for the AMQP encoding around a message's body and
// properties when it plays the SDK's size check.
const fakeFraming = 100

func (s *fakeSender) Close(context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

type fakeReceiver struct {
	b         *fakeBroker
	queue     string
	mu        sync.Mutex
	receiving bool
	closed    bool
}

func (r *fakeReceiver) ReceiveMessages(ctx context.Context, maxMessages int, _ *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, closedErr()
	}
	if r.receiving {
		r.mu.Unlock()
		return nil, errors.New("receiver is already receiving messages. ReceiveMessages() cannot be called concurrently")
	}
	r.receiving = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.receiving = false
		r.mu.Unlock()
	}()
	if maxMessages <= 0 || maxMessages > maxCredits {
		return nil, errors.New("maxMessages out of range")
	}
	b := r.b
	b.mu.Lock()
	if b.failReceive != nil {
		if err := b.failReceive(); err != nil {
			b.mu.Unlock()
			return nil, err
		}
	}
	b.mu.Unlock()
	for {
		b.mu.Lock()
		q := b.queueLocked(r.queue, !b.strict)
		if q == nil {
			b.mu.Unlock()
			return nil, notFound()
		}
		now := time.Now()
		next := b.tickLocked(q, now)
		if len(q.ready) > 0 {
			n := min(maxMessages, len(q.ready))
			out := make([]*azservicebus.ReceivedMessage, 0, n)
			for _, m := range q.ready[:n] {
				m.deliveryCount++
				m.lockedUntil = now.Add(b.lockDuration)
				var tok [16]byte
				_, _ = rand.Read(tok[:])
				q.locked[tok] = m
				out = append(out, received(m, tok))
			}
			q.ready = slices.Delete(q.ready, 0, n)
			b.mu.Unlock()
			return out, nil
		}
		wake := q.wake
		b.mu.Unlock()
		var due <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next) + time.Millisecond)
			due = t.C
		}
		var err error
		select {
		case <-wake:
		case <-due:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return nil, err
		}
	}
}

func received(m *fakeMsg, tok [16]byte) *azservicebus.ReceivedMessage {
	c := cloneMessage(m.m)
	lu, enq, seq := m.lockedUntil, m.enqueuedAt, m.seq
	rm := &azservicebus.ReceivedMessage{
		ApplicationProperties: c.ApplicationProperties,
		Body:                  c.Body,
		ContentType:           c.ContentType,
		CorrelationID:         c.CorrelationID,
		DeliveryCount:         m.deliveryCount,
		EnqueuedTime:          &enq,
		LockedUntil:           &lu,
		LockToken:             tok,
		PartitionKey:          c.PartitionKey,
		ScheduledEnqueueTime:  c.ScheduledEnqueueTime,
		SequenceNumber:        &seq,
		Subject:               c.Subject,
	}
	if c.MessageID != nil {
		rm.MessageID = *c.MessageID
	}
	if m.deadLetterReason != "" {
		r := m.deadLetterReason
		rm.DeadLetterReason = &r
	}
	return rm
}

// settle finds the locked message of rm; a missing or expired lock is CodeLockLost.
func (r *fakeReceiver) settle(op string, rm *azservicebus.ReceivedMessage, fn func(q *fakeQueue, m *fakeMsg)) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return closedErr()
	}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failSettle != nil {
		if err := b.failSettle(op, rm); err != nil {
			return err
		}
	}
	q := b.queueLocked(r.queue, false)
	if q == nil {
		return notFound()
	}
	b.tickLocked(q, time.Now())
	m, ok := q.locked[rm.LockToken]
	if !ok {
		return lockLost()
	}
	fn(q, m)
	return nil
}

func (r *fakeReceiver) CompleteMessage(_ context.Context, rm *azservicebus.ReceivedMessage, _ *azservicebus.CompleteMessageOptions) error {
	return r.settle("complete", rm, func(q *fakeQueue, m *fakeMsg) {
		delete(q.locked, rm.LockToken)
	})
}

func (r *fakeReceiver) AbandonMessage(_ context.Context, rm *azservicebus.ReceivedMessage, _ *azservicebus.AbandonMessageOptions) error {
	return r.settle("abandon", rm, func(q *fakeQueue, m *fakeMsg) {
		delete(q.locked, rm.LockToken)
		r.b.returnLocked(q, m)
	})
}

func (r *fakeReceiver) RenewMessageLock(_ context.Context, rm *azservicebus.ReceivedMessage, _ *azservicebus.RenewMessageLockOptions) error {
	return r.settle("renew", rm, func(q *fakeQueue, m *fakeMsg) {
		m.lockedUntil = time.Now().Add(r.b.lockDuration)
		lu := m.lockedUntil
		rm.LockedUntil = &lu
		r.b.renewals++
	})
}

// PeekMessages answers the start-up check and a browse's peeks ([fakeBroker.peek]): an
// unknown queue of a strict broker is CodeNotFound, as on Service Bus; it locks nothing.
func (r *fakeReceiver) PeekMessages(ctx context.Context, n int, o *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	r.b.mu.Lock()
	fail := r.b.failPeek
	q := r.b.queueLocked(r.queue, !r.b.strict)
	r.b.mu.Unlock()
	if fail != nil {
		if err := fail(ctx); err != nil {
			return nil, err
		}
	}
	if q == nil {
		return nil, notFound()
	}
	var from int64
	if o != nil && o.FromSequenceNumber != nil {
		from = *o.FromSequenceNumber
	}
	return r.b.peek(ctx, r.queue, from, n)
}

func (r *fakeReceiver) Close(context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}
