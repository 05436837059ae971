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

// Ready answers a Kubernetes readiness probe: 200 while the app's consumer receives and
// the broker answers (Run is running, its consumer is open and its last receive did not
// fail), 503 otherwise: before Run has opened the consumer, while the broker is away and
// after Run has returned.
func Ready(app *babelqueue.App) http.Handler {
	return health(app, func(h babelqueue.Health) bool { return h.Running && h.Consuming })
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
