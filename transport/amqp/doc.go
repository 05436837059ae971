// Package amqp is the RabbitMQ (AMQP 0-9-1) transport behind amqp:// and amqps:// URLs,
// built on github.com/rabbitmq/amqp091-go.
//
// Import it for its side effect to make the schemes available to babelqueue.Open:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/amqp"
//
// or build a transport yourself with [Dial] (a URL and options such as a TLS
// configuration) or [New] (around a connection you opened).
//
// # Wire format
//
// Every message goes to the default exchange with the queue name as routing key, as a
// persistent delivery on a durable classic queue with no arguments (what the Python SDK
// declares, so both can share a queue). The body is the envelope, byte for byte. The
// envelope is projected onto native properties: type = URN, correlation_id = trace_id,
// message_id = meta.id, app_id = "babelqueue", content_type = "application/json", and
// the native-typed headers x-schema-version (integer), x-source-lang and x-attempts
// (integer, from [transport.Message.Attempts]). Out-of-band headers ride as extra string
// headers; a projected header always wins a name collision. On consume,
// [transport.Delivery.Headers] holds only those out-of-band headers: the projected ones
// and the ones RabbitMQ adds (x-death, x-first-death-*, x-last-death-*,
// x-delivery-count) are left out.
//
// # Confirms
//
// Every write is made on a channel in confirm mode. A delivery settled with writes (a
// retry, a release, a dead-letter write) is acknowledged only once the broker confirmed
// every write. By default those writes are pipelined ([WithPipelinedSettles]): Settle
// returns once they are published, and a nack, a lost channel or the confirm timeout
// makes the transport rewind the delivery itself (a nack with requeue), so it is
// delivered again; Close waits, bounded by its context, for the settlements in flight.
// With pipeline_settles=0 Settle waits for the confirms, and a nack, a lost channel or
// the confirm timeout returns a [transport.SettleWriteError] and acknowledges nothing.
// The user's own Publish waits for its confirm too, unless [WithoutPublishConfirms] (or
// publish_confirms=false in the URL) opts out.
//
// Every write is mandatory: a message no queue takes (its queue deleted while the
// application runs, or never declared with declare=false) comes back from RabbitMQ, and
// the write fails with an error wrapping [ErrUnroutable] instead of being confirmed and
// dropped: Publish returns it, a confirmed batch reports it at its index, and a settle
// write that comes back leaves the delivery unacknowledged (it is delivered again). The
// queue is then declared again by the next write to it, unless declare=false.
//
// # Delays
//
// RabbitMQ has no per-message delay without a plugin, so a delayed message goes to a
// per-delay queue named "<queue>.delay.<ms>", declared on demand with x-message-ttl =
// ms, x-dead-letter-exchange = "" and x-dead-letter-routing-key = <queue>. When the TTL
// expires RabbitMQ moves the message to the work queue. Because every message in one
// delay queue has the same TTL, expiry at the head of the queue is never held up by a
// longer one behind it. A retry-tier setup therefore creates one queue per tier.
//
// # Redeliveries and attempts
//
// Classic queues keep no delivery count, only the redelivered flag: a redelivered
// delivery reports [transport.Delivery.Redeliveries] = 1 (or x-delivery-count when a
// quorum queue declared elsewhere supplies one). The runtime counts attempts in the
// body ([transport.AttemptsFromBody]); a body that cannot be read falls back to the
// x-attempts header.
//
// # Connection loss
//
// The transport redials (with backoff) when the connection or a channel is lost, and
// each consumer resumes consuming. Deliveries that were not acknowledged come back from
// the broker. Settling a delivery whose channel died returns an error matching both
// [ErrDeliveryLost] and [transport.ErrAlreadySettled], and makes no settle write: the
// broker redelivers it. Rewinding such a delivery succeeds, as the broker redelivers it
// anyway.
//
// # URL
//
//	amqp://user:password@host:5672/vhost?heartbeat=10&connection_name=billing
//
// Query parameters: the RabbitMQ URI parameters heartbeat (seconds),
// connection_timeout (milliseconds), channel_max, auth_mechanism, and for amqps://
// certfile, keyfile, cacertfile and server_name_indication; and this package's
// publish_confirms (bool, default true), confirm_timeout (a Go duration or a number of
// seconds, default 30s), connection_name (shown by rabbitmqctl list_connections),
// declare (bool, default true: declare the work and dead-letter queues; delay queues are
// always declared) and pipeline_settles (bool, default true: see Confirms). This package's parameters follow the grammar of [transport.Query];
// the RabbitMQ URI parameters keep the URI specification's. Anything else, and a
// parameter given twice, is an error naming the parameter.
package amqp
