package amqp

import (
	"errors"
	"fmt"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Unroutable writes. Every publish is mandatory, so RabbitMQ answers a message it cannot
// route (its queue was deleted, or never declared with declare=false) with a
// basic.return before the basic.ack it still sends. Without the flag such a message is
// confirmed and dropped: a dead letter written to a deleted dead-letter queue would be
// lost without a trace.
//
// Each confirm channel registers a buffered NotifyReturn channel that a goroutine of its
// own always drains into a record, so a return never holds up amqp091-go's reader (which
// gives up on a listener after 5 s, dropping the return). amqp091-go hands a return to
// that channel before it processes the ack of the same publish, so once a
// DeferredConfirmation is acked the return, if any, is either recorded or still
// buffered: a waiter asks the goroutine to record what is buffered (sync) and then looks
// for its own publish (resolve).
//
// A publish is told apart by its routing key and message id, registered before it is
// sent. Two publishes in flight on one channel with the same key and id cannot be told
// apart, so a return for that key fails every publish registered under it until they are
// all resolved: a write that was in fact routed may be reported failed and made again
// (a duplicate), never the other way round.

// ErrUnroutable matches the error of a write RabbitMQ returned because no queue took it:
// the queue does not exist (deleted while the application runs, or never declared with
// declare=false). The message was not enqueued. The transport forgets that it declared
// the queue, so its next write to it declares it again (unless [WithoutDeclare]).
var ErrUnroutable = errors.New("amqp: message unroutable: no queue took it (the queue does not exist)")

// returnBuffer is the capacity of each confirm channel's NotifyReturn channel. Its
// goroutine drains it continuously; the buffer only absorbs bursts.
const returnBuffer = 16

// retKey identifies a publish for the returns: its routing key and message id.
type retKey struct{ key, id string }

// retState is what is known of the publishes in flight under one retKey.
type retState struct {
	n        int    // publishes registered and not resolved
	returned bool   // a return came for the key while they were in flight
	code     uint16 // the first return's reply code and text
	text     string
}

// returnTracker records the returns of one confirm channel.
type returnTracker struct {
	t    *Transport
	ch   chan amqp091.Return
	kick chan struct{} // a waiter asks for a sync

	mu      sync.Mutex
	synced  sync.Cond // broadcast when served moves or closed is set
	asked   uint64    // syncs asked for
	served  uint64    // syncs served: every return buffered when they were asked is recorded
	closed  bool      // the channel closed: every return it carried is recorded
	pending map[retKey]retState
}

// trackReturns registers a return listener on ch and starts the goroutine that drains it;
// the goroutine ends when ch closes.
func (t *Transport) trackReturns(ch *amqp091.Channel) *returnTracker {
	r := &returnTracker{
		t:       t,
		ch:      make(chan amqp091.Return, returnBuffer),
		kick:    make(chan struct{}, 1),
		pending: make(map[retKey]retState),
	}
	r.synced.L = &r.mu
	ch.NotifyReturn(r.ch)
	go r.run()
	return r
}

func (r *returnTracker) run() {
	var lost []amqp091.Return
	for {
		select {
		case ret, ok := <-r.ch:
			r.mu.Lock()
			if ok {
				lost = r.note(ret, lost)
			} else {
				r.close()
			}
			r.mu.Unlock()
			if !ok {
				r.report(lost)
				return
			}
		case <-r.kick:
			r.mu.Lock()
			lost = r.drain(lost)
			r.served = r.asked
			r.synced.Broadcast()
			done := r.closed
			r.mu.Unlock()
			if done {
				r.report(lost)
				return
			}
		}
		lost = r.report(lost)
	}
}

// drain records every return buffered now. r.mu is held.
func (r *returnTracker) drain(lost []amqp091.Return) []amqp091.Return {
	for {
		select {
		case ret, ok := <-r.ch:
			if !ok {
				r.close()
				return lost
			}
			lost = r.note(ret, lost)
		default:
			return lost
		}
	}
}

// close records that the channel closed. r.mu is held.
func (r *returnTracker) close() {
	r.closed = true
	r.served = r.asked
	r.synced.Broadcast()
}

// note records one return. A return no publish in flight is registered for (a publish
// not waiting for its confirm, or one that already failed otherwise) goes to lost, to be
// logged. r.mu is held.
func (r *returnTracker) note(ret amqp091.Return, lost []amqp091.Return) []amqp091.Return {
	k := retKey{ret.RoutingKey, ret.MessageId}
	st, ok := r.pending[k]
	if !ok {
		ret.Body, ret.Headers = nil, nil
		return append(lost, ret)
	}
	if !st.returned {
		st.returned, st.code, st.text = true, ret.ReplyCode, ret.ReplyText
		r.pending[k] = st
	}
	return lost
}

// report logs returns nobody waits for and makes the transport declare their queues
// again. It runs without r.mu, and never waits for the transport's lock.
func (r *returnTracker) report(lost []amqp091.Return) []amqp091.Return {
	if len(lost) == 0 {
		return lost
	}
	queues := make([]string, 0, len(lost))
	for _, ret := range lost {
		r.t.log.Warn("amqp: the broker returned a message it could not route: its queue does not exist, and the message was not enqueued",
			"queue", ret.RoutingKey, "message_id", ret.MessageId, "reply_code", ret.ReplyCode, "reply_text", ret.ReplyText)
		queues = append(queues, ret.RoutingKey)
	}
	go func() {
		for _, q := range queues {
			r.t.forget(q)
		}
	}()
	return lost[:0]
}

// register records a publish about to be sent under k.
func (r *returnTracker) register(k retKey) {
	r.mu.Lock()
	st := r.pending[k]
	st.n++
	r.pending[k] = st
	r.mu.Unlock()
}

// resolve forgets one publish registered under k and reports whether a return came for
// k while it was in flight (with the reply code and text). Call sync first when the
// publish was acked, so that its return, if any, is recorded.
func (r *returnTracker) resolve(k retKey) (returned bool, code uint16, text string) {
	r.mu.Lock()
	st := r.pending[k]
	st.n--
	if st.n <= 0 {
		delete(r.pending, k)
	} else {
		r.pending[k] = st
	}
	r.mu.Unlock()
	return st.returned, st.code, st.text
}

// sync returns once every return handed to the listener before the call is recorded.
func (r *returnTracker) sync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.asked++
	mine := r.asked
	select {
	case r.kick <- struct{}{}:
	default: // a sync is asked already; it serves this one too, or asks again
	}
	for r.served < mine && !r.closed {
		r.synced.Wait()
	}
}

// sent is one publish on a confirm channel: its deferred confirm and, when a waiter
// checks for its return, the tracker it is registered with.
type sent struct {
	dc  *amqp091.DeferredConfirmation
	rt  *returnTracker // nil when nobody checks for a return
	key retKey
}

// checkReturns finishes the publishes of ss once their confirms were awaited: errs[i]
// is the outcome of ss[i]'s confirm. A publish that was acked and returned gets an error
// wrapping [ErrUnroutable], and its queue is forgotten by the declare cache. Every
// registered publish is resolved, failed or not.
func (t *Transport) checkReturns(ss []sent, errs []error) {
	var last *returnTracker
	for i, s := range ss {
		if s.rt == nil {
			continue
		}
		if errs[i] == nil && s.rt != last {
			s.rt.sync() // one sync serves every publish acked before it
			last = s.rt
		}
		returned, code, text := s.rt.resolve(s.key)
		if errs[i] == nil && returned {
			errs[i] = t.unroutable(s.key.key, code, text)
		}
	}
}

// checkReturn is checkReturns for one publish.
func (t *Transport) checkReturn(s sent, err error) error {
	if s.rt == nil {
		return err
	}
	if err == nil {
		s.rt.sync()
	}
	returned, code, text := s.rt.resolve(s.key)
	if err == nil && returned {
		return t.unroutable(s.key.key, code, text)
	}
	return err
}

// unroutable is the error of a write to queue that the broker returned; the declare
// cache forgets queue, so the next write declares it again.
func (t *Transport) unroutable(queue string, code uint16, text string) error {
	t.forget(queue)
	return fmt.Errorf("amqp: write to %q returned by the broker (%d %s): %w", queue, code, text, ErrUnroutable)
}
