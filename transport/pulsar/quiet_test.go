package pulsar

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestClientInfoIsLoweredToDebug(t *testing.T) {
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	client := slog.New(clientLog(base.Handler(), nil)).With("component", "pulsar-client")

	client.Info("Connection is ready")
	client.Warn("Reconnecting to broker")
	client.ErrorContext(context.Background(), "Failed to create producer")

	out := buf.String()
	if strings.Contains(out, "Connection is ready") {
		t.Errorf("an Info record of the client reached an Info-level handler:\n%s", out)
	}
	for _, want := range []string{"level=WARN msg=\"Reconnecting to broker\" component=pulsar-client", "level=ERROR"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}

	buf.Reset()
	debug := slog.New(clientLog(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), nil))
	debug.Info("Connection is ready")
	if !strings.Contains(buf.String(), "level=DEBUG msg=\"Connection is ready\"") {
		t.Errorf("a Debug-level handler should see the client's Info as Debug:\n%s", buf.String())
	}
}
