// Package pulsar is the transport behind pulsar:// and pulsar+ssl:// URLs: Apache
// Pulsar spoken with github.com/apache/pulsar-client-go.
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
//	send_timeout       how long a write waits for the broker's confirmation when its context has no deadline (default 30s)
//	nack_delay         how long the broker waits before it redelivers a rewound delivery (default 1s)
//	max_message_size   the broker's maxMessageSize in bytes (default 5242880)
//	admin              the admin REST API that Browse reads through (default http://<first host>:8080, https://…:8443 for pulsar+ssl)
//	pipeline_settles   0 makes Settle wait for the receipts of the runtime's settle writes (default 1: pipelined; see below)
//
// Durations are Go durations ("1500ms", "30s") or a bare number of seconds, the grammar
// every BabelQueue URL shares. Any other parameter, a parameter given twice, a malformed
// or out-of-range value, a user, a path or a missing host is an error from Open that
// names the part at fault.
//
// [OpenURL] checks that a broker of the URL accepts a connection within connect_timeout
// and otherwise fails with one error matching [ErrUnreachable] (the Pulsar client itself
// would retry a missing broker until each operation's timeout, logging every attempt).
// The client's log lines go through the transport's logger, marked
// component=pulsar-client, its Info lines lowered to Debug; opened through
// transport.Open (babelqueue.Open) that is the App's logger.
//
// # Message size
//
// The broker refuses a message larger than its maxMessageSize, counting the payload with
// its metadata. Every write, Publish and settle write alike, is checked first: the body,
// the properties and the key together may be at most max_message_size less
// [MetadataReserve] bytes (left for the producer name, sequence id and timestamps the
// client adds). A larger write fails with a *transport.TooLargeError (matching
// transport.ErrTooLarge) naming the size and that limit; a settle write refused so also
// matches transport.ErrSettleWrite and acknowledges nothing.
//
// # Topics
//
// A BabelQueue queue is the Pulsar topic of the same name, used as given: a bare name
// such as "orders" is what Pulsar resolves to persistent://public/default/orders, and a
// full topic name ("persistent://tenant/ns/orders") is used as it is. The dead-letter
// queue is the queue name plus ".dlq" (persistent://tenant/ns/orders.dlq). Topics are
// created on first use when the broker allows it (allowAutoTopicCreation, on by
// default).
//
// # The message (binding §5)
//
// The payload is the envelope bytes, never re-encoded. On produce the envelope is
// projected onto string properties:
//
//	bq-job             the URN
//	bq-trace-id        trace_id
//	bq-message-id      meta.id
//	bq-schema-version  meta.schema_version ("1")
//	bq-source-lang     meta.lang
//	bq-attempts        attempts ([transport.Message.Attempts])
//
// The event time is meta.created_at. A raw write (a poison dead-letter body) projects
// only what is known, and always bq-attempts. Out-of-band headers
// ([transport.Message.Headers]) ride as further properties; they never replace a
// projected one. On consume [transport.Delivery.Headers] holds only those,
// [transport.Delivery.Redeliveries] is Pulsar's 0-based redelivery count and the
// attempts header is bq-attempts. Pulsar has no schema-version gate.
//
// A record key ([transport.Message.Key]) is the Pulsar message key (partition key), so
// Key_Shared subscriptions keep per-key order. Keys are byte-exact, but the Pulsar Go
// client neither sends an empty key nor tells an empty key from a missing one: on this
// transport an empty key is written as no key and comes back as nil.
//
// # Settlement
//
// Every write, the user's Publish and each settle write, is a send on a producer cached
// per topic (synchronous, but for pipelined settle writes, below); it counts once the
// broker confirmed it. Settle with Ack
// sends the settle writes, waits for each confirmation and only then acknowledges the
// delivery; when a write fails nothing is acknowledged and the error matches
// [transport.ErrSettleWrite], and the runtime then rewinds the delivery. The writes are
// made in order and the first that fails stops them: those before it stay made (Pulsar
// cannot take them back) and are made again when the redelivery is settled, so a
// consumer of a retry or dead-letter topic sees them at least once. Rewind is a
// negative acknowledgement: the broker redelivers the message after the nack
// redelivery delay (1s by default, [WithNackRedeliveryDelay]) with its redelivery count
// one higher. A retry is a re-publish to the same topic with bq-attempts+1 and an ack of
// the original, so the runtime's max_attempts bounds it on every subscription type.
//
// The runtime's settle writes are pipelined by default ([WithPipelinedSettles];
// pipeline_settles=0 for the awaited Ack above): Settle checks the writes, hands them
// to their producers (SendAsync) and returns, and the delivery is acknowledged once
// every write's receipt is in, or rewound (negatively acknowledged) when one fails or
// has none within the send timeout, so nothing is acknowledged without its writes and
// nothing is lost. Receive backs off while pipelined writes keep failing; at most
// max(256, prefetch) settlements are in flight per consumer, and Close (of the consumer
// and of the transport) waits for them, bounded by its context. A consumer opened with
// [transport.ConsumeOptions.Transactional] (a DLQ redrive) never pipelines.
//
// Consumers subscribe at the earliest position, so messages published before the
// subscription first existed are received. The client's receiver queue is the
// prefetch, and no more than [transport.ConsumeOptions.Prefetch] deliveries are handed
// out and unsettled at a time. While settlements keep failing, Receive backs off (50 ms
// doubling to 2 s) and the failures are logged with their cause. Closing a consumer
// gives its unsettled deliveries back to the broker; settling one of them afterwards
// fails with an error matching transport.ErrClosed. HandOff is not offered (Pulsar has
// no redrive the runtime hands work to) and is refused with transport.ErrUnsupported.
//
// # Delays
//
// [transport.Message.Delay] uses Pulsar's delayed delivery (DeliverAfter), which the
// broker honours only on Shared and Key_Shared subscriptions. With exclusive or
// failover the transport reports no delay support, so the runtime re-publishes retry
// tiers at once. The broker counts redeliveries (Delivery.Redeliveries) on Shared and
// Key_Shared subscriptions; on exclusive and failover it may report zero, and the
// runtime's own attempts counter bounds retries.
package pulsar
