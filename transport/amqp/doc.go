// Package amqp is the RabbitMQ (AMQP 0-9-1) transport behind amqp:// and amqps:// URLs,
// built on github.com/rabbitmq/amqp091-go. Import it for its side effect to make the
// schemes available to babelqueue.Open, or build a transport with [Dial] (a URL and
// options such as a TLS configuration) or [New] (around a connection you opened):
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/amqp"
//
// Every message goes to the default exchange with the queue name as routing key, as a
// persistent, mandatory message on a durable queue (classic, declared with no arguments
// as the Python SDK declares it; or quorum with queue_type=quorum), confirmed by the
// broker. The body is the envelope, byte for byte, projected onto type (the URN),
// correlation_id, message_id, [AppID], [ContentType] and the headers
// [HeaderSchemaVersion], [HeaderSourceLang] and [HeaderAttempts]; out-of-band headers
// ride as extra string headers.
//
//	amqp://user:password@host:5672/vhost?heartbeat=5&connection_name=billing
//	amqp://user:password@10.0.0.1:5672,10.0.0.2:5672,10.0.0.3:5672/?queue_type=quorum
//
// A cluster's nodes are listed in the host part ([driverkit.Hosts]) and dialled in turn;
// a lost connection is dialled again, consumers resume by themselves and publishes wait
// for it ([WithPublishWait]). The query takes RabbitMQ's URI parameters, the shared TLS
// ones, connect_timeout, max_message_size and this package's own (each the URL form of
// the option of that name); anything else, and a parameter given twice, is an error
// naming it. docs/transports/amqp.md in the repository describes the whole binding.
package amqp
