"""Service Bus wire peer for the Go transport's interop test.

The Python SDK (babelqueue 1.24.0, AsbTransport over azure-servicebus) runs against a fake
Service Bus client: no namespace is contacted. Messages cross between Go and Python as the
AMQP 1.0 bytes azure-servicebus's own encoder (pyamqp) puts on the wire.

  produce FIXTURE   publish FIXTURE's bytes through AsbTransport; print the encoded
                    AMQP message as one hex line.
  consume           read lines "DELIVERY_COUNT HEX" (AMQP messages the Go transport
                    encoded; the count is informative, the AMQP header carries it), hand
                    each to AsbTransport.pop through a fake receiver and print, per
                    message, one JSON line of what Python received.
"""
import json
import sys

from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus._pyamqp import _encode
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

from babelqueue.asb_transport import AsbTransport


class _Sender:
    def __init__(self, sink):
        self.sink = sink

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def send_messages(self, message, **kwargs):
        self.sink.append(message)

    def close(self):
        pass


class _Receiver:
    def __init__(self, queue):
        self.queue = queue

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def receive_messages(self, max_message_count=1, max_wait_time=None, **kwargs):
        out = self.queue[:max_message_count]
        del self.queue[:max_message_count]
        return out

    def complete_message(self, message):
        pass

    def abandon_message(self, message):
        pass

    def dead_letter_message(self, message, **kwargs):
        pass

    def close(self):
        pass


class _Client:
    def __init__(self, sent, waiting):
        self.sent, self.waiting = sent, waiting

    def get_queue_sender(self, queue_name, **kwargs):
        return _Sender(self.sent)

    def get_queue_receiver(self, queue_name, **kwargs):
        return _Receiver(self.waiting)

    def close(self):
        pass


def produce(path):
    sent = []
    transport = AsbTransport(client=_Client(sent, []))
    with open(path, "rb") as f:
        transport.publish("orders", f.read().decode("utf-8"))
    for message in sent:
        amqp = PyamqpTransport.to_outgoing_amqp_message(message.raw_amqp_message)
        print(bytes(_encode.encode_payload(bytearray(), amqp)).hex())


def consume():
    waiting = []
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        _, hexbytes = line.split(" ", 1)  # the delivery count rides in the AMQP header
        waiting.append(ServiceBusReceivedMessage.from_bytes(bytes.fromhex(hexbytes)))
    transport = AsbTransport(client=_Client([], waiting))
    while True:
        got = transport.pop("orders", timeout=0.01)
        if got is None:
            break
        print(json.dumps({
            "body": got.body,
            "route_urn": got.route_urn,
            "native_attempts": got.native_attempts,
            "headers": got.headers,
            "key": None if got.key is None else got.key.decode("utf-8", "replace"),
        }))


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        produce(sys.argv[2])
    elif sys.argv[1] == "consume":
        consume()
    else:
        sys.exit("usage: servicebus_wire.py produce FIXTURE | consume")
