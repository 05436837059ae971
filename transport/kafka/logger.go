package kafka

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// clientLog is franz-go's logger for the clients the transport builds: its lines go to
// the transport's logger (through franz-go's slog plugin), tagged client=franz-go, and
// only from warnings up. franz-go logs every connection, metadata load and group step at
// info; those stay out of the application's log.
type clientLog struct{ *kslog.Logger }

// Level caps franz-go's level at warnings.
func (l clientLog) Level() kgo.LogLevel { return min(l.Logger.Level(), kgo.LogLevelWarn) }

func clientLogger(l *slog.Logger) kgo.Logger {
	return clientLog{kslog.New(l.With("client", "franz-go"))}
}
