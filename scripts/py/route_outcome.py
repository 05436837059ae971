"""Report how the Python SDK (babelqueue 1.24.0) routes one delivery: the runtime outcome.

Input (stdin): one JSON object per line, {"name": str, "b64": standard base64 of the body}.
Output (stdout): one JSON object per line, in input order: {"name": str, "outcome": str}.

Each body runs through a fresh BabelQueue on the InMemoryTransport with dead_letter=True,
max_attempts=3 and a handler for urn:babel:orders:created that succeeds. The outcome is
"handled" when the handler ran, else the dead_letter.reason of what the DLQ got ("poison",
"unknown_urn", "failed"), else "requeued" when the work queue holds it again, else
"dropped"; "raised: ..." when the runtime raised.
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


def outcome(text: str) -> str:
    transport = InMemoryTransport()
    app = BabelQueue(transport=transport, queue=QUEUE, dead_letter=True, max_attempts=3)
    ran = []
    app.register(URN, lambda *args, **kwargs: ran.append(True))
    transport.publish(QUEUE, text)
    try:
        app.run(QUEUE, max_messages=1, timeout=0.05, handle_signals=False)
    except Exception as exc:  # noqa: BLE001 - a raise is itself a finding
        return f"raised: {type(exc).__name__}"
    if ran:
        return "handled"
    dead = drain(transport, QUEUE + ".dlq")
    if dead:
        try:
            return json.loads(dead[0])["dead_letter"]["reason"]
        except Exception:  # noqa: BLE001
            return "dead_letter"
    if drain(transport, QUEUE):
        return "requeued"
    return "dropped"


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        item = json.loads(line)
        text = base64.b64decode(item["b64"]).decode("utf-8", "surrogateescape")
        print(json.dumps({"name": item["name"], "outcome": outcome(text)}), flush=True)


if __name__ == "__main__":
    main()
