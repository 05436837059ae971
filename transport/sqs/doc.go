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
//	sqs://<region>[?endpoint=URL][&prefix=URL][&fifo=1][&group_id=ID][&wait_time=SECONDS]
//
// The query parameters are:
//
//   - endpoint: the service endpoint (ElasticMQ, LocalStack), e.g. http://127.0.0.1:9324.
//   - prefix: a queue-URL prefix; the queue URL is prefix + "/" + name and GetQueueUrl /
//     CreateQueue are never called (the queues must exist).
//   - fifo=1: every logical queue is a FIFO queue named <queue>.fifo.
//   - group_id: the MessageGroupId of every FIFO write (default: the message key, else
//     the consumed delivery's group for a settle write, else "babelqueue").
//   - wait_time: the long-poll wait of ReceiveMessage in seconds, 0 to 20 (default 10;
//     closing a consumer waits for a poll in progress, so it also bounds Close).
//
// Any other query parameter, user information in the URL, or an invalid value is an
// error matching transport.ErrBadURL that names the parameter. Credentials come from the
// default AWS chain (environment, shared config, web identity, instance role). To use
// a client you built yourself (custom credentials, retries, HTTP client), call [New].
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
// A consumer long-polls ReceiveMessage in batches of up to ten, never holding more
// unsettled messages than its prefetch. While a delivery is held its visibility is
// extended (a heartbeat at a third of the queue's visibility timeout), so a long handler
// does not see its message redelivered under it. Settling:
//
//   - Ack: every settle write is sent (SendMessage must succeed) before DeleteMessage.
//   - Rewind: ChangeMessageVisibility to 0; ApproximateReceiveCount rises on redelivery.
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
