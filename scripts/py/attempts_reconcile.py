"""Report the attempts the Python SDK (babelqueue 1.24.0) reads from one delivery on each
broker binding with a native count, from the transports' own reconciliation of a received
body (the step before the runtime sees it; no broker is needed for it).

Input (stdin): one JSON object per line: {"name": str, "binding": "sqs" | "servicebus" |
"artemis" | "pulsar" | "kafka", "body": str, "native": int (the broker's own count as
it reports it: SQS ApproximateReceiveCount, Service Bus DeliveryCount, Artemis
delivery-count, Pulsar redelivery_count), "header": str or null (the bq-attempts header
or property)}.
Output (stdout): one JSON object per line, in input order: {"name": str, "attempts": int}.
"""

import json
import logging
import sys

from babelqueue.artemis_transport import ArtemisTransport
from babelqueue.asb_transport import AsbTransport
from babelqueue.kafka_transport import KafkaTransport
from babelqueue.pulsar_transport import PulsarTransport
from babelqueue.sqs_transport import SqsTransport

logging.disable(logging.CRITICAL)


def reconciled(binding, body, native, header):
    if binding == "sqs":
        return SqsTransport._reconcile(body, str(native))
    if binding == "servicebus":
        return AsbTransport._reconcile(body, native)
    if binding == "artemis":
        return ArtemisTransport._reconcile(body, native)
    if binding == "pulsar":
        props = {} if header is None else {"bq-attempts": header}
        return PulsarTransport._reconcile(body, native, props)[0]
    if binding == "kafka":
        headers = [] if header is None else [("bq-attempts", header.encode("utf-8"))]
        return KafkaTransport._reconcile(body, headers)
    raise SystemExit("unknown binding " + binding)


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        c = json.loads(line)
        body = reconciled(c["binding"], c["body"], c["native"], c.get("header"))
        print(json.dumps({"name": c["name"], "attempts": json.loads(body)["attempts"]}), flush=True)


if __name__ == "__main__":
    main()
