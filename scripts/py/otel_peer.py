"""Python peer for the Go otel module's interop tests (babelqueue==1.24.0 and its otel
module, spans recorded by the OpenTelemetry SDK's in-memory exporter).

Usage: otel_peer.py COMMAND [ARGS]

Commands:
  ids TRACE_ID...        for each trace_id, the family's mapping as the Python SDK computes
                         it: {"trace_id", "trace", "parent"} (hex trace id, hex span id of
                         the derived remote parent).
  produce URL QUEUE      publish two messages on redis: one through otel.publish (a
                         PRODUCER span, a traceparent header), one plain with the trace_id
                         given as TRACE (no header). One JSON line each:
                         {"id", "trace_id", "traced", "trace", "span"} (trace and span of
                         the PRODUCER span, "" for the plain one).
  consume URL QUEUE N    run the Python runtime on N messages with otel.wrap_handler; one
                         JSON line per CONSUMER span: {"id", "trace_id", "trace", "span",
                         "parent", "parent_remote"}.

Environment: TRACE is the plain message's trace_id (produce).
"""

import json
import os
import sys
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import get_current_span
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from babelqueue import BabelQueue, otel
from babelqueue.redis_transport import RedisTransport

URN = "urn:babel:interop:otel"


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def tracer():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("otel_peer"), exporter


def hex_trace(n):
    return format(n, "032x")


def hex_span(n):
    return format(n, "016x")


def main():
    command = sys.argv[1]
    if command == "ids":
        for trace_id in sys.argv[2:]:
            ctx = otel._parent_context(trace_id)
            sc = get_current_span(ctx).get_span_context()
            emit({"trace_id": trace_id, "trace": hex_trace(otel.trace_id_of(trace_id)), "parent": hex_span(sc.span_id),
                  "parent_trace": hex_trace(sc.trace_id)})
        return
    url, queue = sys.argv[2], sys.argv[3]
    app = BabelQueue(transport=RedisTransport(url), queue=queue)
    tr, exporter = tracer()
    if command == "produce":
        message_id = otel.publish(tr, app, URN, {"n": 0, "from": "python"}, queue=queue)
        span = exporter.get_finished_spans()[-1]
        emit({"id": message_id, "traced": True, "trace": hex_trace(span.context.trace_id),
              "span": hex_span(span.context.span_id), "trace_id": otel.uuid_of(span.context.trace_id)})
        trace_id = os.environ["TRACE"]
        message_id = app.publish(URN, {"n": 1, "from": "python"}, queue=queue, trace_id=trace_id)
        emit({"id": message_id, "traced": False, "trace": "", "span": "", "trace_id": trace_id})
    elif command == "consume":
        count = int(sys.argv[4])

        def record(data, meta, envelope):
            pass

        app.register(URN, otel.wrap_handler(tr, record))
        handled = 0
        deadline = time.time() + 30
        while handled < count and time.time() < deadline:
            handled += app.consume(max_messages=count - handled, timeout=1.0, handle_signals=False)
        if handled < count:
            sys.exit("consume: only %d of %d messages handled" % (handled, count))
        for span in exporter.get_finished_spans():
            attrs = dict(span.attributes or {})
            emit({"id": attrs.get("messaging.message.id", ""), "trace_id": attrs.get("messaging.message.conversation_id", ""),
                  "trace": hex_trace(span.context.trace_id), "span": hex_span(span.context.span_id),
                  "parent": hex_span(span.parent.span_id) if span.parent else "",
                  "parent_remote": bool(span.parent and span.parent.is_remote), "name": span.name,
                  "kind": str(span.kind)})
    else:
        sys.exit("unknown command " + command)


if __name__ == "__main__":
    main()
