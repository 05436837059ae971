"""Python peer for the Go redis:// interop tests (babelqueue==1.24.0).

Usage: redis_peer.py COMMAND URL QUEUE [ARG]

URL is the Go form: redis://host:port/db[?laravel=1&prefix=...&retry_after=N], or
rediss:// with the shared TLS parameters (tls_ca, tls_cert, tls_key). The query is turned
into RedisTransport keyword arguments and redis-py's ssl_* parameters here.

Commands:
  produce N          publish N envelopes (URN urn:babel:interop:redis, data {"n": i,
                     "from": "python"}); odd ones with a traceparent header. Prints
                     one JSON line per message: {"id": ..., "headers": {...}}.
  consume N          reserve and acknowledge N messages at the transport level; prints
                     one JSON line per message: {"body": ..., "headers": {...}}.
  handle N           run the Python runtime for N messages; the handler prints one JSON
                     line {"data": ..., "attempts": ...} per message it sees.
  fail-once          run the Python runtime on one message with a handler that fails,
                     so the runtime retries it (attempts + 1) and exits.
  abandon            reserve one message and exit without settling it (a crashed worker).
"""

import json
import sys
import time
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from babelqueue import BabelQueue
from babelqueue.redis_transport import RedisTransport

URN = "urn:babel:interop:redis"


def transport(url):
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    kwargs = {}
    if query.get("laravel") in ("1", "true"):
        kwargs["laravel_compat"] = True
        kwargs["key_prefix"] = query.get("prefix", "queues:")
    if "retry_after" in query:
        kwargs["retry_after"] = int(query["retry_after"])
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(tls_query(parts.scheme, query)), ""))
    client = cluster_client(parts, query)
    if client is not None:
        return RedisTransport(base, client=client, **kwargs)
    return RedisTransport(base, **kwargs)


def cluster_client(parts, query):
    """The redis-py client of a Go cluster URL (docs/transports/redis.md): the nodes of
    the host part as the Sentinels of master `sentinel=NAME`, or as the seed nodes of a
    Redis Cluster (`cluster=1`); None for a URL of one Redis. The RedisTransport then
    works on it, the keys unchanged (a queue named with a hash tag, {orders}, keeps them
    in one slot)."""
    nodes = []
    for node in parts.netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = node.rpartition(":")
        nodes.append((host, int(port)))
    opts = {"decode_responses": True, "encoding_errors": "surrogateescape"}
    if query.get("sentinel"):
        from redis.sentinel import Sentinel

        db = int(parts.path.strip("/") or 0)
        return Sentinel(nodes).master_for(query["sentinel"], db=db, **opts)
    if query.get("cluster") in ("1", "true"):
        from redis.cluster import ClusterNode, RedisCluster

        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in nodes], **opts)
    return None


def tls_query(scheme, query):
    """redis-py's TLS query for the shared TLS parameters of a Go URL (docs/security.md)."""
    if scheme != "rediss":
        return {}
    names = {"tls_ca": "ssl_ca_certs", "tls_cert": "ssl_certfile", "tls_key": "ssl_keyfile"}
    out = {names[k]: v for k, v in query.items() if k in names}
    out["ssl_cert_reqs"] = "none" if query.get("tls_insecure") in ("1", "true") else "required"
    return out


def emit(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
    sys.stdout.flush()


def main():
    command, url, queue = sys.argv[1], sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    tr = transport(url)
    if command == "produce":
        app = BabelQueue(transport=tr, queue=queue)
        for i in range(count):
            data = {"n": i, "from": "python"}
            if i % 2 == 1:
                headers = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
                message_id = app.publish_with_headers(URN, data, headers)
            else:
                headers = {}
                message_id = app.publish(URN, data)
            emit({"id": message_id, "headers": headers})
    elif command == "consume":
        deadline = time.time() + 30
        got = 0
        while got < count and time.time() < deadline:
            m = tr.pop(queue, timeout=1.0)
            if m is None:
                continue
            emit({"body": m.body, "headers": dict(m.headers or {})})
            tr.ack(m)
            got += 1
        if got < count:
            sys.exit("consume: only %d of %d messages arrived" % (got, count))
    elif command == "handle":
        app = BabelQueue(transport=tr, queue=queue)

        def record(data, meta, envelope):
            emit({"data": data, "attempts": envelope.get("attempts"), "lang": meta.get("lang")})

        app.register(URN, record)
        handled = 0
        deadline = time.time() + 30
        while handled < count and time.time() < deadline:
            handled += app.consume(max_messages=count - handled, timeout=1.0, handle_signals=False)
        if handled < count:
            sys.exit("handle: only %d of %d messages handled" % (handled, count))
    elif command == "fail-once":
        app = BabelQueue(transport=tr, queue=queue, max_attempts=3)

        def fail(data, meta, envelope):
            raise RuntimeError("python handler failed on purpose")

        app.register(URN, fail)
        deadline = time.time() + 30
        while time.time() < deadline:
            if app.consume(max_messages=1, timeout=1.0, handle_signals=False) > 0:
                break
        else:
            sys.exit("fail-once: no message arrived")
    elif command == "abandon":
        deadline = time.time() + 30
        while time.time() < deadline:
            m = tr.pop(queue, timeout=1.0)
            if m is not None:
                emit({"body": m.body})
                return
        sys.exit("abandon: no message arrived")
    else:
        sys.exit("unknown command " + command)


if __name__ == "__main__":
    main()
