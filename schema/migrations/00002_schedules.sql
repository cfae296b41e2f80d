-- +goose Up
-- A schedule enqueues one message into target (a queue or a topic) per
-- period. Its periods are the activations of cron (a robfig/cron spec in
-- time_zone) or, when cron is '', anchor_at + k * interval_ms. next_at is the
-- start of the first period not yet fired, last_at that of the last one fired
-- (0 for none): the firing transaction enqueues a period's message and moves
-- next_at past it together, so a period fires once whatever process holds the
-- file. The message's MessageID is 'schedule/<name>/<period start in ms>'.
CREATE TABLE schedules (
    name        TEXT    PRIMARY KEY,
    target      TEXT    NOT NULL,
    cron        TEXT    NOT NULL,
    time_zone   TEXT    NOT NULL,
    interval_ms INTEGER NOT NULL CHECK (interval_ms >= 0),
    anchor_at   INTEGER NOT NULL,
    catch_up    INTEGER NOT NULL CHECK (catch_up > 0),
    body        BLOB    NOT NULL,
    group_id    TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    properties  TEXT    NOT NULL,
    ttl_ms      INTEGER NOT NULL CHECK (ttl_ms >= 0),
    next_at     INTEGER NOT NULL,
    last_at     INTEGER NOT NULL,
    last_error  TEXT    NOT NULL,
    fired       INTEGER NOT NULL,
    skipped     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    CHECK ((cron = '') <> (interval_ms = 0))
) STRICT;
CREATE INDEX idx_schedules_next ON schedules (next_at);

-- +goose Down
DROP TABLE schedules;
