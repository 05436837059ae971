// Package sqs is the Amazon SQS transport behind sqs:// URLs (SPEC §7, binding §3),
// built on aws-sdk-go-v2. It works against AWS and against emulators such as ElasticMQ
// and LocalStack. docs/transports/sqs.md says how it behaves (the binding, settling,
// the heartbeat, FIFO queues, outages), with the tests behind each statement.
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
// Each parameter sets what the option function of the same name sets; endpoint is the
// service endpoint (an emulator's http://127.0.0.1:9324). Credentials come from the
// default AWS chain; [Open] checks them and the endpoint at once ([ErrNoCredentials],
// [ErrUnreachable]). To use a client you built yourself, call [New].
//
// The body is the envelope, byte for byte, projected onto MessageAttributes (AttrJob and
// the other Attr constants). A queue whose name ends in ".fifo" (or every queue with
// fifo=1) is a FIFO queue: writes carry a MessageGroupId and a MessageDeduplicationId.
package sqs
