// Package amqp is the RabbitMQ (AMQP 0-9-1) transport behind amqp:// and amqps:// URLs,
// built on github.com/rabbitmq/amqp091-go. Import it for its side effect to make the
// schemes available to babelqueue.Open, or build a transport with [Dial] (a URL and
// options such as a TLS configuration) or [New] (around a connection you opened):
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/amqp"
//
// Every message goes to the default exchange with the queue name as routing key, as a
// persistent, mandatory message on a durable classic queue declared with no arguments
// (as the Python SDK declares it, so both can share a queue), confirmed by the broker.
// The body is the envelope, byte for byte, projected onto type (the URN),
// correlation_id (trace_id), message_id (meta.id), [AppID], [ContentType] and the
// native-typed headers [HeaderSchemaVersion], [HeaderSourceLang] and [HeaderAttempts].
// Out-of-band headers ride as extra string headers (a projected one wins a clash); on
// consume, [transport.Delivery.Headers] holds only those, not the projected ones nor
// those RabbitMQ adds (x-death, x-first-death-*, x-last-death-*, x-delivery-count).
// Classic queues keep no delivery count: a redelivered delivery reports Redeliveries 1
// (or a quorum queue's x-delivery-count); the runtime counts attempts in the body.
//
// # URL
//
//	amqp://user:password@host:5672/vhost?heartbeat=5&connection_name=billing
//	amqp://user:password@10.0.0.1:5672,10.0.0.2:5672,10.0.0.3:5672/?queue_type=quorum
//
// A cluster's nodes are listed in the host part ([driverkit.Hosts]): the first
// connection goes to the first node that answers; when a connection is lost the
// transport redials the nodes in turn from the next one (round-robin), consumers
// resume on the new connection by themselves and publishes wait for it ([WithPublishWait]).
// queue_type=quorum ([WithQueueType]) declares quorum queues, replicated on the nodes.
//
// Query parameters: RabbitMQ's URI parameters heartbeat (seconds), connection_timeout
// (milliseconds), channel_max, auth_mechanism and, for amqps://, certfile, keyfile,
// cacertfile and server_name_indication; and this package's publish_confirms,
// confirm_timeout, publish_wait, connection_name, declare, pipeline_settles and
// queue_type, each
// the URL form of the option of that name, in the grammar of [transport.Query].
// Anything else, and a parameter given twice, is an error naming the parameter.
// docs/transports/amqp.md in the repository describes the whole binding.
package amqp
