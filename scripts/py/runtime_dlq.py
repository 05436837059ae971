"""Settle fixed scenarios with the Python SDK (babelqueue 1.24.0) on its in-memory
transport and print, one JSON line per scenario, what ended up on <queue>.dlq and
<queue>. The Go runtime test runs the same scenarios and compares the bytes.

Input (argv[1]): the envelope body used by every scenario.
Output: {"name": ..., "dlq": [bodies], "queue": [bodies]}
"""

import json
import logging
import sys

from babelqueue import BabelQueue, InMemoryTransport

logging.disable(logging.CRITICAL)
QUEUE = "orders"
URN = "urn:babel:orders:created"


def drain(transport, queue):
    out = []
    while transport.size(queue) > 0:
        msg = transport.pop(queue, timeout=0.01)
        if msg is None:
            break
        out.append(msg.body)
        transport.ack(msg)
    return out


def fail(*_args, **_kwargs):
    raise ValueError("payment gateway timeout")


def scenario(name, body, rounds, register, **options):
    transport = InMemoryTransport()
    app = BabelQueue(transport=transport, queue=QUEUE, **options)
    if register:
        app.register(URN, fail)
    transport.publish(QUEUE, body)
    for _ in range(rounds):
        app.run(QUEUE, max_messages=1, timeout=0.05, handle_signals=False)
    print(json.dumps({"name": name, "dlq": drain(transport, QUEUE + ".dlq"), "queue": drain(transport, QUEUE)}))


def main():
    body = sys.argv[1]
    scenario("failed-exhausted", body, 3, True, dead_letter=True, max_attempts=3)
    scenario("failed-once", body, 1, True, dead_letter=True, max_attempts=3)
    scenario("unknown-dead-letter", body, 1, False, on_unknown_urn="dead_letter")
    scenario("unknown-fail-exhausted", body, 2, False, dead_letter=True, max_attempts=2)
    scenario("unknown-release", body, 1, False, on_unknown_urn="release")
    scenario("poison-identity-less", '{"trace_id":"t","data":{"n":1e400}}', 1, True, dead_letter=True)
    scenario("poison-not-json", "not json", 1, True, dead_letter=True)


if __name__ == "__main__":
    main()
