package kafka

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// retryBackoff is the backoff of the transport's clients after a failure: 250 ms doubling
// to 2 s, ±20 % (franz-go's own goes to 5 s, which delayed a group's rejoin after a
// broker restart: issue 16).
var retryBackoff = driverkit.Backoff{Min: 250 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.2}.Delay

// clientOpts are the options of every group consumer and producer the transport builds.
func clientOpts(log *slog.Logger) []kgo.Opt {
	return []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond), kgo.RetryBackoffFn(retryBackoff),
		kgo.RequestTimeoutOverhead(DefaultRequestTimeoutOverhead), kgo.WithLogger(clientLogger(log))}
}

// clientLog sends franz-go's warnings and errors to the transport's logger, tagged
// client=franz-go; its info lines (every connection and group step) are left out.
type clientLog struct{ *kslog.Logger }

// Level caps franz-go's level at warnings.
func (l clientLog) Level() kgo.LogLevel { return min(l.Logger.Level(), kgo.LogLevelWarn) }

func clientLogger(l *slog.Logger) kgo.Logger {
	return clientLog{kslog.New(l.With("client", "franz-go"))}
}
