// Package pulsar is the transport behind pulsar:// and pulsar+ssl:// URLs: Apache
// Pulsar spoken with github.com/apache/pulsar-client-go. docs/transports/pulsar.md
// says more, with the tests behind each statement.
//
// Import it for its side effect to make the schemes available to transport.Open (and
// so to babelqueue.Open):
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/pulsar"
//
//	t, err := transport.Open(ctx, "pulsar://127.0.0.1:6650")
//
// or build a transport around a client you built yourself (TLS, token or OAuth2
// authentication) with [New].
//
// # URL
//
//	pulsar://host[:port][,host[:port]…][?param=value&…]
//	pulsar+ssl://…                         (TLS; default port 6651)
//
// The port defaults to 6650 (pulsar) or 6651 (pulsar+ssl). A URL carries no
// credentials: use [New] with an authenticated client. Query parameters:
//
//	subscription       the subscription name (default "babelqueue")
//	subscription_type  shared (default), exclusive, failover or key_shared
//	connect_timeout    how long Open and each new connection wait for the broker (default 10s)
//	send_timeout       how long a write, or a pipelined acknowledgement, waits for the broker's answer when its context has no deadline (default 30s)
//	nack_delay         how long the broker waits before it redelivers a rewound delivery (default 1s)
//	max_message_size   the broker's maxMessageSize in bytes (default 5242880)
//	receiver_queue     how many messages a consumer fetches ahead of its workers (default 1000)
//	admin              the admin REST API that Browse reads through (default http://<first host>:8080, https://…:8443 for pulsar+ssl)
//	pipeline_settles   0 makes Settle wait for the broker's answers to its writes and acknowledgement (default 1: pipelined)
//
// Durations are Go durations ("1500ms", "30s") or a bare number of seconds, the grammar
// every BabelQueue URL shares. Any other parameter, a parameter given twice, a malformed
// or out-of-range value, a user, a path or a missing host is an error from Open that
// names the part at fault; a bad parameter, like a bad value given to an option
// function, matches babelqueue.ErrInvalidOption. [OpenURL] checks that a broker of the
// URL accepts a connection within connect_timeout and otherwise fails with one error
// matching [ErrUnreachable]. The client logs through the transport's logger, marked
// component=pulsar-client, its Info lines lowered to Debug.
//
// # The message (binding §5)
//
// A queue is the Pulsar topic of the same name ("orders" is
// persistent://public/default/orders); its dead-letter queue is the name plus ".dlq".
// The payload is the envelope bytes, never re-encoded, projected onto the string
// properties bq-job (the URN), bq-trace-id, bq-message-id, bq-schema-version,
// bq-source-lang and bq-attempts; the event time is meta.created_at. Out-of-band headers
// ride as further properties and never replace a projected one. On consume
// [transport.Delivery.Redeliveries] is Pulsar's 0-based redelivery count and the
// attempts header is bq-attempts. A key is the Pulsar message key; the Go client cannot
// send an empty key, so an empty key is written as no key. An empty body is refused
// ([ErrEmptyBody]): Pulsar Go consumers discard an empty payload. Every write is checked
// against max_message_size less [MetadataReserve] first ([transport.ErrTooLarge]).
//
// # Settlement
//
// Every write is a send on a producer cached per topic, counted once the broker
// confirmed it. Ack sends the settle writes, and acknowledges the delivery only once
// every write is confirmed; a write that fails acknowledges nothing, and the writes
// before it stay made (Pulsar cannot take them back). Rewind is a negative
// acknowledgement: the broker redelivers the message after nack_delay with its
// redelivery count one higher. A retry is a re-publish to the same topic with
// bq-attempts+1 and an ack of the original, so max_attempts bounds it on every
// subscription type. HandOff is not offered.
//
// Settlements are pipelined by default ([WithPipelinedSettles]): Settle of an Ack hands
// its writes to their producers, or its acknowledgement to the consumer, and returns;
// the delivery is acknowledged once every write is confirmed, or rewound when one
// fails or has no answer within send_timeout, so nothing is acknowledged without its
// writes and nothing is lost. Acknowledgements wait for the broker's answer (an ack the
// client only grouped would be lost with a crash), and those made while one request is
// on its way go together in the next. At most max(256, prefetch) settlements are in
// flight per consumer, and Close (of the consumer and of the transport) waits for them,
// bounded by its context. A consumer killed with settlements in flight leaves those
// messages unacknowledged: they are delivered again, and their writes made again. A
// consumer opened with [transport.ConsumeOptions.Transactional] (a DLQ redrive) never
// pipelines.
//
// Consumers subscribe at the earliest position. The receiver queue
// ([WithReceiverQueueSize]) is independent of the prefetch, which bounds the deliveries
// handed out and unsettled ([transport.ConsumeOptions.Prefetch]). While settlements
// keep failing, Receive backs off (50 ms doubling to 2 s) and the failures are logged
// with their cause. Closing a consumer gives its unsettled deliveries back to the
// broker; settling one of them afterwards fails with an error matching
// transport.ErrClosed.
//
// # Delays
//
// [transport.Message.Delay] uses Pulsar's delayed delivery (DeliverAfter), which the
// broker honours only on Shared and Key_Shared subscriptions. With exclusive or
// failover the transport reports no delay support, so the runtime re-publishes retry
// tiers at once; there the broker may report a redelivery count of zero, and the
// runtime's own attempts counter bounds retries.
package pulsar
