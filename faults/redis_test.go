package faults_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/babelqueue-go/babelqueue/internal/brokerproc"
	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transporttest"

	_ "github.com/babelqueue-go/babelqueue/transport/redis"
)

// redisRetryAfter is the reservation timeout of the runs: a killed worker's deliveries
// are swept back to the queue once it lapses.
const redisRetryAfter = 5 * time.Second

var redisBroker = broker{
	name: "Redis", urlEnv: "BQ_REDIS_URL", gate: "redis", bind: redisBinding,
	private:      privateRedis,
	open:         openProxied,
	sharedCut:    true,
	shortRestart: true,
}

func redisBinding(t *testing.T, raw string) *faultsuite.Binding {
	opts, err := goredis.ParseURL(raw)
	raw = withParams(raw, "retry_after", strconv.Itoa(int(redisRetryAfter/time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	return &faultsuite.Binding{
		Name: "Redis",
		URL:  func(faultsuite.Role, string) string { return raw },
		BreakDLQ: func(ctx context.Context, _, dlq string) (func(context.Context) error, error) {
			stash := dlq + ":faultsuite-stash"
			if err := breakRedisList.Run(ctx, admin, []string{dlq, stash}).Err(); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return healRedisList.Run(ctx, admin, []string{dlq, stash}).Err() }, nil
		},
		DLQMethod: "the dead-letter list renamed aside and a string put in its place, so every write to it fails " +
			"with WRONGTYPE; healed by deleting the string and renaming the list back",
		Bounds: map[faultsuite.Scenario]time.Duration{faultsuite.Kill: redisRetryAfter + faultsuite.DefaultBound},
		// A settle is one script, answered before Settle returns: what a consumer held.
		Duplicates: heldWindow(prefetch, "the deliveries a consumer held (prefetch = concurrency): a settlement "+
			"lost with the connection, or with the killed worker, leaves its reservation to lapse after retry_after"),
		Settings: "retry_after=5: a killed worker's reservations lapse and are swept back after 5 s (a handler must finish within it)",
	}
}

// The dead-letter list goes aside and a string takes its key; then back.
var (
	breakRedisList = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('RENAME', KEYS[1], KEYS[2]) end
redis.call('SET', KEYS[1], 'the fault suite refuses dead letters here')
return 1`)
	healRedisList = goredis.NewScript(`
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('RENAME', KEYS[2], KEYS[1]) end
return 1`)
)

// privateRedis starts a redis-server with an append-only file (fsync always) on a free
// port; the restart is a SIGKILL and a start on the same data.
func privateRedis(t *testing.T) *faultsuite.Binding {
	transporttest.BrokerURL(t, "BQ_REDIS_URL", "redis") // the same gate as the shared runs
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		brokerproc.Require(t, "redis-server not installed")
	}
	port := brokerproc.FreePort(t)
	dir := privateDir(t, "redis")
	p := brokerproc.New(t, brokerproc.Config{
		Name: "private redis-server",
		Command: func() *exec.Cmd {
			return exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
				"--appendonly", "yes", "--appendfsync", "always", "--dir", dir)
		},
		Log: filepath.Join(dir, "redis.log"), Port: port, DialTimeout: 200 * time.Millisecond,
		StartTimeout: 10 * time.Second, Poll: 50 * time.Millisecond, Awaiting: "start", Signal: syscall.SIGKILL,
	})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	b := redisBinding(t, fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	b.Stop = func() error { p.Stop(); return nil }
	b.Start = p.Start
	b.RestartMethod = "SIGKILL of a private redis-server (appendonly yes, appendfsync always), started again on its AOF"
	return b
}
