-- The whole DDL of a fresh mqlite file, as sqlite_schema holds it after Open.
-- Generated: go test ./schema -update. Do not edit by hand.

-- index idx_attempts_expires
CREATE INDEX idx_attempts_expires ON receive_attempts (expires_at);

-- index idx_msg_active
CREATE INDEX idx_msg_active ON messages (queue, id, body_len) WHERE state = 'active' AND held = 0;

-- index idx_msg_dead
CREATE INDEX idx_msg_dead ON messages (queue, id, body_len, dead_lettered_at) WHERE state = 'dead_lettered';

-- index idx_msg_deferred
CREATE INDEX idx_msg_deferred ON messages (queue, id, body_len) WHERE state = 'deferred';

-- index idx_msg_group_deferred
CREATE INDEX idx_msg_group_deferred ON messages (queue, group_id, id)
    WHERE state = 'deferred' AND group_id IS NOT NULL;

-- index idx_msg_group_live
CREATE INDEX idx_msg_group_live ON messages (queue, group_id, id)
    WHERE state <> 'dead_lettered' AND group_id IS NOT NULL;

-- index idx_msg_group_locked
CREATE INDEX idx_msg_group_locked ON messages (queue, group_id, id)
    WHERE state = 'locked' AND group_id IS NOT NULL;

-- index idx_msg_group_scheduled
CREATE INDEX idx_msg_group_scheduled ON messages (queue, group_id, id)
    WHERE state = 'scheduled' AND group_id IS NOT NULL;

-- index idx_msg_locked
CREATE INDEX idx_msg_locked ON messages (queue, locked_until, body_len) WHERE state = 'locked';

-- index idx_msg_scheduled
CREATE INDEX idx_msg_scheduled ON messages (queue, visible_at, body_len) WHERE state = 'scheduled';

-- index idx_msg_ttl
CREATE INDEX idx_msg_ttl ON messages (expires_at) WHERE expires_at > 0;

-- index idx_schedules_next
CREATE INDEX idx_schedules_next ON schedules (next_at);

-- index idx_subscription_queue
CREATE UNIQUE INDEX idx_subscription_queue ON subscriptions (queue);

-- table access_keys
CREATE TABLE access_keys (
    id          TEXT    PRIMARY KEY,
    secret_hash BLOB    NOT NULL,
    scopes      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER NOT NULL DEFAULT 0
) STRICT;

-- table dedup
CREATE TABLE dedup (
    queue       TEXT    NOT NULL,
    key         ANY     NOT NULL,
    seq         INTEGER NOT NULL,
    content_key BLOB,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

-- table message_bodies
CREATE TABLE message_bodies (
    id   INTEGER PRIMARY KEY,
    body BLOB    NOT NULL
) STRICT;

-- table messages
CREATE TABLE messages (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    queue              TEXT    NOT NULL REFERENCES queues (name),
    state              TEXT    NOT NULL DEFAULT 'active'
                           CHECK (state IN ('active', 'locked', 'deferred',
                                            'scheduled', 'completed', 'dead_lettered')),
    held               INTEGER NOT NULL DEFAULT 0 CHECK (held IN (0, 1)),
    visible_at         INTEGER NOT NULL DEFAULT 0,
    locked_until       INTEGER NOT NULL DEFAULT 0,
    lock_token         TEXT    NOT NULL DEFAULT '--------------------------------',
    delivery_count     INTEGER NOT NULL DEFAULT 0,
    expires_at         INTEGER NOT NULL DEFAULT 0,
    enqueued_at        INTEGER NOT NULL,
    message_id         TEXT,
    group_id           TEXT,
    subject            TEXT,
    properties         TEXT,
    content_key        BLOB    NOT NULL,
    body_len           INTEGER NOT NULL,
    body               BLOB,
    dead_letter_reason TEXT,
    dead_letter_desc   TEXT,
    dead_lettered_at   INTEGER NOT NULL DEFAULT 0
) STRICT;

-- table mqlite_guard
CREATE TABLE mqlite_guard (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    token TEXT    NOT NULL
) STRICT;

-- table mqlite_migrations
CREATE TABLE mqlite_migrations (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		version_id INTEGER NOT NULL,
		is_applied INTEGER NOT NULL,
		tstamp TIMESTAMP DEFAULT (datetime('now'))
	);

-- table queues
CREATE TABLE queues (
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
    updated_at         INTEGER NOT NULL
) STRICT;

-- table receive_attempts
CREATE TABLE receive_attempts (
    queue      TEXT    NOT NULL,
    attempt_id TEXT    NOT NULL,
    request    TEXT    NOT NULL,
    result     BLOB    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, attempt_id)
) STRICT, WITHOUT ROWID;

-- table schedules
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

-- table settlement_receipts
CREATE TABLE settlement_receipts (
    seq        INTEGER NOT NULL,
    lock_token BLOB    NOT NULL,
    operation  TEXT    NOT NULL,
    args       TEXT    NOT NULL,
    queue      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (seq, lock_token, operation, args)
) STRICT, WITHOUT ROWID;

-- table sqlite_sequence
CREATE TABLE sqlite_sequence(name,seq);

-- table subscriptions
CREATE TABLE subscriptions (
    topic      TEXT    NOT NULL REFERENCES topics (name),
    queue      TEXT    NOT NULL REFERENCES queues (name),
    filter     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (topic, queue)
) STRICT, WITHOUT ROWID;

-- table topics
CREATE TABLE topics (
    name       TEXT    PRIMARY KEY,
    created_at INTEGER NOT NULL
) STRICT;

-- trigger trg_body_delete
CREATE TRIGGER trg_body_delete AFTER DELETE ON messages
WHEN OLD.body IS NULL
BEGIN
    DELETE FROM message_bodies WHERE id = OLD.id;
END;

-- trigger trg_dedup_record
CREATE TRIGGER trg_dedup_record AFTER INSERT ON messages
BEGIN
    INSERT OR REPLACE INTO dedup (queue, key, seq, content_key, expires_at)
    SELECT NEW.queue, coalesce(NEW.message_id, NEW.content_key),
           NEW.id, CASE WHEN NEW.message_id IS NOT NULL THEN NEW.content_key END,
           NEW.enqueued_at + q.dedup_window_ms
      FROM queues q
     WHERE q.name = NEW.queue AND q.dedup_window_ms > 0;
END;

-- trigger trg_group_handover
CREATE TRIGGER trg_group_handover AFTER UPDATE OF state ON messages
WHEN NEW.group_id IS NOT NULL AND NEW.held = 0 AND NEW.state = 'active'
 AND OLD.state IN ('locked', 'scheduled', 'deferred')
BEGIN
    UPDATE messages SET held = 0
     WHERE id = (SELECT b.id FROM messages b
                  WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
                    AND b.state <> 'dead_lettered' AND b.id < NEW.id
                  ORDER BY b.id LIMIT 1);
    UPDATE messages SET held = 1
     WHERE id = NEW.id AND EXISTS (
           SELECT 1 FROM messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state <> 'dead_lettered' AND b.id < NEW.id);
END;

-- trigger trg_group_rejoin
CREATE TRIGGER trg_group_rejoin AFTER UPDATE OF state ON messages
WHEN NEW.group_id IS NOT NULL
 AND OLD.state = 'dead_lettered' AND NEW.state <> 'dead_lettered'
BEGIN
    UPDATE messages SET held = EXISTS (
           SELECT 1 FROM messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state <> 'dead_lettered' AND b.id <> NEW.id
              AND (b.id < NEW.id OR (b.held = 0 AND b.state <> 'active')))
     WHERE id = NEW.id;
    UPDATE messages SET held = 1
     WHERE queue = NEW.queue AND group_id = NEW.group_id
       AND state <> 'dead_lettered' AND id > NEW.id AND held = 0
       AND (SELECT held FROM messages WHERE id = NEW.id) = 0;
END;

-- trigger trg_group_release_on_dead_letter
CREATE TRIGGER trg_group_release_on_dead_letter AFTER UPDATE OF state ON messages
WHEN NEW.group_id IS NOT NULL AND OLD.held = 0
 AND NEW.state = 'dead_lettered' AND OLD.state <> 'dead_lettered'
BEGIN
    UPDATE messages SET held = 0
     WHERE held = 1 AND id = (
           SELECT b.id FROM messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state <> 'dead_lettered'
            ORDER BY b.id LIMIT 1);
END;

-- trigger trg_group_release_on_delete
CREATE TRIGGER trg_group_release_on_delete AFTER DELETE ON messages
WHEN OLD.group_id IS NOT NULL AND OLD.held = 0 AND OLD.state <> 'dead_lettered'
BEGIN
    UPDATE messages SET held = 0
     WHERE held = 1 AND id = (
           SELECT b.id FROM messages b
            WHERE b.queue = OLD.queue AND b.group_id = OLD.group_id
              AND b.state <> 'dead_lettered'
            ORDER BY b.id LIMIT 1);
END;
