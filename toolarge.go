package babelqueue

import (
	"context"
	"errors"
	"time"

	"github.com/babelqueue-go/babelqueue/internal/settle"
	"github.com/babelqueue-go/babelqueue/transport"
)

// settleTooLarge finishes a delivery whose settle write the broker refused for its
// size ([transport.ErrTooLarge]). Such a write is as long on every redelivery, so a
// rewind would bring the delivery back to fail the same way for ever. It is routed as
// a settlement that cannot be built is: the received bytes go to the DLQ (the broker
// delivered them, so they fit), or, with the DLQ off or when even those are refused, the
// delivery is dropped and the drop logged. It reports whether the delivery was settled;
// when not, the caller rewinds it as for any other failure.
func (a *App) settleTooLarge(sctx context.Context, c transport.Consumer, x delivery, dec settle.Decision, di DeliveryInfo, cause error) bool {
	var routes []settle.Decision
	if a.pol.DLQOn() && dec.Action != settle.ActRawDeadLetter {
		routes = append(routes, settle.Decision{Action: settle.ActRawDeadLetter, Attempts: dec.Attempts})
	}
	routes = append(routes, settle.Decision{Action: settle.ActDrop, Reason: "the settle write is over the broker's size limit", Attempts: dec.Attempts})
	for _, fallback := range routes {
		a.log.Error("babelqueue: the broker refused the settle write for its size; routing the delivery as received instead of rewinding it",
			"queue", x.d.Queue, "urn", x.route, "action", dec.Action.String(), "instead", fallback.Action.String(), "error", cause)
		s, err := a.settlement(x, fallback)
		if err != nil { // unreachable: raw and drop settlements need no editing
			return false
		}
		err = c.Settle(sctx, x.d, s)
		if len(a.hooks.settled) > 0 {
			a.tellSettled(sctx, x, fallback, s, di, err, time.Now())
		}
		switch {
		case err == nil:
			a.logOutcome(x, fallback)
			return true
		case errors.Is(err, transport.ErrAlreadySettled):
			return true
		case !errors.Is(err, transport.ErrTooLarge):
			return false
		}
		dec, cause = fallback, err
	}
	return false
}
