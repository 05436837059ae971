"""Python SDK (babelqueue 1.24.0) peer for the Go amqp:// interop tests.

Usage:
  amqp_peer.py publish URL QUEUE         stdin: JSON lines {"urn", "data", "headers"?, "trace_id"?};
                                         publishes each with the SDK, prints {"id": meta.id} per line
  amqp_peer.py consume URL QUEUE [opts]  runs the SDK worker until QUEUE stays empty for 3 s;
                                         prints one JSON line per handler call:
                                         {"urn", "data", "meta", "envelope", "headers"}
      --fail URN          the handler for URN raises RuntimeError("python says no")
      --dead-letter       dead_letter=True
      --max-attempts N    max_attempts=N (default 3)
      --urn URN           a handler that records (repeatable)
  amqp_peer.py drain URL QUEUE           pops QUEUE with the SDK's RabbitMQ transport until it is
                                         empty for 2 s, acks each, prints per message
                                         {"body", "decoded", "accepts", "headers"}
"""

import argparse
import json
import sys
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from babelqueue import BabelQueue, EnvelopeCodec, headers_from_context
from babelqueue.pika_transport import PikaTransport


def publish(args):
    app = BabelQueue(args.url, queue=args.queue)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        headers = req.get("headers") or {}
        if headers:
            mid = app.publish_with_headers(req["urn"], req["data"], headers, trace_id=req.get("trace_id"))
        else:
            mid = app.publish(req["urn"], req["data"], trace_id=req.get("trace_id"))
        print(json.dumps({"id": mid}), flush=True)


def consume(args):
    app = BabelQueue(
        args.url,
        queue=args.queue,
        dead_letter=args.dead_letter,
        max_attempts=args.max_attempts,
    )

    def recorder(urn):
        def handle(data, meta, envelope):
            seen = {
                "urn": urn,
                "data": data,
                "meta": meta,
                "envelope": envelope,
                "headers": dict(headers_from_context()),
            }
            print(json.dumps(seen), flush=True)
        return handle

    def refuse(data, meta, envelope):
        raise RuntimeError("python says no")

    for urn in args.urn or []:
        app.register(urn, recorder(urn))
    if args.fail:
        app.register(args.fail, refuse)
    app.consume(max_messages=10_000, timeout=3.0, handle_signals=False)


def drain(args):
    tr = PikaTransport(args.url)
    try:
        while True:
            msg = tr.pop(args.queue, timeout=2.0)
            if msg is None:
                break
            decoded = EnvelopeCodec.decode_lenient(msg.body)
            out = {
                "body": msg.body,
                "decoded": decoded,
                "accepts": EnvelopeCodec.accepts(decoded) if decoded else False,
                "headers": dict(msg.headers or {}),
            }
            print(json.dumps(out), flush=True)
            tr.ack(msg)
    finally:
        tr.close()


def pika_url(url):
    """pika's form of a Go amqps:// URL: the shared TLS parameters (docs/security.md) become
    pika's ssl_options; Go's own parameters are dropped."""
    parts = urlsplit(url)
    if parts.scheme != "amqps":
        return url
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    opts = {"server_hostname": query.get("tls_server_name", parts.hostname)}
    for go, py in (("tls_ca", "ca_certs"), ("tls_cert", "certfile"), ("tls_key", "keyfile")):
        if go in query:
            opts[py] = query[go]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode({"ssl_options": repr(opts)}), ""))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("publish", "consume", "drain"):
        s = sub.add_parser(name)
        s.add_argument("url")
        s.add_argument("queue")
        if name == "consume":
            s.add_argument("--fail")
            s.add_argument("--dead-letter", action="store_true")
            s.add_argument("--max-attempts", type=int, default=3)
            s.add_argument("--urn", action="append")
    args = p.parse_args()
    args.url = pika_url(args.url)
    {"publish": publish, "consume": consume, "drain": drain}[args.cmd](args)


if __name__ == "__main__":
    main()
