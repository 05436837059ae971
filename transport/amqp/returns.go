package amqp

import (
	"errors"
	"fmt"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Unroutable writes. Every publish is mandatory, so RabbitMQ answers a message no queue
// takes with a basic.return before the basic.ack it still sends; without the flag such
// a message would be confirmed and dropped.
//
// Each confirm channel's NotifyReturn channel is drained into a record by a goroutine
// of its own, so a return never holds up amqp091-go's reader (which drops a return a
// listener does not take within 5 s). amqp091-go hands a return over before it
// processes the ack of the same publish, so once a confirm is acked its return, if any,
// is recorded or still buffered: the waiter asks the goroutine to record what is
// buffered (sync), then looks for its own publish (resolve). A publish is told apart by
// its routing key and message id; a return for a key fails every publish in flight
// under it (a duplicate at worst, never a loss).

// ErrUnroutable matches the error of a write RabbitMQ returned because no queue took it:
// the queue does not exist (deleted while the application runs, or never declared with
// declare=false). The message was not enqueued. The transport forgets that it declared
// the queue, so its next write to it declares it again (unless [WithoutDeclare]).
var ErrUnroutable = errors.New("amqp: message unroutable: no queue took it (the queue does not exist)")

// returnBuffer is the capacity of each confirm channel's NotifyReturn channel: it only
// absorbs bursts.
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

// trackReturns registers a return listener on ch and starts the goroutine that drains
// it until ch closes.
func (t *Transport) trackReturns(ch *amqp091.Channel) *returnTracker {
	r := &returnTracker{t: t, ch: make(chan amqp091.Return, returnBuffer), kick: make(chan struct{}, 1),
		pending: make(map[retKey]retState)}
	r.synced.L = &r.mu
	ch.NotifyReturn(r.ch)
	go r.run()
	return r
}

func (r *returnTracker) run() {
	for closed := false; !closed; {
		var ret amqp091.Return
		ok, kicked := true, false
		select {
		case ret, ok = <-r.ch:
		case <-r.kick:
			kicked = true
		}
		r.mu.Lock()
		var lost []amqp091.Return
		switch {
		case kicked: // record every return buffered now
			for drained := false; !drained && !r.closed; {
				select {
				case ret, ok := <-r.ch:
					if !ok {
						r.closed = true
						break
					}
					lost = r.note(ret, lost)
				default:
					drained = true
				}
			}
		case ok:
			lost = r.note(ret, lost)
		default:
			r.closed = true
		}
		if kicked || r.closed {
			r.served = r.asked
			r.synced.Broadcast()
		}
		closed = r.closed
		r.mu.Unlock()
		r.report(lost)
	}
}

// note records one return (r.mu held). A return no publish in flight is registered for
// (a publish not waiting for its confirm, or one that failed already) goes to lost.
func (r *returnTracker) note(ret amqp091.Return, lost []amqp091.Return) []amqp091.Return {
	k := retKey{ret.RoutingKey, ret.MessageId}
	st, ok := r.pending[k]
	if !ok {
		return append(lost, amqp091.Return{RoutingKey: ret.RoutingKey, MessageId: ret.MessageId, ReplyCode: ret.ReplyCode, ReplyText: ret.ReplyText})
	}
	if !st.returned {
		st.returned, st.code, st.text = true, ret.ReplyCode, ret.ReplyText
		r.pending[k] = st
	}
	return lost
}

// report logs returns nobody waits for and makes the transport declare their queues
// again. It runs without r.mu, and never waits for the transport's lock.
func (r *returnTracker) report(lost []amqp091.Return) {
	for _, ret := range lost {
		r.t.log.Warn("amqp: the broker returned a message it could not route: its queue does not exist, and the message was not enqueued",
			"queue", ret.RoutingKey, "message_id", ret.MessageId, "reply_code", ret.ReplyCode, "reply_text", ret.ReplyText)
		go r.t.forget(ret.RoutingKey)
	}
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
	defer r.mu.Unlock()
	st := r.pending[k]
	if st.n--; st.n <= 0 {
		delete(r.pending, k)
	} else {
		r.pending[k] = st
	}
	return st.returned, st.code, st.text
}

// sync returns once every return handed to the listener before the call is recorded.
func (r *returnTracker) sync() {
	r.mu.Lock()
	defer r.mu.Unlock()
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

// resolve forgets the publishes of ss registered for their returns.
func resolve(ss ...sent) {
	for _, s := range ss {
		if s.rt != nil {
			s.rt.resolve(s.key)
		}
	}
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
		if returned, code, text := s.rt.resolve(s.key); errs[i] == nil && returned {
			t.forget(s.key.key)
			errs[i] = fmt.Errorf("amqp: write to %q returned by the broker (%d %s): %w", s.key.key, code, text, ErrUnroutable)
		}
	}
}

// checkReturn is checkReturns for one publish.
func (t *Transport) checkReturn(s sent, err error) error {
	errs := [1]error{err}
	t.checkReturns([]sent{s}, errs[:])
	return errs[0]
}
