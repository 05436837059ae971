package metrics

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/babelqueue-go/babelqueue"
)

// HealthStatus is the JSON body of the [Live] and [Ready] handlers.
type HealthStatus struct {
	// Status is "ok" or "unavailable".
	Status string `json:"status"`
	// Running reports that App.Run is running; Consuming that its consumer is open and
	// its last receive did not fail.
	Running   bool `json:"running"`
	Consuming bool `json:"consuming"`
	// LastReceived is when the last delivery arrived; omitted before the first.
	LastReceived *time.Time `json:"last_received,omitempty"`
	// LastReceiveErrorAt is when a receive last failed; omitted when none has since
	// the consumer opened. The error's text is left out: it may name hosts.
	LastReceiveErrorAt *time.Time `json:"last_receive_error_at,omitempty"`
}

// Live answers a Kubernetes liveness probe: 200 while the app's Run is running, 503
// otherwise (Run returned, or has not started).
func Live(app *babelqueue.App) http.Handler {
	return health(app, func(h babelqueue.Health) bool { return h.Running })
}

// ReadyOption tunes [Ready].
type ReadyOption func(*readyConfig)

type readyConfig struct{ recovered time.Duration }

// WithRecoveryWindow sets how long after the last failed receive an app counts as
// receiving again when no delivery has arrived since (default 15 s). The runtime retries
// a failed receive after at most 5 s, so a receive error that is not repeated within the
// window means the broker answers again, even on an idle queue. Make it longer than the
// time the transport takes to fail a receive on a broker that is away.
func WithRecoveryWindow(d time.Duration) ReadyOption {
	return func(c *readyConfig) {
		if d > 0 {
			c.recovered = d
		}
	}
}

// Ready answers a Kubernetes readiness probe: 200 while the app's consumer receives and
// the broker answers, 503 otherwise: before Run has opened the consumer, while receives
// fail (the broker is away) and after Run has returned. After a failed receive the app
// is ready again once a delivery arrives, or once the recovery window
// ([WithRecoveryWindow]) has passed without another failure.
func Ready(app *babelqueue.App, opts ...ReadyOption) http.Handler {
	c := readyConfig{recovered: 15 * time.Second}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return health(app, func(h babelqueue.Health) bool {
		if !h.Running {
			return false
		}
		return h.Consuming || h.LastReceiveError != nil && time.Since(h.LastReceiveErrorAt) > c.recovered
	})
}

func health(app *babelqueue.App, ok func(babelqueue.Health) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := app.Health()
		s := HealthStatus{Status: "ok", Running: h.Running, Consuming: h.Consuming}
		if !h.LastReceived.IsZero() {
			s.LastReceived = &h.LastReceived
		}
		if h.LastReceiveError != nil {
			s.LastReceiveErrorAt = &h.LastReceiveErrorAt
		}
		code := http.StatusOK
		if !ok(h) {
			s.Status, code = "unavailable", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		if r.Method != http.MethodHead {
			_ = json.NewEncoder(w).Encode(s)
		}
	})
}
