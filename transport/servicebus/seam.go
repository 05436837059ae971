package servicebus

import (
	"context"
	"fmt"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The transport talks to Service Bus only through these three interfaces, which the
// SDK's client satisfies through the adapters below; the tests put a fake behind them.

// sender is the part of *azservicebus.Sender the transport uses.
type sender interface {
	SendMessage(ctx context.Context, m *azservicebus.Message, o *azservicebus.SendMessageOptions) error
	Close(ctx context.Context) error
}

// receiver is the part of *azservicebus.Receiver the transport uses.
type receiver interface {
	ReceiveMessages(ctx context.Context, maxMessages int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	CompleteMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.CompleteMessageOptions) error
	AbandonMessage(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.AbandonMessageOptions) error
	RenewMessageLock(ctx context.Context, m *azservicebus.ReceivedMessage, o *azservicebus.RenewMessageLockOptions) error
	PeekMessages(ctx context.Context, maxMessageCount int, o *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	Close(ctx context.Context) error
}

// namespace builds senders and receivers for queues.
type namespace interface {
	newSender(queue string) (sender, error)
	newReceiver(queue string) (receiver, error)
	close(ctx context.Context) error
}

// sdkNamespace adapts *azservicebus.Client. owned says whether Close closes the client
// (it does when the transport built it from a URL, not when the user handed it in).
type sdkNamespace struct {
	client *azservicebus.Client
	owned  bool
}

func (n sdkNamespace) newSender(queue string) (sender, error) {
	return n.client.NewSender(queue, nil)
}

func (n sdkNamespace) newReceiver(queue string) (receiver, error) {
	r, err := n.client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModePeekLock})
	if err != nil {
		return nil, err
	}
	return sdkReceiver{r}, nil
}

func (n sdkNamespace) close(ctx context.Context) error {
	if !n.owned {
		return nil
	}
	return n.client.Close(ctx)
}

// sdkReceiver turns a panic of the SDK's conversion of a received message (a property
// of an unexpected type) into an error; that batch comes back when its locks expire.
type sdkReceiver struct{ *azservicebus.Receiver }

func (r sdkReceiver) ReceiveMessages(ctx context.Context, n int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	return unpanic(func() ([]*azservicebus.ReceivedMessage, error) { return r.Receiver.ReceiveMessages(ctx, n, o) })
}

// PeekMessages guards the same conversion for Consume's start-up check and Browse.
func (r sdkReceiver) PeekMessages(ctx context.Context, n int, o *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error) {
	return unpanic(func() ([]*azservicebus.ReceivedMessage, error) { return r.Receiver.PeekMessages(ctx, n, o) })
}

func unpanic(call func() ([]*azservicebus.ReceivedMessage, error)) (msgs []*azservicebus.ReceivedMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			msgs, err = nil, fmt.Errorf("%w: %v", errSDKPanic, p)
		}
	}()
	return call()
}
