package servicebus

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// checkQueue peeks at queue once, within the connect timeout, and turns what goes wrong
// into one error that says what to do.
func (t *Transport) checkQueue(ctx context.Context, r receiver, queue string) error {
	pctx, cancel := context.WithTimeout(ctx, t.cfg.ConnectTimeout)
	defer cancel()
	_, err := r.PeekMessages(pctx, 1, nil)
	var sbe *azservicebus.Error
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case pctx.Err() != nil:
		return fmt.Errorf("%w: no answer from the namespace for queue %q within %s (connect_timeout): check its address and that AMQP (port 5671, or 443 with websockets) is reachable: %w",
			ErrUnreachable, queue, t.cfg.ConnectTimeout, err)
	case errors.As(err, &sbe) && sbe.Code == azservicebus.CodeNotFound:
		return fmt.Errorf("servicebus: queue %q does not exist in the namespace (the transport does not create queues): %w", queue, err)
	case errors.As(err, &sbe) && sbe.Code == azservicebus.CodeUnauthorizedAccess:
		return fmt.Errorf("servicebus: not allowed to receive from %q: the credential needs the Listen right on it: %w", queue, err)
	}
	return fmt.Errorf("servicebus: queue %q cannot be read: %w", queue, err)
}

// ErrUnreachable matches the error of Consume when the namespace did not answer within
// the connect timeout.
var ErrUnreachable = errors.New("servicebus: namespace unreachable")
