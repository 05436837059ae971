// Package amqp is the RabbitMQ (AMQP 0-9-1) transport behind amqp:// and amqps:// URLs,
// built on github.com/rabbitmq/amqp091-go. Import it for its side effect to make the
// schemes available to babelqueue.Open, or build a transport with [Dial] (a URL and
// options such as a TLS configuration) or [New] (around a connection you opened):
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/amqp"
//
// Every message goes to the default exchange with the queue name as routing key, as a
// persistent, mandatory message on a durable classic queue declared with no arguments
// (as the Python SDK declares it, so both can share a queue). The body is the envelope,
// byte for byte; the envelope is projected onto type (the URN), correlation_id
// (trace_id), message_id (meta.id), app_id ([AppID]), content_type ([ContentType]) and
// the native-typed headers [HeaderSchemaVersion], [HeaderSourceLang] and
// [HeaderAttempts]. Out-of-band headers ride as extra string headers (a projected one
// wins a name clash); on consume, [transport.Delivery.Headers] holds only those, not
// the projected ones nor those RabbitMQ adds (x-death, x-first-death-*,
// x-last-death-*, x-delivery-count). Classic queues keep no delivery count, only the
// redelivered flag: a redelivered delivery reports Redeliveries 1 (or x-delivery-count
// when a quorum queue declared elsewhere supplies one); the runtime counts attempts in
// the body.
//
// Every write is confirmed by the broker (publisher confirms), unless
// [WithoutPublishConfirms] opts the user's own Publish out; a delivery settled with
// writes is acknowledged only once they are confirmed ([WithPipelinedSettles]). A write
// no queue takes fails with [ErrUnroutable] instead of being dropped. A delayed message
// waits on a queue of its delay ([DelayQueue]).
//
// The transport redials a lost connection, each consumer resumes on a new channel,
// and [Transport.Publish] waits for the connection ([WithPublishWait]). A connection
// that brings no frame from the broker for 1.5 heartbeats (7.5 s by default:
// [WithHeartbeat]) is declared dead, logged and replaced. Settling a delivery whose
// channel died makes no write and returns [ErrDeliveryLost]: the broker redelivers it.
//
// # URL
//
//	amqp://user:password@host:5672/vhost?heartbeat=5&connection_name=billing
//
// Query parameters: RabbitMQ's URI parameters heartbeat (seconds), connection_timeout
// (milliseconds), channel_max, auth_mechanism and, for amqps://, certfile, keyfile,
// cacertfile and server_name_indication; and this package's publish_confirms,
// confirm_timeout, publish_wait, connection_name, declare and pipeline_settles, each
// the URL form of the option of that name, in the grammar of [transport.Query].
// Anything else, and a parameter given twice, is an error naming the parameter.
// docs/transports/amqp.md in the repository describes the whole binding.
package amqp
