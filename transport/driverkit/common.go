package driverkit

import (
	"log/slog"
	"math"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// Common is the block of settings every driver takes, with one validation path: a
// driver embeds it in its options and its option functions (WithLogger,
// WithConnectTimeout, WithMaxMessageSize) call the setters, which record a bad value in
// the embedded [Options] ("WithConnectTimeout", "WithMaxMessageSize") rather than
// ignore it. [Common.Query] reads the same settings from a URL.
type Common struct {
	Options
	// Logger receives the driver's lines. Never nil: slog.Default() by default.
	Logger *slog.Logger
	// ConnectTimeout bounds the driver's start-up checks and connection attempts.
	ConnectTimeout time.Duration
	// MaxMessageSize is the size check's limit in bytes ([Common.CheckSize]).
	MaxMessageSize int
	// MinMessageSize and MaxMessageSizeLimit bound what MaxMessageSize may be set to
	// (MaxMessageSizeLimit of zero: no upper bound).
	MinMessageSize, MaxMessageSizeLimit int
}

// NewCommon returns the block of broker with its defaults: slog.Default(), the connect
// timeout and the size limit, which may be set anywhere from 1 to maxSizeLimit bytes.
func NewCommon(broker string, connect time.Duration, maxSize, maxSizeLimit int) Common {
	return Common{Options: Options{Broker: broker}, Logger: slog.Default(), ConnectTimeout: connect,
		MaxMessageSize: maxSize, MinMessageSize: 1, MaxMessageSizeLimit: maxSizeLimit}
}

// SetLogger sets the logger; nil keeps the one set.
func (c *Common) SetLogger(l *slog.Logger) {
	if l != nil {
		c.Logger = l
	}
}

// SetConnectTimeout sets the connect timeout, refusing one that is not above zero.
func (c *Common) SetConnectTimeout(d time.Duration) {
	if d <= 0 {
		c.Invalid("WithConnectTimeout", "want a duration above zero, got %s", d)
		return
	}
	c.ConnectTimeout = d
}

// SetMaxMessageSize sets the size check's limit, refusing one outside
// [MinMessageSize, MaxMessageSizeLimit].
func (c *Common) SetMaxMessageSize(n int) {
	if n < c.MinMessageSize || c.MaxMessageSizeLimit > 0 && n > c.MaxMessageSizeLimit {
		if c.MaxMessageSizeLimit > 0 {
			c.Invalid("WithMaxMessageSize", "want %d to %d bytes, got %d", c.MinMessageSize, c.MaxMessageSizeLimit, n)
		} else {
			c.Invalid("WithMaxMessageSize", "want at least %d bytes, got %d", c.MinMessageSize, n)
		}
		return
	}
	c.MaxMessageSize = n
}

// Query reads the URL parameters connect_timeout and max_message_size, when given, into
// c, within the bounds of [CommonParams]. The driver lists both among the parameters it
// passes to [ParseQuery].
func (c *Common) Query(q Query) error {
	opts, err := CommonParams(*c, Into(&c.ConnectTimeout), Into(&c.MaxMessageSize)).Read(q)
	for _, set := range opts {
		set()
	}
	return err
}

// CommonParams are the rows of the URL parameters of c's settings, bound to a driver's
// option functions, for a driver that reads its URL with [Params.Read]:
// connect_timeout (10ms to 10m; a bare number is seconds) and max_message_size (at
// least 1024, or MinMessageSize when that is more, up to MaxMessageSizeLimit).
func CommonParams[O any](c Common, connect func(time.Duration) O, size func(int) O) Params[O] {
	hi := c.MaxMessageSizeLimit
	if hi <= 0 {
		hi = math.MaxInt32
	}
	return Params[O]{
		{Name: "connect_timeout", Duration: connect, Lo: 10 * time.Millisecond, Hi: 10 * time.Minute},
		{Name: "max_message_size", Int: size, Min: max(1024, c.MinMessageSize), Max: hi},
	}
}

// CheckSize checks a write of size bytes to queue against MaxMessageSize less reserve
// (what the broker adds to every message and the driver cannot count), as
// [transport.CheckSize] does.
func (c *Common) CheckSize(queue string, size, reserve int) error {
	return transport.CheckSize(c.Broker, queue, size, c.MaxMessageSize-reserve)
}
