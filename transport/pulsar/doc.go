// Package pulsar is the transport behind pulsar:// and pulsar+ssl:// URLs: Apache
// Pulsar spoken with github.com/apache/pulsar-client-go. docs/transports/pulsar.md
// says how it behaves, with the tests behind each statement.
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
// The port defaults to 6650 (pulsar) or 6651 (pulsar+ssl). The parameters are the
// fields of [Config] ([ParseURL] reads them), plus the TLS parameters every scheme
// shares (docs/security.md). A bad parameter, like a bad value given to an option
// function, matches babelqueue.ErrInvalidOption. [OpenURL] fails with [ErrUnreachable]
// when no broker of the URL answers within connect_timeout.
//
// # Binding
//
// A queue is the Pulsar topic of the same name; its dead-letter queue is the name plus
// ".dlq". The payload is the envelope bytes, projected onto string properties
// ([Properties]); an empty body is refused ([ErrEmptyBody]). Ack sends the settle writes
// and acknowledges the delivery once every write is confirmed (pipelined by default:
// [WithPipelinedSettles]); Rewind is a negative acknowledgement. Delays use Pulsar's
// DeliverAfter, honoured on Shared and Key_Shared subscriptions only.
package pulsar
