"""Python SDK (babelqueue 1.24.0) side of the Go pulsar:// interop tests.

  pulsar_peer.py publish URL TOPIC          reads JSON lines {"urn", "data", "headers"?}
                                            on stdin, publishes each with the SDK's Pulsar
                                            transport and writes {"id": <meta.id>} per line
  pulsar_peer.py consume URL TOPIC [flags]  runs an SDK worker until TOPIC has been quiet
                                            for 3 s; writes one JSON line per handler call
                                            with the urn, data, meta and attempts it saw
      --urn URN          register a handler for URN that records and returns
      --fail URN         register a handler for URN that records and raises
      --dead-letter      dead_letter=True
      --max-attempts N   max_attempts=N (default 3)
  pulsar_peer.py drain URL TOPIC            pops TOPIC with the SDK transport until it is
                                            quiet for 3 s, acknowledging each message, and
                                            writes {"body", "native_attempts", "headers",
                                            "route_urn"} per message

Every consumer subscribes at the earliest position, so what the Go side wrote before
the subscription existed is read too.
"""

import argparse
import json
import os
import sys

import pulsar
from babelqueue import BabelQueue
from babelqueue.pulsar_transport import PulsarTransport


def transport(url):
    # The C++ client logs to stdout by default; stdout carries this script's JSON lines,
    # so its log goes to stderr, warnings and worse only. (A Python logging.Logger here
    # is called from the client's C++ threads, which can abort the interpreter at exit.)
    client = pulsar.Client(url, logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, "/dev/stderr"))
    CLIENTS.append(client)
    return PulsarTransport(url, client=client, initial_position=pulsar.InitialPosition.Earliest)


CLIENTS = []


def close_clients():
    for c in CLIENTS:
        try:
            c.close()
        except pulsar.AlreadyClosed:  # the SDK transport closed it already
            pass


def cmd_publish(args):
    t = transport(args.url)
    app = BabelQueue(transport=t, queue=args.topic)
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw:
            continue
        req = json.loads(raw)
        if req.get("headers"):
            mid = app.publish_with_headers(req["urn"], req["data"], req["headers"])
        else:
            mid = app.publish(req["urn"], req["data"])
        print(json.dumps({"id": mid}), flush=True)
    t.close()


def cmd_consume(args):
    app = BabelQueue(
        transport=transport(args.url),
        queue=args.topic,
        dead_letter=args.dead_letter,
        max_attempts=args.max_attempts,
    )

    def recorder(urn, raise_after):
        def handler(data, meta, envelope):
            attempts = envelope.get("attempts") if isinstance(envelope, dict) else None
            print(json.dumps({"urn": urn, "data": data, "meta": meta, "attempts": attempts}), flush=True)
            if raise_after:
                raise RuntimeError("the python handler refuses")

        return handler

    for urn in args.urn or []:
        app.handler(urn)(recorder(urn, False))
    for urn in args.fail or []:
        app.handler(urn)(recorder(urn, True))
    app.run(args.topic, timeout=3.0, handle_signals=False, max_messages=args.max_messages)


def cmd_drain(args):
    t = transport(args.url)
    try:
        while True:
            m = t.pop(args.topic, timeout=3.0)
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
    p.add_argument("topic")
    p.add_argument("--urn", action="append")
    p.add_argument("--fail", action="append")
    p.add_argument("--dead-letter", action="store_true")
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--max-messages", type=int, default=None)
    args = p.parse_args()
    {"publish": cmd_publish, "consume": cmd_consume, "drain": cmd_drain}[args.mode](args)
    close_clients()
    # Every result is written and every client closed: leave without the interpreter's
    # teardown, in which the C++ client's destructors sometimes abort the process
    # ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
