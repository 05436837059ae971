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
// URLs take the parameters retry_after, laravel and prefix, deferred_acks, publish_wait,
// sentinel or cluster (several nodes in the host part), wait and wait_timeout, the TLS
// parameters every scheme shares, and go-redis's connection parameters; any other
// parameter, and a bad value, is an error naming it that matches
// babelqueue.ErrInvalidOption:
//
//	redis://[user:password@]host:port/db[?retry_after=60&laravel=1&prefix=queues:&deferred_acks=2ms]
//	rediss://app:secret@redis.internal:6380/0?tls_ca=/etc/bq/ca.pem&tls_cert=/etc/bq/client.pem&tls_key=/etc/bq/client.key
//	redis://s1:26379,s2:26379,s3:26379/0?sentinel=mymaster
//	redis://n1:6379,n2:6379,n3:6379?cluster=1 (every queue needs a hash tag: {orders})
//
// The keys are the family's, shared with the Python SDK 1.24.0: the default layout (the
// list <q>, the reservations in <q>:processing and <q>:processing:deadlines, delays in
// <q>:delayed, headers in a frame around the envelope) and, with laravel=1, Laravel's.
// Every reserve and every settle is one Lua script, so a worker that dies between two
// calls never leaves a message half moved, and a late settle of a reservation that
// lapsed touches nothing ([ErrReservationLost]).
//
// docs/transports/redis.md describes the URL, both layouts key by key, the settle and
// recovery rules, clusters, deferred acks and the figures.
package redis
