"""Python peer for the Go schema and fieldcrypt interop tests (babelqueue==1.24.0).

Usage: schema_peer.py COMMAND [ARG...]

Commands reading one JSON document on stdin and printing JSON on stdout:
  verdicts             stdin {"cases": [{"name", "schema", "data"}]}; prints one line
                       {"name", "valid", "violation"} per case, from
                       babelqueue.schema.validate_schema (the Python subset); a
                       case it raises on is invalid, the violation naming the raise.
  protect KEY          stdin {"schema", "data"}; prints {"data": ...} with the
                       x-gdpr-sensitive fields encrypted by babelqueue.gdpr.protect.
  unprotect KEY        stdin {"schema", "data"}; prints {"data": ...}, or
                       {"error": "<exception class>: <text>"} when a field does not decrypt.

Commands on a Redis queue (URL is the Go form redis://host:port/db):
  produce URL QUEUE URN KEY      stdin {"schema", "data"}; protects the data (KEY "-" to
                                 publish it as it is) and publishes it; prints {"id": ...}.
  handle URL QUEUE URN KEY N     runs the Python runtime (dead_letter=True, max_attempts=1)
                                 for N messages; the handler unprotects the data and prints
                                 {"data": ...}; a field that does not decrypt raises, so the
                                 runtime dead-letters the message.

KEY is a standard base64 AES-256 key. The cipher below is the family's AES-256-GCM format
as babelqueue.gdpr documents it (a random 12-byte nonce before the sealed bytes, standard
base64, no associated data); babelqueue 1.24.0 leaves the concrete cipher to the caller.
"""

import base64
import json
import os
import sys
import time

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from babelqueue import BabelQueue
from babelqueue.gdpr import protect, unprotect
from babelqueue.redis_transport import RedisTransport
from babelqueue.schema import validate_schema


class FamilyAesGcm:
    """AES-256-GCM, nonce || sealed, standard base64."""

    def __init__(self, key_b64):
        self._aead = AESGCM(base64.b64decode(key_b64))

    def encrypt(self, plaintext):
        nonce = os.urandom(12)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, plaintext, None)).decode("ascii")

    def decrypt(self, ciphertext):
        raw = base64.b64decode(ciphertext, validate=True)
        return self._aead.decrypt(raw[:12], raw[12:], None)


def emit(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
    sys.stdout.flush()


def read_stdin():
    return json.loads(sys.stdin.read())


def main():
    command = sys.argv[1]
    if command == "verdicts":
        for case in read_stdin()["cases"]:
            try:
                violation = validate_schema(case["schema"], case["data"])
            except Exception as exc:  # a raise fails the message as a violation does
                violation = "raised %s: %s" % (type(exc).__name__, exc)
            emit({"name": case["name"], "valid": violation is None, "violation": violation})
    elif command == "protect":
        doc = read_stdin()
        data = doc["data"]
        protect(data, doc["schema"], FamilyAesGcm(sys.argv[2]))
        emit({"data": data})
    elif command == "unprotect":
        doc = read_stdin()
        data = doc["data"]
        try:
            unprotect(data, doc["schema"], FamilyAesGcm(sys.argv[2]))
        except Exception as exc:  # the verdict is what the test compares
            emit({"error": "%s: %s" % (type(exc).__name__, exc)})
            return
        emit({"data": data})
    elif command == "produce":
        url, queue, urn, key = sys.argv[2:6]
        doc = read_stdin()
        data = doc["data"]
        if key != "-":
            protect(data, doc["schema"], FamilyAesGcm(key))
        app = BabelQueue(transport=RedisTransport(url), queue=queue)
        emit({"id": app.publish(urn, data)})
    elif command == "handle":
        url, queue, urn, key, count = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
        doc = read_stdin()
        cipher = FamilyAesGcm(key)
        app = BabelQueue(transport=RedisTransport(url), queue=queue, dead_letter=True, max_attempts=1)

        def handler(data, meta, envelope):
            unprotect(data, doc["schema"], cipher)
            emit({"data": data})

        app.register(urn, handler)
        processed = 0
        deadline = time.time() + 30
        while processed < count and time.time() < deadline:
            processed += app.consume(max_messages=count - processed, timeout=1.0, handle_signals=False)
        if processed < count:
            sys.exit("handle: only %d of %d messages processed" % (processed, count))
    else:
        sys.exit("unknown command " + command)


if __name__ == "__main__":
    main()
