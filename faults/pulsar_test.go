package faults_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/faultsuite"
	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transporttest"

	_ "github.com/babelqueue-go/babelqueue/transport/pulsar"
)

// pulsarSendTimeout is the runs' send timeout.
const pulsarSendTimeout = 5 * time.Second

var pulsarBroker = broker{
	name: "Pulsar",
	shared: func(t *testing.T) *faultsuite.Binding {
		return pulsarBinding(t, transporttest.BrokerURL(t, "BQ_PULSAR_URL", "pulsar"), "")
	},
	open: func(ctx context.Context, spec faultsuite.WorkerSpec) (transport.Transport, faultsuite.Switch, error) {
		tr, err := transport.Open(ctx, spec.URL)
		return tr, nil, err
	},
}

// pulsarBinding is the binding on the Pulsar at raw, whose admin REST API is admin
// (http://<host>:8080 when empty).
func pulsarBinding(t *testing.T, raw, admin string) *faultsuite.Binding {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if admin == "" {
		admin = "http://" + u.Hostname() + ":8080"
	}
	policy := func(ctx context.Context, method, dlq, body string) error {
		endpoint := admin + "/admin/v2/persistent/public/default/" + url.PathEscape(dlq) + "/maxMessageSize"
		req, err := http.NewRequestWithContext(ctx, method, endpoint, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %s: %s", method, endpoint, resp.Status, b)
		}
		return nil
	}
	// A write the broker refuses fails only at the send timeout: pulsar-client-go drops
	// the producer's pending writes from its connection on NotAllowedError, without an
	// answer (the transport then replaces the producer). The send timeout bounds how
	// long a refused dead-letter write holds a worker.
	raw = withParams(raw, "send_timeout", strconv.Itoa(int(pulsarSendTimeout/time.Second)))
	return &faultsuite.Binding{
		Name: "Pulsar",
		URL:  func(faultsuite.Role, string) string { return raw },
		BreakDLQ: func(ctx context.Context, _, dlq string) (func(context.Context) error, error) {
			if err := policy(ctx, http.MethodPost, dlq, "64"); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error { return policy(ctx, http.MethodDelete, dlq, "") }, nil
		},
		DLQMethod: "the dead-letter topic's maxMessageSize topic policy set to 64 bytes (admin REST API): the broker " +
			"refuses every dead letter; healed by removing the policy",
		Bounds: map[faultsuite.Scenario]time.Duration{faultsuite.DLQFailure: pulsarSendTimeout + faultsuite.DefaultBound},
		Settings: "send_timeout=5 (default 30 s): a write the broker refuses fails only when it times out " +
			"(pulsar-client-go leaves it unanswered), so it bounds how long a refused dead-letter write holds a worker; " +
			"shared subscription: unacknowledged messages of a closed (or killed) consumer are redelivered at once; " +
			"acknowledgements wait for the broker's answer",
	}
}
