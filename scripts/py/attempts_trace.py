"""Report how the Python SDK (babelqueue 1.24.0) counts one body's attempts until it is
dead-lettered.

Input (stdin): one JSON object per line: {"name": str, "b64": standard base64 of the body,
"max_attempts": int, "on_unknown_urn": str}.
Output (stdout): one JSON object per line, in input order: {"name": str, "outcome": str}.

Each body runs through a fresh BabelQueue on the InMemoryTransport with dead_letter=True,
the given max_attempts and on_unknown_urn, and a handler for urn:babel:orders:created that
always fails. The runtime takes the queue's messages one at a time until the queue is
empty. The outcome is "saw=<the attempts the handler saw, comma-separated>
dead_letter.attempts=<the block's attempts>" ("none" when nothing was dead-lettered).
"""

import base64
import json
import logging
import sys

from babelqueue import BabelQueue, InMemoryTransport
from runtime_dlq import drain  # the same queue reader as the runtime DLQ scenarios

logging.disable(logging.CRITICAL)
QUEUE = "orders"
URN = "urn:babel:orders:created"


def outcome(text: str, max_attempts: int, on_unknown_urn: str) -> str:
    transport = InMemoryTransport()
    app = BabelQueue(transport=transport, queue=QUEUE, dead_letter=True,
                     max_attempts=max_attempts, on_unknown_urn=on_unknown_urn)
    saw = []

    def handler(data, meta, envelope):
        saw.append(envelope["attempts"])
        raise ValueError("payment gateway timeout")

    app.register(URN, handler)
    transport.publish(QUEUE, text)
    for _ in range(64):
        if transport.size(QUEUE) == 0:
            break
        app.run(QUEUE, max_messages=1, timeout=0.05, handle_signals=False)
    dead = drain(transport, QUEUE + ".dlq")
    block = json.loads(dead[0])["dead_letter"]["attempts"] if dead else "none"
    return "saw=%s dead_letter.attempts=%s" % (",".join(str(n) for n in saw), block)


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        item = json.loads(line)
        text = base64.b64decode(item["b64"]).decode("utf-8")
        print(json.dumps({"name": item["name"],
                          "outcome": outcome(text, item["max_attempts"], item["on_unknown_urn"])}), flush=True)


if __name__ == "__main__":
    main()
