package schema

import (
	"context"
	"errors"

	"github.com/babelqueue-go/babelqueue"
)

// errNoProvider is the failure of middleware built with a nil Provider.
var errNoProvider = errors.New("schema: middleware built with a nil Provider")

// PublishCheck returns publish middleware that validates the data of every
// [babelqueue.App.Publish] (and [babelqueue.App.Prepare]) whose URN has a schema. Invalid
// data is refused before anything reaches the broker: Publish returns the
// *[ValidationError], which matches [ErrInvalid].
//
// With package fieldcrypt, add it before the protection so it sees cleartext:
//
//	app.UsePublish(schema.PublishCheck(reg), fields.Protect)
func PublishCheck(p Provider) babelqueue.PublishMiddleware {
	return func(next babelqueue.PublishFunc) babelqueue.PublishFunc {
		return func(ctx context.Context, o *babelqueue.Outgoing) error {
			if p == nil {
				return errNoProvider
			}
			if s := p.Schema(o.Envelope.Job); s != nil {
				if err := s.Validate(o.Envelope.Data); err != nil {
					return err
				}
			}
			return next(ctx, o)
		}
	}
}

// Middleware returns handler middleware that validates the data of every delivery whose
// URN has a schema before the handler runs. Invalid data is answered with
// [babelqueue.NoRetry] around the *[ValidationError]: it goes to the dead-letter queue
// on its first delivery with reason "failed" and the violation as dead_letter.error, or
// is dropped and logged with dead-lettering off. The handler never sees it.
//
// With package fieldcrypt, add it after the unprotection so it sees cleartext:
//
//	app.Use(fields.Unprotect, schema.Middleware(reg))
func Middleware(p Provider) babelqueue.Middleware {
	return func(next babelqueue.Handler) babelqueue.Handler {
		return func(ctx context.Context, m *babelqueue.Message) error {
			if p == nil {
				return errNoProvider
			}
			if s := p.Schema(m.URN()); s != nil {
				if err := s.Validate(m.Envelope.Data); err != nil {
					return babelqueue.NoRetry(err)
				}
			}
			return next(ctx, m)
		}
	}
}
