// Package artemis is the transport behind artemis:// and artemis+ssl:// URLs: Apache
// ActiveMQ Artemis spoken over AMQP 1.0 with github.com/Azure/go-amqp.
//
// Import it for its side effect to make the schemes available to transport.Open (and
// so to babelqueue.Open):
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/artemis"
//
//	t, err := transport.Open(ctx, "artemis://user:secret@127.0.0.1:5672")
//
// or build a transport around a connection you dialled yourself (custom TLS, SASL
// EXTERNAL, XOAUTH2) with [New].
//
// # URL
//
//	artemis://[user[:password]@]host[:port][?param=value&…]
//	artemis://[user[:password]@]host1:port1,host2:port2[?…]  (a primary and its backup)
//	artemis+ssl://…                                  (TLS; default port 5671)
//
// The port defaults to 5672 (artemis) or 5671 (artemis+ssl). Several nodes are read by
// driverkit.Hosts (see Clusters). Credentials in the URL are
// sent with SASL PLAIN; without them the connection uses SASL ANONYMOUS. Query
// parameters:
//
//	idle_timeout      Go duration; the AMQP idle timeout (default 5s,
//	                  DefaultIdleTimeout; "0" disables it): a connection that
//	                  carries no frame for this long is dead (see Reconnection)
//	container_id      the AMQP container-id of the connection (default: random)
//	server_name       TLS server name to verify (artemis+ssl only; default: the host)
//	pipeline_settles  0 makes Settle wait for the runtime's settle writes (default 1:
//	                  pipelined; see Settlement and WithPipelinedSettles)
//	publish_wait      Go duration; how long Publish waits for a connection it
//	                  cannot make (default 30s; "0" fails at once; WithPublishWait)
//
// Any other parameter or a malformed value is an error from Open that names the
// parameter, matches babelqueue.ErrInvalidOption and [transport.ErrBadURL], and never
// echoes the password; so is a missing host or a path (ErrBadURL). A bad value given to
// an option function (WithConfirmTimeout(0)) is an error from Open or [New] naming the
// option and matching babelqueue.ErrInvalidOption.
//
// # Queues
//
// A BabelQueue queue is an Artemis anycast queue of the same name. Senders and
// receivers attach with the "queue" capability, so Artemis auto-creates the address and
// its anycast queue on first use (the broker's auto-create-queues setting, on by
// default) and a JMS peer reads it as queue://name.
//
// # The message (binding §7)
//
// The body is the envelope bytes, never re-encoded. A body that is valid UTF-8 (every
// envelope is) rides as an AMQP string value section: that is how the Python SDK
// 1.24.0 sends its body and the only section it reads (a data section reaches its
// worker as a Python memoryview, not text), and a JMS peer reading through Artemis
// sees a TextMessage. Bytes that are not UTF-8 (a poison body being dead-lettered) ride
// as one data section, kept exactly (a JMS BytesMessage). On consume either section is
// accepted. On produce the envelope is projected onto what a JMS peer reads:
//
//	x-opt-jms-type message annotation  the URN (the manifest's JMSType slot)
//	properties.subject                 the URN again: Artemis gives a JMS consumer its
//	                                   JMSType from the subject; the annotation reaches
//	                                   it only as JMS_AMQP_MA_x-opt-jms-type
//	properties.correlation-id          trace_id (JMSCorrelationID), a string
//	properties.message-id              meta.id, a string
//	properties.creation-time           meta.created_at (JMSTimestamp)
//	application properties (strings)   bq_schema_version, bq_source_lang, bq_attempts,
//	                                   bq_app_id = "babelqueue"
//
// Out-of-band headers ([transport.Message.Headers]) ride as further string application
// properties; they never replace a projected one. On consume, [transport.Delivery.Headers]
// holds only those, [transport.Delivery.Redeliveries] is the AMQP header's 0-based
// delivery-count, the attempts header is bq_attempts (read by
// driverkit.Attempts, as on every broker: a whole number as written, text or
// integer, negative ones too) and the schema-version header is bq_schema_version
// exactly as the broker typed it. A body that arrives as an AMQP value
// section (a string or binary value, as some peers send it) is handed over as its bytes.
//
// # Settlement
//
// Every write the transport makes is sent unsettled and counts only once Artemis
// answered with the accepted outcome. Settle with Ack and settle writes pipelines them by
// default: it sends the writes and returns, and the delivery is accepted only once every
// write is accepted; a write refused, failed or not accepted within the confirm timeout
// makes the transport give the delivery back itself (modified, not counted; the
// consumer's receives back off while writes keep failing), so it is delivered again and
// nothing is lost. A write that cannot be sent at all still fails Settle at once. At most 256 settlements
// (or the prefetch, if larger) are in flight per consumer, and Close waits for them. With
// pipeline_settles=0 ([WithPipelinedSettles]) Settle makes the settle writes, waits for
// each to be accepted and only then accepts the delivery; when a write fails nothing is
// accepted and the error matches [transport.ErrSettleWrite]. Either way the writes
// accepted before a failing one stay made. Rewind answers the delivery with the modified outcome and
// delivery-failed set, so Artemis redelivers it with a higher delivery-count; the Rewind
// of a delivery whose Ack failed (a settle write refused) leaves delivery-failed unset,
// so an outage of the dead-letter queue does not count against Artemis's redelivery
// limit. A delivery
// whose link is gone was taken back by the broker: its Ack fails with a
// [transport.TakenBackError] wrapping [ErrDeliveryLost], which matches
// [transport.ErrAlreadySettled]. The link credit of a consumer is its prefetch, and no
// more than [transport.ConsumeOptions.Prefetch] deliveries are ever outstanding (besides
// those whose pipelined writes are in flight), across a re-attached link too.
//
// Artemis keeps its own redelivery limit (the address setting max-delivery-attempts,
// 10 by default) and moves a message rewound that often to its dead-letter address:
// keep it above the runtime's max_attempts. Rewinds after a refused settle write do not
// count.
//
// # Delays
//
// [transport.Message.Delay] uses Artemis scheduled delivery (the x-opt-delivery-delay
// message annotation), so retry tiers wait on the broker, not in the worker.
//
// # Reconnection
//
// When the connection drops (a broker restart), the next publish or receive dials again,
// backing off between attempts. A connection that stays open but carries nothing (a
// network that drops packets, a broker that hangs) is found dead within the idle
// timeout: Artemis sends a frame at least every half of it, and go-amqp closes a
// connection that received none for the whole of it. Publishes and receives waiting on
// it fail then and dial again, and the loss is logged when it happens (a Warn line
// "artemis: connection lost" with the cause, "i/o timeout" for a dead connection). Deliveries handed out over the lost connection are
// already back on the broker: rewinding one succeeds, acknowledging one fails and the
// broker redelivers it. A transport built with [New] reconnects only when given a dial
// function with [WithDial].
//
// # Clusters
//
// A URL that lists the nodes of a primary/backup pair with replication
// (artemis://u:p@h1:5672,h2:5672) dials them in turn ([driverkit.Failover]): a passive
// backup keeps its acceptors closed, so the active node is the one that answers. A
// connection lost with its node is dialled again on the other nodes first, with the
// reconnection backoff above: when the primary dies the backup activates on the
// replicated journal and the transport moves to it; when the primary comes back and
// fails back, the backup drops its clients and the transport moves back. Consumers
// re-attach by themselves, and deliveries not accepted when the node died are in the
// replicated journal and delivered again. Every publish that returned nil was
// replicated before Artemis accepted it. A move to another node is logged at Info
// ("artemis: connected to another node of the cluster"). Each node is verified by its
// own host name unless the URL names a TLS server name.
package artemis
