// Package projection builds the view of an envelope that a broker binding copies into
// native message properties or headers, exactly as the runtime hands it to a transport
// with every write. Transports' tests use it to project an envelope as the runtime does.
package projection

import (
	"github.com/babelqueue-go/babelqueue/envelope"
	"github.com/babelqueue-go/babelqueue/transport"
)

// Of returns the projection of e.
func Of(e *envelope.Envelope) transport.Projection {
	return transport.Projection{
		URN:           e.Job,
		TraceID:       e.TraceID,
		MessageID:     e.Meta.ID,
		Lang:          e.Meta.Lang,
		SchemaVersion: e.Meta.SchemaVersion,
		CreatedAt:     e.Meta.CreatedAt,
	}
}
