package kafka

import (
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// retryBackoff is the backoff of the transport's clients after a failure: 250 ms doubling
// to 2 s, ±20 % (franz-go's own goes to 5 s, which delayed a group's rejoin after a
// broker restart: issue 16).
var retryBackoff = driverkit.Backoff{Min: 250 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}.Delay

// clientOpts are the options of every group consumer and producer the transport builds.
func clientOpts(log *slog.Logger) []kgo.Opt {
	return append(deadlineOpts(log), kgo.MetadataMinAge(250*time.Millisecond), kgo.RetryBackoffFn(retryBackoff),
		kgo.WithLogger(clientLogger(log)))
}

// deadlineOpts bound how long the transport's clients wait on a broker connection gone
// silent, and log one found dead ([DefaultRequestTimeoutOverhead],
// [DefaultProduceRequestTimeout]).
func deadlineOpts(log *slog.Logger) []kgo.Opt {
	return []kgo.Opt{kgo.RequestTimeoutOverhead(DefaultRequestTimeoutOverhead),
		kgo.ProduceRequestTimeout(DefaultProduceRequestTimeout), kgo.WithHooks(&deadConnLog{log: log})}
}

// deadConnLog logs a broker connection found dead when it is: a request that could not
// be written, or whose response did not come, within its timeout (the connection is
// open and silent). Which request finds it is chance (a heartbeat, a commit, a fetch, a
// metadata request; a write blocks once the connection's send buffer is full, or behind
// a proxy that holds it), so both steps count. franz-go says so at Debug only; it drops
// the connection and sends the request again on a new one. One Warn line per client and
// broker while the connection stays dead (the requests in flight on it, and on the
// client's other connections to that broker, fail together).
type deadConnLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[int32]time.Time // per broker node, the last line
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (h *deadConnLog) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, writeWait, timeToWrite time.Duration, err error) {
	h.found(meta, key, "write", writeWait+timeToWrite, err)
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (h *deadConnLog) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, readWait, timeToRead time.Duration, err error) {
	h.found(meta, key, "read", readWait+timeToRead, err)
}

// found logs the connection to meta dead if err is a timeout and none was logged for
// that broker lately.
func (h *deadConnLog) found(meta kgo.BrokerMetadata, key int16, step string, waited time.Duration, err error) {
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	now := time.Now()
	h.mu.Lock()
	if h.last == nil {
		h.last = map[int32]time.Time{}
	}
	quiet := now.Sub(h.last[meta.NodeID]) < 2*DefaultRequestTimeoutOverhead
	if !quiet {
		h.last[meta.NodeID] = now
	}
	h.mu.Unlock()
	if quiet {
		return
	}
	h.log.Warn("kafka: no answer from a broker within the request timeout: the connection is dead; it is dropped and its requests are sent again on a new one",
		"broker", meta.Host+":"+strconv.Itoa(int(meta.Port)), "request", kmsg.Key(key).Name(), "step", step, "waited", waited.Round(time.Millisecond), "err", err)
}

// clientLog sends franz-go's warnings and errors to the transport's logger, tagged
// client=franz-go; its info lines (every connection and group step) are left out.
type clientLog struct{ *kslog.Logger }

// Level caps franz-go's level at warnings.
func (l clientLog) Level() kgo.LogLevel { return min(l.Logger.Level(), kgo.LogLevelWarn) }

func clientLogger(l *slog.Logger) kgo.Logger {
	return clientLog{kslog.New(l.With("client", "franz-go"))}
}
