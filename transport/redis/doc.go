// Package redis is the BabelQueue transport for Redis, behind redis:// and rediss://
// (TLS) URLs, built on github.com/redis/go-redis/v9.
//
// Import it for its side effect, or build a transport around a client of your own:
//
//	import _ "github.com/babelqueue-go/babelqueue/transport/redis"
//	t, err := transport.Open(ctx, "redis://127.0.0.1:6379/0?retry_after=60")
//
//	// or, with a client you configured (TLS, ACL user, Sentinel, …):
//	t, err := redis.New(goredis.NewClient(opts))
//
// # URL
//
//	redis://[user:password@]host:port/db[?retry_after=60&laravel=1&prefix=queues:&deferred_acks=2ms]
//
// retry_after is the visibility timeout of a reservation (a number of seconds, or a Go
// duration such as 1500ms; "null" turns recovery off). laravel=1 selects the
// Laravel-compatible layout and prefix its key prefix (default "queues:"). deferred_acks
// turns on deferred acks with the given linger (a Go duration, or a number of
// milliseconds; see [WithDeferredAcks]; default off). Durations follow the grammar of
// [transport.Query]. publish_wait bounds how long Publish waits for a Redis it cannot
// reach (default 30 s; 0 fails at once; see [WithPublishWait]). The go-redis connection parameters (dial_timeout, read_timeout,
// pool_size, …) are accepted too. Any other parameter, and a bad value, is an error
// naming it that matches babelqueue.ErrInvalidOption.
//
// rediss:// speaks TLS with the parameters every scheme shares (docs/security.md):
// tls_ca (the CA file), tls_cert and tls_key (a client certificate: mutual TLS),
// tls_server_name, tls_insecure=1 (no verification; a warning at Open; go-redis's
// skip_verify is the same). An ACL user goes in the URL's user info:
//
//	rediss://app:secret@redis.internal:6380/0?tls_ca=/etc/bq/ca.pem&tls_cert=/etc/bq/client.pem&tls_key=/etc/bq/client.key
//
// With a client of your own, [transport.TLSOptions] builds the same *tls.Config for
// goredis.Options.TLSConfig. An Open that fails (a refused certificate, a wrong
// password) returns one [*transport.OpenError] naming the address (password redacted)
// and the cause; it matches [transport.ErrTLS] or [transport.ErrAuth].
//
// # Sentinel and Redis Cluster
//
//	redis://s1:26379,s2:26379,s3:26379/0?sentinel=mymaster   (the nodes are Sentinels)
//	redis://n1:6379,n2:6379,n3:6379?cluster=1                 (seeds of a Redis Cluster)
//
// Several nodes go in the host part ([driverkit.Hosts]). sentinel=<master name> opens a
// go-redis failover client, which finds the primary through the Sentinels and follows
// it through a failover; cluster=1 a cluster client. In a cluster every key of a queue
// must hash to one slot, so a queue's name needs a hash tag, as Laravel asks
// ('queue' => '{default}'): {orders} (else [ErrNoHashTag]); the key layout is
// unchanged. wait=N (with wait_timeout, default 1s) waits after every publish and settle
// script for N replicas (Redis's WAIT; [WithWait], [ErrNotReplicated]), so that a
// failover does not lose what was acknowledged. docs/transports/redis.md has the details.
//
// # Default layout
//
// The list key is the queue name, exactly. Publish is RPUSH <q> with the envelope bytes
// as the element. A worker reserves by moving the head of <q> to the end of
// <q>:processing and, in the same Lua script, records the reservation in the sorted set
// <q>:processing:deadlines as the member "<token>:<element>" (token: 32 lowercase hex
// digits, one per reservation) scored with the Unix time at which it lapses (now +
// retry_after). Acknowledging removes that member and LREMs the element from
// <q>:processing. At least every 100 ms while a consumer reserves, and whenever its wait
// on an empty list ends, lapsed members are swept: their element goes back to the end of
// <q>, unchanged. These are the keys and the member format the Python SDK 1.24.0 uses,
// so a Go worker and a Python worker on one queue recover each other's reservations, and
// a late settle of a reservation that was swept touches nothing (the gate: every settle
// checks its own member first). A reservation made by an SDK that writes no deadline
// member is never swept by a Go worker.
//
// Messages published with a delay wait in the Go-owned sorted set <q>:delayed until due;
// Go consumers move them to <q> (SDKs without that set do not read it). When a message
// has headers, the element is the frame
// {"__bq_frame":1,"headers":{…},"body":"<envelope as a JSON string>"} and the consumer
// unwraps it; without headers the element is the envelope bytes exactly.
//
// # Laravel layout
//
// With laravel=1 the keys are Laravel's: the ready list <prefix><q>, the sorted sets
// <prefix><q>:reserved and <prefix><q>:delayed, and the wake-up list <prefix><q>:notify,
// with Laravel's reserve (the reserved member is the job with attempts one higher),
// release (to :delayed) and migrate semantics, so a Go worker and a Laravel (or Python
// laravel-mode) worker share a queue and can settle each other's reservations. A job
// cannot carry headers: Go keeps them in its own hash <prefix><q>:bq-headers.
//
// # Receiving and settling
//
// One reserve script call reserves for every worker of a consumer waiting (up to
// [WithBatch] and the prefetch). On an empty list the consumer waits with a blocking
// look (BLMOVE from the list to its own head: nothing moves) pipelined with the reserve
// script, so a message pushed to an idle queue reaches a worker in one round trip.
// Every settle (ack, rewind, and the retry and dead-letter writes that come with an ack)
// is one Lua script: the writes and the removal of the reservation happen together or
// not at all. A rewind puts the element back at the head of the queue. Acks and rewinds
// that workers make while four are in flight go in one script call, and so do plain
// publishes, as one RPUSH per list. With [WithDeferredAcks] an ack rides in the next
// reserve call instead. docs/transports/redis.md has the details and the figures.
package redis
