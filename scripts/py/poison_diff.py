"""Run bodies through the Python SDK (babelqueue 1.24.0) and report what it does.

Input (stdin): one JSON object per line, {"name": str, "b64": standard base64 of the body}.
Output (stdout): one JSON object per line, in input order:

  name          the input name
  poison        EnvelopeCodec.poison_cause(body) (a string) or null
  accepts       EnvelopeCodec.accepts(decode_lenient(body)) when not poison, else null
  urn           EnvelopeCodec.urn(decode_lenient(body)) when not poison, else null
  dlq           base64 of the body the memory transport writes to <queue>.dlq when the app
                runs with dead_letter=True, max_attempts=1 and a handler that raises
                RuntimeError("boom") for the body's URN (null when nothing was written)
  retry         base64 of the body re-published for a retry with max_attempts=2 (null if none)

The clock is pinned so failed_at is FAILED_AT_MS (1749132730000). Bytes that are not UTF-8 are
carried as surrogateescape code points, as the Python transports carry them.
"""

import base64
import json
import logging
import sys
import time

FAILED_AT_MS = 1749132730000
_fixed = FAILED_AT_MS / 1000.0
time.time = lambda: _fixed  # pin the clock for deterministic failed_at
time.time_ns = lambda: FAILED_AT_MS * 1_000_000

from babelqueue import BabelQueue, EnvelopeCodec, InMemoryTransport  # noqa: E402

logging.disable(logging.CRITICAL)
QUEUE = "orders"


def as_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def as_bytes(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # A lone surrogate code point (from a \ud800 escape that was decoded and
        # re-encoded unescaped) cannot be UTF-8: show it as its 3-byte form.
        return text.encode("utf-8", "surrogatepass")


def drain(transport: InMemoryTransport, queue: str):
    out = []
    while transport.size(queue) > 0:
        msg = transport.pop(queue, timeout=0.01)
        if msg is None:
            break
        out.append(msg.body)
        transport.ack(msg)
    return out


def boom(*_args, **_kwargs):
    raise RuntimeError("boom")


def run(text: str, urn: str, max_attempts: int):
    transport = InMemoryTransport()
    app = BabelQueue(transport=transport, queue=QUEUE, dead_letter=True, max_attempts=max_attempts)
    if urn:
        app.register(urn, boom)
    transport.publish(QUEUE, text)
    try:
        app.run(QUEUE, max_messages=1, timeout=0.05, handle_signals=False)
    except Exception as exc:  # the report says so; a raise is itself a finding
        return None, None, f"{type(exc).__name__}: {exc}"
    dlq = drain(transport, QUEUE + ".dlq")
    rest = drain(transport, QUEUE)
    return dlq, rest, None


def b64(text):
    return None if text is None else base64.b64encode(as_bytes(text)).decode("ascii")


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        item = json.loads(line)
        raw = base64.b64decode(item["b64"])
        text = as_text(raw)
        res = {"name": item["name"], "poison": None, "accepts": None, "urn": None,
               "dlq": None, "retry": None, "raised": None}
        try:
            res["poison"] = EnvelopeCodec.poison_cause(text)
        except Exception as exc:
            res["poison"] = f"RAISED {type(exc).__name__}: {exc}"
        urn = ""
        if res["poison"] is None:
            env = EnvelopeCodec.decode_lenient(text)
            res["accepts"] = bool(EnvelopeCodec.accepts(env))
            urn = EnvelopeCodec.urn(env)
            res["urn"] = urn
        dlq, _, err = run(text, urn, 1)
        if err:
            res["raised"] = err
        elif dlq:
            res["dlq"] = b64(dlq[0])
        if res["poison"] is None:
            _, rest, err = run(text, urn, 2)
            if rest:
                res["retry"] = b64(rest[0])
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
