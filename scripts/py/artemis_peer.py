"""Python SDK (babelqueue 1.24.0) peer for the Go artemis:// interop tests.

Usage:
  artemis_peer.py publish URL QUEUE        stdin: JSON lines {"urn", "data", "trace_id"?};
                                           publishes each through the SDK's Artemis
                                           transport, prints {"id": meta.id} per line
  artemis_peer.py consume URL QUEUE [opts] runs the SDK worker until QUEUE stays empty
                                           for 3 s; one JSON line per handler call:
                                           {"urn", "data", "meta", "attempts"}
      --urn URN           a handler that records (repeatable)
      --fail URN          the handler for URN raises RuntimeError("python says no")
      --dead-letter       dead_letter=True
      --max-attempts N    max_attempts=N (default 3)
  artemis_peer.py drain URL QUEUE          pops QUEUE with the SDK's Artemis transport
                                           until it stays empty for 2 s, acks each, prints
                                           {"body", "native_attempts", "headers", "route_urn"}

The URL is the artemis:// URL the Go tests use (credentials included).
"""

import argparse
import json
import sys

from babelqueue import BabelQueue
from babelqueue.artemis_transport import ArtemisTransport


def publish(args):
    app = BabelQueue(args.url, queue=args.queue)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        mid = app.publish(req["urn"], req["data"], trace_id=req.get("trace_id"))
        print(json.dumps({"id": mid}), flush=True)


def consume(args):
    app = BabelQueue(
        args.url,
        queue=args.queue,
        dead_letter=args.dead_letter,
        max_attempts=args.max_attempts,
    )

    def make(urn, fail):
        def handle(data, meta, envelope):
            print(
                json.dumps(
                    {
                        "urn": urn,
                        "data": data,
                        "meta": meta,
                        "attempts": envelope.get("attempts") if isinstance(envelope, dict) else None,
                    }
                ),
                flush=True,
            )
            if fail:
                raise RuntimeError("python says no")

        return handle

    for urn in args.urn or []:
        app.handler(urn)(make(urn, False))
    for urn in args.fail or []:
        app.handler(urn)(make(urn, True))
    app.run(args.queue, timeout=3.0, handle_signals=False, max_messages=args.max_messages)


def drain(args):
    t = ArtemisTransport(args.url)
    try:
        while True:
            m = t.pop(args.queue, timeout=2.0)
            if m is None:
                break
            print(
                json.dumps(
                    {
                        "body": m.body,
                        "native_attempts": m.native_attempts,
                        "headers": dict(m.headers or {}),
                        "route_urn": m.route_urn,
                    }
                ),
                flush=True,
            )
            t.ack(m)
    finally:
        t.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["publish", "consume", "drain"])
    p.add_argument("url")
    p.add_argument("queue")
    p.add_argument("--urn", action="append")
    p.add_argument("--fail", action="append")
    p.add_argument("--dead-letter", action="store_true")
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--max-messages", type=int, default=None)
    args = p.parse_args()
    {"publish": publish, "consume": consume, "drain": drain}[args.mode](args)


if __name__ == "__main__":
    main()
