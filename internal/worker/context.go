package worker

import "context"

// MessageKey is the context key of the message a handler (and the hooks of its
// delivery) run for: the root package's MessageFromContext reads it.
type MessageKey struct{}

// handlerContext is the context a handler runs under: the worker's handler context
// carrying the message. It is allocated with the message.
type handlerContext[M any] struct {
	context.Context
	m *M
}

// Value returns the message for MessageKey, else asks the parent.
func (c *handlerContext[M]) Value(key any) any {
	if key == (MessageKey{}) {
		return c.m
	}
	return c.Context.Value(key)
}

// messageAndContext puts a handler's message and context in one allocation.
type messageAndContext[M any] struct {
	msg M
	ctx handlerContext[M]
}

// The hook contexts of one delivery: the receive and handled hooks share one, the
// settle hooks (told under the settle context) have the other.
const (
	hookReceive = iota
	hookSettle
)

// hookContexts are the contexts the hooks of one delivery are told under.
type hookContexts[M any] [2]handlerContext[M]

// messageWithHooks is a handler's message and context with the hooks' contexts: one
// allocation for all of them when the app has hooks.
type messageWithHooks[M any] struct {
	messageAndContext[M]
	hooks hookContexts[M]
}

// hookContext is ctx as the hooks of the delivery are told it (i: hookReceive or
// hookSettle): for a body that is an envelope it carries the delivery's message, the
// one its handler is given, so MessageFromContext returns it in the receive, handle
// and settle hooks too. An observer pairs what its middleware saw in the handler with
// the settlement that followed this way (the otel module parents the span of a retry
// or dead-letter write on the handler's CONSUMER span). The contexts were allocated
// with the message, so a delivery's hooks allocate none.
func (x *delivery[M]) hookContext(i int, ctx context.Context) context.Context {
	if x.message == nil {
		return ctx
	}
	if x.hooks == nil { // not reached: the message is allocated with its hook contexts when there are hooks
		return context.WithValue(ctx, MessageKey{}, x.message)
	}
	hc := &x.hooks[i]
	hc.Context, hc.m = ctx, x.message
	return hc
}
