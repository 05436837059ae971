package redis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/transport"
	bqredis "github.com/babelqueue-go/babelqueue/transport/redis"
)

// Build the transport around a go-redis client you configured (TLS, ACL user, pool size);
// the transport never closes it.
func ExampleNew() {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	tr, err := bqredis.New(client, bqredis.WithRetryAfter(0), bqredis.WithLaravel("queues:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tr.Capabilities().PoisonAlwaysDeadLetter, tr.Capabilities().DeadLetterSuffix)
	// Output: true .dlq
}

// A bad query parameter is an error that names it.
func Example_badURL() {
	_, err := transport.Open(context.Background(), "redis://:secret@127.0.0.1:6379/0?retry_after=soon")
	fmt.Println(err)
	// Output: transport: bad redis:// URL: retry_after: want a duration such as 1500ms or 30s, or a number of seconds, at least 1ms; got "soon"
}

// Behind Sentinel, with every publish and settlement waiting for one replica: go-redis's
// failover client finds the primary and follows it through a failover.
func ExampleWithWait() {
	client := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"},
	})
	defer client.Close()
	_, err := bqredis.New(client, bqredis.WithWait(1, time.Second))
	fmt.Println(err)
	// The same from a URL:
	//   redis://127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381/0?sentinel=mymaster&wait=1&wait_timeout=1s
	_, err = bqredis.New(client, bqredis.WithWait(1, 0))
	fmt.Println(errors.Is(err, transport.ErrInvalidOption))
	// Output:
	// <nil>
	// true
}
