"""Python peer for the Go idempotency interop tests (babelqueue==1.24.0).

Usage: idempotency_peer.py handle BROKER_URL QUEUE STORE_URL

Runs the Python runtime on the Redis broker at BROKER_URL (queue QUEUE) until it has
handled one message, its handler wrapped by the Python SDK's own helper,
babelqueue.idempotency.wrap. The Python SDK ships the helper and its IdempotencyStore
protocol but no shared store, so the store here follows the layout the family's Go
stores share in Redis (the public Go reference SDK's, named in SPEC 8.1): one key
bq:idemp:<meta.id>, remembered with SET <key> 1 NX, read with EXISTS, dropped with DEL.

Prints one JSON line {"effect": <meta.id>} when the handler runs, then
{"handled": <n>} when the runtime has consumed the message.
"""

import json
import sys
import time

import redis
from babelqueue import BabelQueue
from babelqueue.idempotency import IdempotencyStore, wrap
from babelqueue.redis_transport import RedisTransport

URN = "urn:babel:interop:idempotency"
PREFIX = "bq:idemp:"


class ReferenceLayoutStore:
    """The IdempotencyStore protocol over the Go reference SDK's Redis layout."""

    def __init__(self, url):
        self._r = redis.Redis.from_url(url)

    def seen(self, message_id):
        return self._r.exists(PREFIX + message_id) > 0

    def remember(self, message_id):
        self._r.set(PREFIX + message_id, "1", nx=True)

    def forget(self, message_id):
        self._r.delete(PREFIX + message_id)


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def main():
    command, broker_url, queue, store_url = sys.argv[1:5]
    if command != "handle":
        sys.exit("unknown command " + command)
    store = ReferenceLayoutStore(store_url)
    assert isinstance(store, IdempotencyStore)
    app = BabelQueue(transport=RedisTransport(broker_url), queue=queue)

    def effect(data, meta):
        emit({"effect": meta["id"]})

    app.register(URN, wrap(store, effect))
    handled = 0
    deadline = time.time() + 30
    while handled < 1 and time.time() < deadline:
        handled += app.consume(max_messages=1, timeout=1.0, handle_signals=False)
    if handled < 1:
        sys.exit("handle: no message arrived")
    emit({"handled": handled})


if __name__ == "__main__":
    main()
