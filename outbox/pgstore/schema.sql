-- BabelQueue transactional outbox (package outbox/pgstore), schema version 1.
-- One row per message: the message exactly as the relay publishes it, and the
-- relay's bookkeeping. {{table}} is the table, {{name}} its unqualified name.
CREATE TABLE IF NOT EXISTS {{table}} (
    id             bigserial   PRIMARY KEY,
    queue          text        NOT NULL,
    body           bytea       NOT NULL,
    msg_key        bytea,                          -- NULL: no key; '': an empty key
    headers        jsonb,                          -- out-of-band headers (traceparent, ...)
    urn            text        NOT NULL DEFAULT '', -- the envelope's job
    message_id     text        NOT NULL DEFAULT '', -- meta.id
    trace_id       text        NOT NULL DEFAULT '',
    lang           text        NOT NULL DEFAULT '',
    schema_version integer     NOT NULL DEFAULT 0,
    created_at_ms  bigint      NOT NULL DEFAULT 0,
    msg_attempts   integer     NOT NULL DEFAULT 0,  -- the attempts header of the message
    delay_ms       bigint      NOT NULL DEFAULT 0,
    attempts       integer     NOT NULL DEFAULT 0,  -- publishes the broker did not confirm
    last_error     text,
    available_at   timestamptz NOT NULL DEFAULT now(),
    written_at     timestamptz NOT NULL DEFAULT now(),
    published_at   timestamptz                     -- set only with a retention
);
CREATE INDEX IF NOT EXISTS {{name}}_pending ON {{table}} (id)
    WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS {{name}}_pending_key ON {{table}} (msg_key, id)
    WHERE published_at IS NULL AND msg_key IS NOT NULL;
-- Keyed rows waiting for a retry: a later row of their key is not claimed meanwhile.
CREATE INDEX IF NOT EXISTS {{name}}_backoff ON {{table}} (msg_key, id)
    WHERE published_at IS NULL AND attempts > 0 AND msg_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{name}}_published ON {{table}} (published_at)
    WHERE published_at IS NOT NULL;
