package babelqueue

import (
	"context"

	"github.com/babelqueue-go/babelqueue/envelope"
)

// Middleware wraps a [Handler], as net/http middleware wraps an http.Handler: it runs
// code before and after the handler, may return without calling it (a remembered
// message id), and may turn its error into [NoRetry] or [Requeue].
//
// Order: app-wide middleware ([App.Use]) runs outside per-handler middleware (given to
// [App.Handle]); within each list the first runs outermost. With
//
//	app.Use(A, B)
//	app.Handle(urn, h, C, D)
//
// a delivery runs A, B, C, D, then h, and returns through D, C, B, A. Middleware runs
// only for envelopes that have a handler: poison bodies, unknown URNs and schema-version
// rejections are settled without it (an [Observer] sees those).
type Middleware func(Handler) Handler

// Use adds app-wide middleware around every handler, registered before or after. Call it
// before Run.
func (a *App) Use(mw ...Middleware) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.appMW = append(a.appMW, mw...)
	for _, r := range a.handlers {
		r.chain = chain(chain(r.h, r.mw), a.appMW)
	}
}

// chain wraps h in mw, mw[0] outermost.
func chain(h Handler, mw []Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] != nil {
			h = mw[i](h)
		}
	}
	return h
}

// Outgoing is a message on its way to the broker, as [PublishMiddleware] sees it: the
// envelope is made but not yet encoded.
type Outgoing struct {
	// Envelope is the new envelope. Middleware may replace its Data (field encryption)
	// but must leave the rest of the frame alone.
	Envelope *envelope.Envelope
	// Queue is the queue it goes to.
	Queue string
	// Key is the record key; nil is no key.
	Key []byte
	// Headers are the out-of-band headers; middleware may add to them (a W3C
	// traceparent). Never nil.
	Headers map[string]string
}

// PublishFunc sends an [Outgoing] message: the end of the publish chain encodes the
// envelope and hands it to the transport.
type PublishFunc func(ctx context.Context, m *Outgoing) error

// PublishMiddleware wraps publishing, as [Middleware] wraps handlers: a schema check
// before anything reaches the broker, field encryption, a PRODUCER span and its
// traceparent header.
type PublishMiddleware func(PublishFunc) PublishFunc

// UsePublish adds publish middleware around every [App.Publish] (and [App.Prepare]),
// the first outermost. Call it before publishing.
func (a *App) UsePublish(mw ...PublishMiddleware) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pubMW = append(a.pubMW, mw...)
	a.publish = chainPublish(a.send, a.pubMW)
}

// chainPublish wraps p in mw, the first outermost. The chain's entry gives an
// [Outgoing] without headers an empty map, so middleware may add to it; without
// middleware none is made.
func chainPublish(p PublishFunc, mw []PublishMiddleware) PublishFunc {
	wrapped := false
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] != nil {
			p = mw[i](p)
			wrapped = true
		}
	}
	if !wrapped {
		return p
	}
	return func(ctx context.Context, o *Outgoing) error {
		if o.Headers == nil {
			o.Headers = map[string]string{}
		}
		return p(ctx, o)
	}
}
