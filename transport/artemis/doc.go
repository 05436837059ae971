// Package artemis is the transport behind artemis:// and artemis+ssl:// URLs: Apache
// ActiveMQ Artemis spoken over AMQP 1.0 with github.com/Azure/go-amqp. Import it for its
// side effect to make the schemes available to transport.Open (and so to babelqueue.Open),
// or build a transport with [Open] (a URL and options) or [New] (around a connection you
// dialled: custom TLS, SASL EXTERNAL, XOAUTH2):
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/artemis"
//
//	t, err := transport.Open(ctx, "artemis://user:secret@127.0.0.1:5672")
//
// URL: artemis://[user[:password]@]host[:port][,host2:port2][?param=value&…] (a primary
// and its backup, dialled in turn: [driverkit.Failover]), artemis+ssl:// for TLS (default
// port 5671). Credentials go out as SASL PLAIN, none as SASL ANONYMOUS. Parameters:
// idle_timeout, container_id, publish_wait, connect_timeout, max_message_size,
// pipeline_settles and the shared TLS ones (server_name is tls_server_name); any other,
// or a bad value, is an error from Open naming it, matching babelqueue.ErrInvalidOption
// and [transport.ErrBadURL], that never echoes the password.
//
// A queue is an Artemis anycast queue of the same name, auto-created on first use. The
// body is the envelope bytes (an AMQP string value section when valid UTF-8, else one
// data section), projected onto what a JMS peer reads (x-opt-jms-type and subject carry
// the URN; bq_ application properties). Every write counts once Artemis accepted it;
// settle writes are pipelined by default ([WithPipelinedSettles]); delays use Artemis
// scheduled delivery; a lost connection is dialled again on the next publish or receive,
// and a silent one is found within the idle timeout ([DefaultIdleTimeout]).
//
// docs/transports/artemis.md in the repository describes the whole binding: the URL
// parameters, the message, settlement, connection loss and clusters.
package artemis
