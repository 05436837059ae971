// Package sqs is the Amazon SQS transport behind sqs:// URLs (SPEC §7, binding §3),
// built on aws-sdk-go-v2. It works against AWS and against emulators such as ElasticMQ
// and LocalStack.
//
// Import it for its side effect to make the scheme available to babelqueue.Open:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/sqs"
//
// # URL
//
//	sqs://<region>[?endpoint=URL][&prefix=URL][&fifo=1][&group_id=ID][&wait_time=DURATION]
//	              [&visibility_timeout=DURATION][&max_message_size=BYTES][&connect_timeout=DURATION]
//	              [&publish_wait=DURATION]
//
// The query parameters are:
//
//   - endpoint: the service endpoint (ElasticMQ, LocalStack), e.g. http://127.0.0.1:9324.
//   - prefix: a queue-URL prefix; the queue URL is prefix + "/" + name and GetQueueUrl /
//     CreateQueue are never called (the queues must exist).
//   - fifo=1: every logical queue is a FIFO queue named <queue>.fifo.
//   - group_id: the MessageGroupId of every FIFO write (default: the message key, else
//     the consumed delivery's group for a settle write, else "babelqueue").
//   - wait_time: the long-poll wait of ReceiveMessage, 0 to 20 seconds (default 10s;
//     closing a consumer waits for a poll in progress, so it also bounds Close).
//   - visibility_timeout: the visibility timeout asked of ReceiveMessage and kept up by
//     the heartbeat (default: the queue's own VisibilityTimeout).
//   - max_message_size: the size check's limit in bytes, at most 1048576 (the default):
//     set it to the MaximumMessageSize of queues that have a smaller one.
//   - connect_timeout: how long each start-up check of Open may take (default 10s).
//   - publish_wait: how long Publish and PublishConfirmed wait for an endpoint they cannot
//     reach to answer again before they fail (default 30s; 0 fails at once). See
//     [WithPublishWait]: the wait never sends a message twice.
//
// Durations are Go durations ("1500ms", "20s") or a bare number of seconds, the grammar
// every BabelQueue URL shares; wait_time and visibility_timeout are rounded up to whole
// seconds. Any other query parameter, user information in the URL, or an invalid or
// out-of-range value is an error matching transport.ErrBadURL that names the
// parameter. Credentials come from the default AWS chain (environment, shared config,
// web identity, instance role). To use a client you built yourself (custom credentials,
// retries, HTTP client), call [New].
//
// # Starting
//
// Open fails at once, with one error that says what to do, when the default chain finds
// no credentials ([ErrNoCredentials]: which are missing and how to give them) or when
// the endpoint does not answer within connect_timeout ([ErrUnreachable]; one
// ListQueues call of at most one name, any answer will do). With an endpoint on this
// machine (an emulator) the EC2 instance metadata service is never asked for a role.
// The AWS SDK's own log lines (its warnings, and what ClientLogMode asks for) go through
// the transport's logger, marked component=aws-sdk: opened through transport.Open
// (babelqueue.Open), that is the App's logger. [New] makes none of these checks and
// leaves the client's logger as you configured it.
//
// # Message size
//
// SQS counts a message as its body plus every message attribute's name, data type and
// value, and accepts at most 1 MiB ([MaxMessageSize]) or the queue's smaller
// MaximumMessageSize. Every write, Publish and settle write alike, is checked first: a
// larger one fails with a *transport.TooLargeError (matching transport.ErrTooLarge)
// naming the size and the limit, and a settle write refused so also matches
// transport.ErrSettleWrite and deletes nothing.
//
// # Wire format
//
// The message body is the envelope, byte for byte. The envelope is projected onto
// MessageAttributes as the conformance manifest requires: bq-job, bq-trace-id,
// bq-message-id, bq-source-lang (String) and bq-schema-version, bq-created-at (Number).
// The transport adds two attributes of its own, only when they carry information:
// bq-attempts (Number, when Message.Attempts is not zero: the only place a poison body's
// count can ride) and bq-key (the record key: Binary with the key bytes, or
// DataType "String.empty" for a non-nil empty key, because SQS has no empty attribute
// values). Out-of-band headers ride as further String attributes. SQS allows ten
// attributes per message: a write that needs more fails with [ErrTooManyAttributes]
// instead of silently losing a header.
//
// SQS bodies are XML text: bytes that are not valid UTF-8, and the characters XML 1.0
// forbids (most C0 controls, U+FFFE, U+FFFF), cannot be sent. Publish rejects such a
// body with [ErrBodyNotText] before calling SQS.
//
// # Consuming
//
// A consumer is the kit's (transport/driverkit): a Receive with no delivery waiting
// long-polls ReceiveMessage for one message plus as many as the prefetch has room for,
// up to ten, never holding more unsettled messages than its prefetch. A long poll is
// never cancelled for its caller (SQS may already have handed it messages that a
// cancelled call would leave hidden until their visibility timeout): a Receive whose
// context ends stops waiting, and the messages come with the next Receive. While a
// delivery is held, or being settled, its visibility is extended (a heartbeat at a third
// of the visibility timeout, ten messages per ChangeMessageVisibilityBatch call), so a
// long handler or a slow settle write does not see its message redelivered under it; no
// lock is held across a call to SQS, so one slow call stalls nothing else. A failed
// receive is retried after a backoff (50 ms doubling to 2 s), and so is receiving while
// settlements keep failing; both are logged with their cause. Settling:
//
//   - Ack: every settle write is sent (SendMessage must succeed) before DeleteMessage.
//     The writes are made in order and the first that fails stops them: those before
//     it stay made (SQS cannot take them back) and are made again when the redelivery
//     is settled; on a FIFO queue the repeat carries the same deduplication id, so SQS
//     drops it within its five-minute window.
//   - Rewind: ChangeMessageVisibility to 0; ApproximateReceiveCount rises on redelivery.
//     Closing a consumer gives back what it holds unsettled the same way (waiting first
//     for a poll in progress, at most the wait time).
//   - HandOff: nothing is sent; the message becomes visible again when its visibility
//     timeout lapses and the queue's RedrivePolicy moves it to the native DLQ after
//     maxReceiveCount receives.
//
// Delivery.Redeliveries is ApproximateReceiveCount−1 (an absent or garbage count reads
// 0), so the runtime reconciles attempts to max(body, ApproximateReceiveCount−1).
// Delivery.SchemaVersion is the StringValue of the bq-schema-version attribute.
//
// # FIFO queues
//
// A queue whose name ends in ".fifo" (or every queue with fifo=1) is a FIFO queue. Writes
// carry a MessageGroupId (see group_id above) and a MessageDeduplicationId: for
// Publish, meta.id and the attempts ("<meta.id>:<attempts>", hashed when it is not a
// valid id), so a retry re-publish of the same meta.id is never deduplicated away; for
// settle writes, a hash of the consumed SQS message id, the write's position and
// target, meta.id and attempts, so a release of an unchanged body is kept while a
// repeated settle of the same delivery is deduplicated. SQS FIFO queues have no
// per-message delay: with fifo=1 the transport reports no delay support, so the runtime
// applies retry tiers as immediate re-publishes; a delay asked of a ".fifo" queue on a
// standard transport is not honoured and logged once.
package sqs
