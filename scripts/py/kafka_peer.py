"""Python SDK (babelqueue 1.24.0) peer for the Go kafka:// interop tests.

Usage:
  kafka_peer.py publish URL QUEUE        stdin: JSON lines {"urn", "data", "headers"?};
                                         publishes each with the SDK (fire-and-forget, then
                                         flushed), prints {"id": meta.id} per line
  kafka_peer.py work URL QUEUE GROUP N   runs the SDK worker in consumer group GROUP until N
                                         messages were handled (or the queue stays empty);
                                         prints one JSON line per handler call
                                         {"urn", "data", "meta", "attempts", "headers"}
      --fail URN          the handler for URN raises RuntimeError("python says no")
      --dead-letter       dead_letter=True
      --max-attempts N    max_attempts=N (default 3)
      --urn URN           a handler that records (repeatable)
  kafka_peer.py drain URL QUEUE GROUP N  pops N records of QUEUE with the SDK's Kafka transport,
                                         acks each, prints per record
                                         {"body", "key" (hex or null), "headers"}
"""

import argparse
import json
import logging
import sys
import time

from babelqueue import BabelQueue, headers_from_context
from babelqueue.kafka_transport import KafkaTransport

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def publish(args):
    transport = KafkaTransport(args.url)
    app = BabelQueue(transport=transport, queue=args.queue)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        headers = req.get("headers") or {}
        if headers:
            mid = app.publish_with_headers(req["urn"], req["data"], headers)
        else:
            mid = app.publish(req["urn"], req["data"])
        print(json.dumps({"id": mid}), flush=True)
    # publish is fire-and-forget: make sure the records left before exiting.
    producer = getattr(transport, "_producer_")()
    remaining = producer.flush(30)
    if remaining:
        sys.exit("kafka_peer: %d records not delivered" % remaining)


def work(args):
    transport = KafkaTransport(args.url, group_id=args.group)
    app = BabelQueue(
        transport=transport,
        queue=args.queue,
        dead_letter=args.dead_letter,
        max_attempts=args.max_attempts,
    )
    seen = []

    def recorder(urn, fail):
        def handle(data, meta, envelope):
            seen.append(1)
            print(json.dumps({
                "urn": urn,
                "data": data,
                "meta": meta,
                "attempts": envelope.get("attempts") if isinstance(envelope, dict) else None,
                "headers": dict(headers_from_context()),
            }), flush=True)
            if fail:
                raise RuntimeError("python says no")
        return handle

    for urn in args.urn:
        app.register(urn, recorder(urn, False))
    for urn in args.fail:
        app.register(urn, recorder(urn, True))
    deadline = time.time() + 60
    while len(seen) < args.n and time.time() < deadline:
        app.run(max_messages=args.n - len(seen), timeout=5.0, handle_signals=False)
    producer = getattr(transport, "_producer_")()
    producer.flush(30)


def drain(args):
    transport = KafkaTransport(args.url, group_id=args.group)
    got = 0
    deadline = time.time() + 60
    while got < args.n and time.time() < deadline:
        msg = transport.pop(args.queue, timeout=1.0)
        if msg is None:
            continue
        body = msg.body
        print(json.dumps({
            "body": body,
            "key": None if msg.key is None else bytes(msg.key).hex(),
            "headers": dict(msg.headers or {}),
        }), flush=True)
        transport.ack(msg)
        got += 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("publish")
    pp.add_argument("url")
    pp.add_argument("queue")
    pw = sub.add_parser("work")
    pw.add_argument("url")
    pw.add_argument("queue")
    pw.add_argument("group")
    pw.add_argument("n", type=int)
    pw.add_argument("--fail", action="append", default=[])
    pw.add_argument("--urn", action="append", default=[])
    pw.add_argument("--dead-letter", action="store_true")
    pw.add_argument("--max-attempts", type=int, default=3)
    pd = sub.add_parser("drain")
    pd.add_argument("url")
    pd.add_argument("queue")
    pd.add_argument("group")
    pd.add_argument("n", type=int)
    args = p.parse_args()
    {"publish": publish, "work": work, "drain": drain}[args.cmd](args)


if __name__ == "__main__":
    main()
