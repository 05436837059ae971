"""The Python SDK's side of the cross-SDK benchmark (babelqueue==1.24.0), driven by
benchmarks/sdkcompare (scripts/sdkbench.sh).

Usage: sdkbench.py publish URL QUEUE FIRST COUNT
       sdkbench.py consume URL QUEUE GROUP IDLE_SECONDS

publish   publishes COUNT envelopes (URN urn:babel:bench:sdk, data {"n": i} for i from
          FIRST), each with the SDK's own confirmation (Kafka: the producer is flushed at
          the end, as the SDK's Kafka publish is fire-and-forget).
consume   runs the SDK's worker on QUEUE (Kafka: consumer group GROUP) until no message
          came for IDLE_SECONDS; the handler records data.n.

Both print one JSON line at the end: the wall-clock instants (Unix ns) of the first and
last message, the process's CPU seconds between being ready and the end, and for consume
the list of n handled (the caller checks that each was handled exactly once).
"""

import json
import resource
import sys
import time

from babelqueue import BabelQueue

URN = "urn:babel:bench:sdk"


def ready():
    """Tell the driver this process is connected; start when it says so."""
    print("ready", flush=True)
    sys.stdin.readline()


def cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def transport(url, group):
    scheme = url.split("://", 1)[0]
    if scheme == "kafka":
        from babelqueue.kafka_transport import KafkaTransport

        return KafkaTransport(url, group_id=group) if group else KafkaTransport(url)
    if scheme == "pulsar":
        import pulsar
        from babelqueue.pulsar_transport import PulsarTransport

        client = pulsar.Client(url, logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, "/dev/stderr"))
        return PulsarTransport(url, client=client, initial_position=pulsar.InitialPosition.Earliest)
    return None  # the SDK builds it from the URL


def publish(url, queue, first, count):
    tr = transport(url, None)
    app = BabelQueue(url, transport=tr, queue=queue) if tr else BabelQueue(url, queue=queue)
    ready()
    cpu0 = cpu()
    start = time.time_ns()
    for i in range(first, first + count):
        app.publish(URN, {"n": i})
    if url.startswith("kafka://"):
        left = app.transport._producer_().flush(60)
        if left:
            sys.exit("sdkbench: %d Kafka records not delivered" % left)
    end = time.time_ns()
    used = cpu() - cpu0
    print(json.dumps({"first": start, "last": end, "cpu": used, "count": count}), flush=True)
    close = getattr(app.transport, "close", None)
    if close:
        close()


def consume(url, queue, group, idle):
    tr = transport(url, group)
    app = BabelQueue(url, transport=tr, queue=queue) if tr else BabelQueue(url, queue=queue)
    handled = []
    clock = {"first": 0, "last": 0}

    def handle(data, meta):
        now = time.time_ns()
        if not handled:
            clock["first"] = now
        clock["last"] = now
        handled.append(data["n"])

    app.register(URN, handle)
    ready()
    cpu0 = cpu()
    # With max_messages set, consume returns once no message came for the timeout.
    began = time.time()
    while True:
        app.consume(max_messages=10**9, timeout=idle, handle_signals=False)
        if handled or time.time() - began > 60:
            break
    used = cpu() - cpu0
    print(json.dumps({"first": clock["first"], "last": clock["last"], "cpu": used, "count": len(handled), "handled": handled}), flush=True)
    close = getattr(app.transport, "close", None)
    if close:
        close()


def main():
    command = sys.argv[1]
    if command == "publish":
        publish(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif command == "consume":
        consume(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    else:
        sys.exit("sdkbench: unknown command " + command)


if __name__ == "__main__":
    main()
