"""Python peer for the Go redrive/replay interop tests (babelqueue==1.24.0), on Redis.

Usage: redrive_peer.py COMMAND URL QUEUE [ARG]

URL is the Go form redis://host:port/db (the default layout).

Commands:
  redrive DLQ BYPASS   run the SDK's redrive of dead-letter queue DLQ (QUEUE unused),
                       with bypass=True when BYPASS is "1"; prints the result as JSON:
                       {"redriven": n, "skipped": n, "bypassed": [bool, ...]}.
  handle N             run the Python runtime on QUEUE for N messages of any URN the
                       tests use; the handler prints one JSON line per message:
                       {"urn": ..., "id": ..., "replay": is_replay(), "effect": bool}
                       where effect says whether bypass_external_effects ran its
                       function.
"""

import json
import sys
import time
from urllib.parse import urlsplit, urlunsplit

from babelqueue import BabelQueue, bypass_external_effects, is_replay
from babelqueue.redis_transport import RedisTransport
from babelqueue.redrive import redrive

URNS = ("urn:babel:orders:created", "urn:babel:payments:captured")


def emit(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
    sys.stdout.flush()


def main():
    command, url, queue = sys.argv[1], sys.argv[2], sys.argv[3]
    parts = urlsplit(url)
    tr = RedisTransport(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")))
    if command == "redrive":
        dlq, bypass = sys.argv[4], sys.argv[5] == "1"
        result = redrive(tr, dlq, bypass=bypass, timeout=1.0)
        emit({
            "redriven": result.redriven,
            "skipped": result.skipped,
            "bypassed": [item.bypassed for item in result.items if item.redriven],
        })
    elif command == "handle":
        count = int(sys.argv[4])
        app = BabelQueue(transport=tr, queue=queue)

        def handle(data, meta, envelope):
            ran = []
            bypass_external_effects(lambda: ran.append(True))
            emit({"urn": envelope.get("job"), "id": meta.get("id"), "replay": is_replay(), "effect": bool(ran)})

        for urn in URNS:
            app.register(urn, handle)
        handled = 0
        deadline = time.time() + 30
        while handled < count and time.time() < deadline:
            handled += app.consume(max_messages=count - handled, timeout=1.0, handle_signals=False)
        if handled < count:
            sys.exit("handle: only %d of %d messages handled" % (handled, count))
    else:
        sys.exit("unknown command " + command)


if __name__ == "__main__":
    main()
