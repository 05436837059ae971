package babelqueue

import "context"

// The hook contexts of one delivery: the receive and handled hooks share one, the
// settle hooks (told under the settle context) have the other.
const (
	hookReceive = iota
	hookSettle
)

// hookContexts are the contexts the hooks of one delivery are told under.
type hookContexts [2]handlerContext

// messageWithHooks is a handler's message and context with the hooks' contexts: one
// allocation for all of them when the app has hooks.
type messageWithHooks struct {
	messageAndContext
	hooks hookContexts
}

// hookContext is ctx as the hooks of the delivery are told it (i: hookReceive or
// hookSettle): for a body that is an envelope it carries the delivery's [Message], the
// one its handler is given, so [MessageFromContext] returns it in [ReceiveHook],
// [HandleHook] and [SettleHook] too. An observer pairs what its middleware saw in the
// handler with the settlement that followed this way (the otel module parents the span
// of a retry or dead-letter write on the handler's CONSUMER span). The contexts were
// allocated with the message, so a delivery's hooks allocate none.
func (x *delivery) hookContext(i int, ctx context.Context) context.Context {
	if x.message == nil {
		return ctx
	}
	if x.hooks == nil { // not reached: the message is allocated with its hook contexts when there are hooks
		return context.WithValue(ctx, messageKey{}, x.message)
	}
	hc := &x.hooks[i]
	hc.Context, hc.m = ctx, x.message
	return hc
}
