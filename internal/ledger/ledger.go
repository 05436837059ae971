// Package ledger forwards to the ledger of transport/driverkit, where it now lives, for
// the drivers not yet moved onto the kit (issue 32). It goes once none imports it.
package ledger

import (
	"context"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// Default backoff bounds of a consumer whose settlements fail.
const (
	DefaultMinBackoff = driverkit.DefaultMinBackoff
	DefaultMaxBackoff = driverkit.DefaultMaxBackoff
)

// ErrForeign is [driverkit.ErrForeign].
var ErrForeign = driverkit.ErrForeign

// Config is [driverkit.LedgerConfig].
type Config = driverkit.LedgerConfig

// Ledger is [driverkit.Ledger].
type Ledger[H any] = driverkit.Ledger[H]

// Entry is [driverkit.Entry].
type Entry[H any] = driverkit.Entry[H]

// New is [driverkit.NewLedger].
func New[H any](cfg Config) *Ledger[H] { return driverkit.NewLedger[H](cfg) }

// Validate is [driverkit.Validate].
func Validate(broker string, s transport.Settlement, offered ...transport.Outcome) error {
	return driverkit.Validate(broker, s, offered...)
}

// SendAll is [driverkit.SendAll].
func SendAll(ctx context.Context, ws []*transport.Message, send func(context.Context, *transport.Message) error) error {
	return driverkit.SendAll(ctx, ws, send)
}
