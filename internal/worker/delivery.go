package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// UnsupportedSchemaRoute is the reserved route prefix of deliveries rejected by the
// schema-version gate; the root package exports the same string.
const UnsupportedSchemaRoute = "babelqueue:unsupported-schema-version:"

// delivery is what the worker learned about one delivery before settling it: what the
// hooks are told, and the message and contexts made for its handler.
type delivery[M any] struct {
	Delivery
	message *M
	hctx    *handlerContext[M] // the handler's context, allocated with the message
	hooks   *hookContexts[M]   // the hooks' contexts, allocated with it when there are hooks
}

// id is the envelope's meta.id, "" without an envelope.
func (x *delivery[M]) id() string {
	if x.Env == nil {
		return ""
	}
	return x.Env.Meta.ID
}

// process is the path of one delivery: read it, tell the receive hooks, run its
// handler, take its route from settle.Decide and carry it out. It reports false when the
// worker was abandoned while the handler ran (Run has given the delivery back and
// returned).
func (w *worker[M]) process(d *transport.Delivery, now time.Time) bool {
	p := w.p
	x := p.classify(d)
	hookCtx := w.ctx
	if p.obs.any() {
		hookCtx = x.hookContext(hookReceive, w.ctx)
		if p.obs.Receive {
			p.hooks.Received(hookCtx, x.Delivery)
		}
	}
	var settleStart time.Time // when the handler returned, if a hook timed it
	if x.Env != nil {
		h, ok := p.app.Handler(x.Env.Job)
		if !ok {
			x.Facts.Kind = settle.UnknownURN
			x.Cause = p.app.UnknownURN(x.Env.Job)
		} else {
			w.mu.Lock()
			w.current, w.busy = x, true
			w.mu.Unlock()
			var start time.Time
			if p.obs.Handle {
				start = time.Now()
			}
			err := w.invoke(h, x.message, x.hctx)
			w.mu.Lock()
			w.current, w.busy = delivery[M]{}, false
			abandoned := w.abandoned
			w.mu.Unlock()
			if abandoned {
				return false
			}
			if p.obs.Handle {
				// One clock read ends the handler's time and starts the settlement's.
				took := time.Since(start)
				settleStart = start.Add(took)
				p.hooks.Handled(hookCtx, x.Delivery, start, took, err)
			}
			if err != nil {
				x.Facts.Kind, x.Facts.After, x.Cause = w.answer(err)
			}
		}
	}
	route := settle.Decide(x.Facts, p.cfg.Policy, p.cfg.Caps)
	w.settle(w.settleContext(now), x, &route, settleStart)
	return true
}

// classify reads a delivery: the schema-version gate, the body, the attempts. A body
// that is an envelope gets its message and the contexts that carry it, in one
// allocation.
func (p *Pool[M]) classify(d *transport.Delivery) delivery[M] {
	caps := &p.cfg.Caps
	x := delivery[M]{Delivery: Delivery{D: d}}
	if caps.SchemaGate {
		if ok, shown := settle.GateSchemaVersion(d.SchemaVersion, caps.SchemaGateAcceptsInteger); !ok {
			x.Facts = settle.Facts{Kind: settle.SchemaRejected, Attempts: settle.ReconcileAttempts(caps.Attempts, 0, false, d)}
			x.Route = UnsupportedSchemaRoute + shown
			x.Cause = fmt.Errorf("babelqueue: unsupported schema version %q", shown)
			return x
		}
	}
	env, err := envelope.Decode(d.Body)
	if err == nil {
		err = env.Accepts()
	}
	if err != nil {
		x.Facts = settle.Facts{Kind: settle.Poison, Attempts: poisonAttempts(caps.Attempts, d)}
		x.Cause = err
		return x
	}
	x.Env = env
	x.Route = env.Job
	attempts := settle.ReconcileAttempts(caps.Attempts, env.Attempts, true, d)
	x.Facts = settle.Facts{Kind: settle.Handled, Attempts: attempts}
	var mc *messageAndContext[M]
	if p.obs.any() {
		mh := &messageWithHooks[M]{}
		mc, x.hooks = &mh.messageAndContext, &mh.hooks
	} else {
		mc = &messageAndContext[M]{}
	}
	p.app.FillMessage(&mc.msg, env, attempts, d)
	mc.ctx.m = &mc.msg
	x.message, x.hctx = &mc.msg, &mc.ctx
	return x
}

// poisonAttempts is the attempts counter of a poison body: the transport's attempts
// header (a bounded retry re-publishes poison unchanged and counts there) or the
// body's own attempts member when it is a readable integer, whichever is larger
// (Kafka: the header when present, as for every record). It is never below 0: the
// Python SDK counts a poison body's negative attempts as 0 too.
func poisonAttempts(rule transport.AttemptsRule, d *transport.Delivery) int {
	n, ok := envelope.PeekAttempts(d.Body)
	if rule == transport.AttemptsHeaderAuthoritative {
		return max(settle.ReconcileAttempts(rule, n, ok, d), 0)
	}
	got := settle.ReconcileAttempts(rule, 0, false, d)
	if ok && n > got {
		got = n
	}
	return got
}

// invoke runs h, turning a panic into a failure. Without a handler timeout it runs on
// the worker's goroutine; with one, on its own goroutine, and a handler that runs past
// the timeout has failed (its context is cancelled; what it does later is ignored).
func (w *worker[M]) invoke(h Handler[M], m *M, hc *handlerContext[M]) error {
	app := w.p.app
	hc.Context = w.hctx
	timeout := w.p.cfg.HandlerTimeout
	if timeout <= 0 {
		return callHandler(app, hc, h, m)
	}
	hctx, cancel := context.WithTimeout(hc, timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- callHandler(app, hctx, h, m) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return app.TimedOut(timeout)
	}
}

// callHandler calls h, turning a panic into the app's panic failure.
func callHandler[M any](app App[M], ctx context.Context, h Handler[M], m *M) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = app.Panicked(r, debug.Stack())
		}
	}()
	return h(ctx, m)
}
