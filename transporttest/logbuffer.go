package transporttest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/transport"
)

// LogBuffer collects log lines (an io.Writer for a slog handler) that a test reads while
// the code under test may still be writing: every method is safe for concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// OpenWithLogger opens rawURL with [transport.Open] as the runtime does, handing the
// opener a logger that writes to the returned buffer, so a test can check that the
// driver logs through the application's logger. The transport closes with the test.
func OpenWithLogger(t testing.TB, rawURL string) (transport.Transport, *LogBuffer) {
	t.Helper()
	logs := &LogBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := transport.Open(transport.ContextWithLogger(ctx, slog.New(slog.NewTextHandler(logs, nil))), rawURL)
	if err != nil {
		t.Fatalf("Open(%s): %v", transport.Redact(rawURL), err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr, logs
}
