package amqp

import (
	"errors"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
	"github.com/babelqueue-go/babelqueue/transport/driverkit"
)

// authCause marks RabbitMQ's refusals of the credentials, of the vhost or of a
// resource (ACCESS_REFUSED 403, NOT_ALLOWED 530) so they match [transport.ErrAuth].
func authCause(err error) error {
	var ae *amqp091.Error
	if errors.Is(err, amqp091.ErrCredentials) || errors.Is(err, amqp091.ErrVhost) ||
		(errors.As(err, &ae) && (ae.Code == amqp091.AccessRefused || ae.Code == amqp091.NotAllowed)) {
		return transport.AuthFailure(err)
	}
	return err
}

// tlsOptionError gives a bad TLS parameter the form of the driver's other URL errors
// (a driverkit option error, which is also a *transport.BadURLError).
func tlsOptionError(pq driverkit.Query, err error) error {
	var bad *transport.BadURLError
	if errors.As(err, &bad) {
		return pq.Bad(bad.Param, bad.Reason)
	}
	return err
}
