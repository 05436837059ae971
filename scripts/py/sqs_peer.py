"""Python side of the Go sqs:// interop tests, run against babelqueue==1.24.0.

Usage: sqs_peer.py COMMAND URL QUEUE [N]

URL is the same sqs://<region>?endpoint=... URL the Go transport opens; the Python SDK
parses it itself. AWS credentials come from the environment.

Commands:
  produce N    publish N envelopes to QUEUE (URN urn:babel:interop:sqs, data
               {"n": i, "from": "python"}); every odd one carries a traceparent header.
               One JSON line per message: {"id": ..., "headers": {...}}.
  consume N    pop and ack N messages with the bare transport. One JSON line per
               message: {"body": ..., "headers": {...}}.
  handle N     run the Python runtime until N messages were handled. One JSON line per
               message: {"data": ..., "attempts": ..., "lang": ...}.
  fail-once    run the Python runtime on one message with a handler that raises, so
               the SDK releases it for another delivery, then exit.
"""

import json
import sys
import time

from babelqueue import BabelQueue

URN = "urn:babel:interop:sqs"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def out(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
    sys.stdout.flush()


def produce(url, queue, count):
    app = BabelQueue(url, queue=queue)
    for i in range(count):
        data = {"n": i, "from": "python"}
        headers = {"traceparent": TRACEPARENT} if i % 2 else {}
        if headers:
            mid = app.publish_with_headers(URN, data, headers)
        else:
            mid = app.publish(URN, data)
        out({"id": mid, "headers": headers})


def consume(url, queue, count):
    app = BabelQueue(url, queue=queue)
    tr = app.transport
    seen = 0
    stop_at = time.time() + 30
    while seen < count and time.time() < stop_at:
        msg = tr.pop(queue, timeout=1.0)
        if msg is None:
            continue
        out({"body": msg.body, "headers": dict(msg.headers or {})})
        tr.ack(msg)
        seen += 1
    if seen < count:
        sys.exit("consume: %d of %d messages arrived" % (seen, count))


def handle(url, queue, count):
    app = BabelQueue(url, queue=queue)

    def on_message(data, meta, envelope):
        out({"data": data, "attempts": envelope.get("attempts"), "lang": meta.get("lang")})

    app.register(URN, on_message)
    done = 0
    stop_at = time.time() + 30
    while done < count and time.time() < stop_at:
        done += app.consume(max_messages=count - done, timeout=1.0, handle_signals=False)
    if done < count:
        sys.exit("handle: %d of %d messages handled" % (done, count))


def fail_once(url, queue):
    app = BabelQueue(url, queue=queue, max_attempts=3)

    def broken(data, meta, envelope):
        raise RuntimeError("failing on purpose in the Python peer")

    app.register(URN, broken)
    stop_at = time.time() + 30
    while time.time() < stop_at:
        if app.consume(max_messages=1, timeout=1.0, handle_signals=False) > 0:
            return
    sys.exit("fail-once: nothing arrived")


def main():
    command, url, queue = sys.argv[1:4]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if command == "produce":
        produce(url, queue, count)
    elif command == "consume":
        consume(url, queue, count)
    elif command == "handle":
        handle(url, queue, count)
    elif command == "fail-once":
        fail_once(url, queue)
    else:
        sys.exit("unknown command: " + command)


if __name__ == "__main__":
    main()
