-- The whole DDL of a fresh mqlite file, as sqlite_schema holds it after Open.
-- Generated: go test ./schema -update. Do not edit by hand.

-- index mqlite_attempts_expires
CREATE INDEX mqlite_attempts_expires ON mqlite_receive_attempts (expires_at);

-- index mqlite_attempts_key
CREATE UNIQUE INDEX mqlite_attempts_key ON mqlite_receive_attempts (queue, attempt_id);

-- index mqlite_commits_expires
CREATE INDEX mqlite_commits_expires ON mqlite_commits (expires_at);

-- index mqlite_commits_key
CREATE UNIQUE INDEX mqlite_commits_key ON mqlite_commits (scope, idempotency_key);

-- index mqlite_msg_active
CREATE INDEX mqlite_msg_active ON mqlite_messages (queue, priority DESC, id, body_len) WHERE state = 'active' AND held = 0;

-- index mqlite_msg_dead
CREATE INDEX mqlite_msg_dead ON mqlite_messages (queue, id, body_len, dead_lettered_at) WHERE state = 'dead_lettered';

-- index mqlite_msg_deferred
CREATE INDEX mqlite_msg_deferred ON mqlite_messages (queue, id, body_len) WHERE state = 'deferred';

-- index mqlite_msg_group_flight
CREATE INDEX mqlite_msg_group_flight ON mqlite_messages (queue, group_id, id)
    WHERE group_id IS NOT NULL AND (state = 'locked' OR state = 'deferred' OR state = 'scheduled');

-- index mqlite_msg_group_live
CREATE INDEX mqlite_msg_group_live ON mqlite_messages (queue, group_id, id)
    WHERE state NOT IN ('dead_lettered', 'completed') AND group_id IS NOT NULL;

-- index mqlite_msg_locked
CREATE INDEX mqlite_msg_locked ON mqlite_messages (queue, locked_until, body_len) WHERE state = 'locked';

-- index mqlite_msg_scheduled
CREATE INDEX mqlite_msg_scheduled ON mqlite_messages (queue, visible_at, body_len) WHERE state = 'scheduled';

-- index mqlite_msg_scheduled_id
CREATE INDEX mqlite_msg_scheduled_id ON mqlite_messages (queue, id) WHERE state = 'scheduled';

-- index mqlite_msg_settled
CREATE INDEX mqlite_msg_settled ON mqlite_messages (settled_at) WHERE settled_at IS NOT NULL;

-- index mqlite_msg_ttl
CREATE INDEX mqlite_msg_ttl ON mqlite_messages (expires_at) WHERE expires_at > 0;

-- index mqlite_schedules_next
CREATE INDEX mqlite_schedules_next ON mqlite_schedules (next_at);

-- index mqlite_subscription_queue
CREATE UNIQUE INDEX mqlite_subscription_queue ON mqlite_subscriptions (queue);

-- table mqlite_access_keys
CREATE TABLE mqlite_access_keys (
    id          TEXT    PRIMARY KEY,
    secret_hash BLOB    NOT NULL,
    scopes      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER NOT NULL DEFAULT 0
) STRICT;

-- table mqlite_commits
CREATE TABLE mqlite_commits (
    id              INTEGER PRIMARY KEY,
    scope           TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    request         TEXT    NOT NULL,
    result          BLOB    NOT NULL,
    expires_at      INTEGER NOT NULL
) STRICT;

-- table mqlite_dedup
CREATE TABLE mqlite_dedup (
    queue       TEXT    NOT NULL,
    key         ANY     NOT NULL,
    seq         INTEGER NOT NULL,
    content_key BLOB,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

-- table mqlite_guard
CREATE TABLE mqlite_guard (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    token TEXT    NOT NULL
) STRICT;

-- table mqlite_message_bodies
CREATE TABLE mqlite_message_bodies (
    id   INTEGER PRIMARY KEY,
    body BLOB    NOT NULL
) STRICT;

-- table mqlite_messages
CREATE TABLE mqlite_messages (
    id                 INTEGER PRIMARY KEY,
    queue              TEXT    NOT NULL REFERENCES mqlite_queues (name),
    state              TEXT    NOT NULL DEFAULT 'active'
                           CHECK (state = 'active' OR state = 'locked' OR state = 'deferred'
                                  OR state = 'scheduled' OR state = 'completed' OR state = 'dead_lettered'),
    held               INTEGER NOT NULL DEFAULT 0 CHECK (held IN (0, 1)),
    visible_at         INTEGER NOT NULL DEFAULT 0,
    locked_until       INTEGER NOT NULL DEFAULT 0,
    body_len           INTEGER NOT NULL,
    lock_token         TEXT    NOT NULL DEFAULT '--------------------------------',
    delivery_count     INTEGER NOT NULL DEFAULT 0,
    expires_at         INTEGER NOT NULL DEFAULT 0,
    enqueued_at        INTEGER NOT NULL,
    message_id         TEXT,
    group_id           TEXT,
    subject            TEXT,
    properties         TEXT,
    content_key        BLOB    NOT NULL,
    body               BLOB,
    dead_letter_reason TEXT,
    dead_letter_desc   TEXT,
    dead_lettered_at   INTEGER NOT NULL DEFAULT 0,
    last_error         TEXT,
    settled_at         INTEGER, priority INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9), attempts TEXT,
    CHECK ((state = 'completed') = (settled_at IS NOT NULL))
) STRICT;

-- table mqlite_migrations
CREATE TABLE mqlite_migrations (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		version_id INTEGER NOT NULL,
		is_applied INTEGER NOT NULL,
		tstamp TIMESTAMP DEFAULT (datetime('now'))
	);

-- table mqlite_queues
CREATE TABLE mqlite_queues (
    name               TEXT    PRIMARY KEY,
    ordering           TEXT    NOT NULL CHECK (ordering IN ('standard', 'fifo')),
    max_delivery_count INTEGER NOT NULL CHECK (max_delivery_count > 0),
    lock_duration_ms   INTEGER NOT NULL CHECK (lock_duration_ms > 0),
    dedup_window_ms    INTEGER NOT NULL CHECK (dedup_window_ms >= 0),
    default_ttl_ms     INTEGER NOT NULL CHECK (default_ttl_ms >= 0),
    dead_letter_on_ttl INTEGER NOT NULL CHECK (dead_letter_on_ttl IN (0, 1)),
    dlq_max_age_ms     INTEGER NOT NULL CHECK (dlq_max_age_ms >= 0),
    dlq_max_count      INTEGER NOT NULL CHECK (dlq_max_count >= 0),
    dlq_max_bytes      INTEGER NOT NULL CHECK (dlq_max_bytes >= 0),
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    dedup_by_body      INTEGER NOT NULL CHECK (dedup_by_body IN (0, 1))
, paused_at INTEGER NOT NULL DEFAULT 0) STRICT;

-- table mqlite_receive_attempts
CREATE TABLE mqlite_receive_attempts (
    id         INTEGER PRIMARY KEY,
    queue      TEXT    NOT NULL,
    attempt_id TEXT    NOT NULL,
    request    TEXT    NOT NULL,
    result     BLOB    NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

-- table mqlite_schedules
CREATE TABLE mqlite_schedules (
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

-- table mqlite_sequence
CREATE TABLE mqlite_sequence (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    floor INTEGER NOT NULL
) STRICT;

-- table mqlite_settlement_receipts
CREATE TABLE mqlite_settlement_receipts (
    seq        INTEGER NOT NULL,
    lock_token BLOB    NOT NULL,
    operation  TEXT    NOT NULL,
    args       TEXT    NOT NULL,
    queue      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (seq, lock_token, operation, args)
) STRICT, WITHOUT ROWID;

-- table mqlite_subscriptions
CREATE TABLE mqlite_subscriptions (
    topic      TEXT    NOT NULL REFERENCES mqlite_topics (name),
    queue      TEXT    NOT NULL REFERENCES mqlite_queues (name),
    filter     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (topic, queue)
) STRICT, WITHOUT ROWID;

-- table mqlite_topics
CREATE TABLE mqlite_topics (
    name       TEXT    PRIMARY KEY,
    created_at INTEGER NOT NULL
) STRICT;

-- table sqlite_sequence
CREATE TABLE sqlite_sequence(name,seq);

-- trigger mqlite_body_delete
CREATE TRIGGER mqlite_body_delete AFTER DELETE ON mqlite_messages
WHEN OLD.body IS NULL
BEGIN
    DELETE FROM mqlite_message_bodies WHERE id = OLD.id;
END;

-- trigger mqlite_group_move
CREATE TRIGGER mqlite_group_move INSTEAD OF INSERT ON mqlite_group_moves
BEGIN
    UPDATE mqlite_messages SET held = 0
     WHERE held = 1 AND id = (
           SELECT b.id FROM mqlite_messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state NOT IN ('dead_lettered', 'completed')
            ORDER BY b.id LIMIT 1)
       AND NEW.old_held = 0
       AND NEW.state IN ('dead_lettered', 'completed') AND NEW.old_state NOT IN ('dead_lettered', 'completed');
    UPDATE mqlite_messages SET held = EXISTS (
           SELECT 1 FROM mqlite_messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state NOT IN ('dead_lettered', 'completed') AND b.id <> NEW.id
              AND (b.id < NEW.id OR (b.held = 0 AND b.state <> 'active')))
     WHERE id = NEW.id
       AND NEW.old_state = 'dead_lettered' AND NEW.state <> 'dead_lettered';
    UPDATE mqlite_messages SET held = 1
     WHERE queue = NEW.queue AND group_id = NEW.group_id
       AND state NOT IN ('dead_lettered', 'completed') AND id > NEW.id AND held = 0
       AND (SELECT held FROM mqlite_messages WHERE id = NEW.id) = 0
       AND NEW.old_state = 'dead_lettered' AND NEW.state <> 'dead_lettered';
    UPDATE mqlite_messages SET held = 0
     WHERE id = (SELECT b.id FROM mqlite_messages b
                  WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
                    AND b.state NOT IN ('dead_lettered', 'completed') AND b.id < NEW.id
                  ORDER BY b.id LIMIT 1)
       AND NEW.held = 0 AND NEW.state = 'active'
       AND (NEW.old_state = 'locked' OR NEW.old_state = 'deferred' OR NEW.old_state = 'scheduled');
    UPDATE mqlite_messages SET held = 1
     WHERE id = NEW.id AND EXISTS (
           SELECT 1 FROM mqlite_messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state NOT IN ('dead_lettered', 'completed') AND b.id < NEW.id)
       AND NEW.held = 0 AND NEW.state = 'active'
       AND (NEW.old_state = 'locked' OR NEW.old_state = 'deferred' OR NEW.old_state = 'scheduled');
END;

-- trigger mqlite_group_release_on_delete
CREATE TRIGGER mqlite_group_release_on_delete AFTER DELETE ON mqlite_messages
WHEN OLD.group_id IS NOT NULL AND OLD.held = 0 AND OLD.state NOT IN ('dead_lettered', 'completed')
BEGIN
    UPDATE mqlite_messages SET held = 0
     WHERE held = 1 AND id = (
           SELECT b.id FROM mqlite_messages b
            WHERE b.queue = OLD.queue AND b.group_id = OLD.group_id
              AND b.state NOT IN ('dead_lettered', 'completed')
            ORDER BY b.id LIMIT 1);
END;

-- trigger mqlite_group_state
CREATE TRIGGER mqlite_group_state AFTER UPDATE OF state ON mqlite_messages
WHEN NEW.group_id IS NOT NULL
BEGIN
    INSERT INTO mqlite_group_moves VALUES (NEW.id, NEW.queue, NEW.group_id, NEW.state, NEW.held, OLD.state, OLD.held);
END;

-- trigger mqlite_sequence_floor
CREATE TRIGGER mqlite_sequence_floor AFTER DELETE ON mqlite_messages
WHEN NOT EXISTS (SELECT 1 FROM mqlite_messages WHERE id > OLD.id)
BEGIN
    INSERT OR REPLACE INTO mqlite_sequence (id, floor)
    VALUES (1, max(OLD.id, coalesce((SELECT floor FROM mqlite_sequence WHERE id = 1), 0)));
END;

-- view mqlite_group_moves
CREATE VIEW mqlite_group_moves AS
SELECT 0 AS id, '' AS queue, '' AS group_id, '' AS state, 0 AS held, '' AS old_state, 0 AS old_held WHERE 0;
