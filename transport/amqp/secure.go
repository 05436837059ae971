package amqp

import (
	"errors"
	"fmt"
	"io"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/babelqueue-go/babelqueue/transport"
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

// closedEarly reads amqp091's ErrClosed (504) from a dial as what it is, a connection
// the broker closed before the AMQP handshake ended, so that after a TLS handshake in
// which the broker asked for a client certificate it is named as the refusal of that
// certificate (transport.ClientCertWatch).
func closedEarly(err error) error {
	if errors.Is(err, amqp091.ErrClosed) {
		return fmt.Errorf("%w: %w", err, io.ErrUnexpectedEOF)
	}
	return err
}
