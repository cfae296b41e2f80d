-- +goose Up
-- The guard row names the layout this binary understands. A file whose token
-- differs is refused by Open (mqlite.ErrSchemaVersionMismatch) and never touched.
CREATE TABLE mqlite_guard (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    token TEXT    NOT NULL
) STRICT;
INSERT INTO mqlite_guard (id, token) VALUES (1, 'mqlite-schema-2');

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

-- A message is a row and its state is a column. id is the sequence number:
-- AUTOINCREMENT keeps it strictly increasing and never reused.
-- held = 1 marks a grouped message behind an earlier live message of its group
-- (live: any state but dead_lettered); the triggers below keep it exact, so the
-- claim index holds only messages that could be handed out.
CREATE TABLE messages (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    queue              TEXT    NOT NULL REFERENCES queues (name),
    state              TEXT    NOT NULL DEFAULT 'active'
                           CHECK (state IN ('active', 'locked', 'deferred',
                                            'scheduled', 'completed', 'dead_lettered')),
    held               INTEGER NOT NULL DEFAULT 0 CHECK (held IN (0, 1)),
    visible_at         INTEGER NOT NULL DEFAULT 0,
    locked_until       INTEGER NOT NULL DEFAULT 0,
    lock_token         TEXT,
    delivery_count     INTEGER NOT NULL DEFAULT 0,
    expires_at         INTEGER NOT NULL DEFAULT 0,
    enqueued_at        INTEGER NOT NULL,
    message_id         TEXT,
    group_id           TEXT,
    subject            TEXT,
    properties         TEXT,
    body_hash          BLOB    NOT NULL,
    body               BLOB    NOT NULL,
    dead_letter_reason TEXT,
    dead_letter_desc   TEXT,
    dead_lettered_at   INTEGER NOT NULL DEFAULT 0
) STRICT;

-- The claim seeks this index: only claimable rows live in it.
CREATE INDEX idx_msg_active ON messages (queue, id) WHERE state = 'active' AND held = 0;
-- Sweeps: expired leases, due scheduled messages, dead letters, TTL deadlines.
CREATE INDEX idx_msg_locked ON messages (queue, locked_until) WHERE state = 'locked';
CREATE INDEX idx_msg_scheduled ON messages (queue, visible_at) WHERE state = 'scheduled';
CREATE INDEX idx_msg_dead ON messages (queue, id) WHERE state = 'dead_lettered';
CREATE INDEX idx_msg_ttl ON messages (expires_at) WHERE expires_at > 0;
-- Group probes: one index per blocking state, and one over the live members.
CREATE INDEX idx_msg_group_locked ON messages (queue, group_id, id)
    WHERE state = 'locked' AND group_id IS NOT NULL;
CREATE INDEX idx_msg_group_deferred ON messages (queue, group_id, id)
    WHERE state = 'deferred' AND group_id IS NOT NULL;
CREATE INDEX idx_msg_group_scheduled ON messages (queue, group_id, id)
    WHERE state = 'scheduled' AND group_id IS NOT NULL;
CREATE INDEX idx_msg_group_live ON messages (queue, group_id, id)
    WHERE state <> 'dead_lettered' AND group_id IS NOT NULL;

-- The live front of a group left (deleted, or dead-lettered): release the next one.
-- +goose StatementBegin
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
-- +goose StatementEnd

-- +goose StatementBegin
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
-- +goose StatementEnd

-- A redriven message rejoins its group in id order, but never overtakes a
-- member in flight: while the group's front (held = 0) is locked, deferred or
-- scheduled, the redriven message waits behind it (held = 1), and becomes the
-- front when that one leaves or comes back to active (trg_group_handover).
-- Before an active front, or in a group with no live member, it takes its
-- place in id order at once.
-- +goose StatementBegin
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
-- +goose StatementEnd

-- A front back to active (abandoned, reaped, promoted) hands the front over to
-- an earlier member redriven while it was in flight: the group goes on in id
-- order.
-- +goose StatementBegin
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
-- +goose StatementEnd

-- Producer de-duplication: one row per (queue, key) inside the queue's window.
-- key is the MessageID (TEXT) or, when there is none, the body's SHA-256 (a
-- 32-byte BLOB). The column is ANY so that the two kinds keep their storage
-- class: a TEXT never equals a BLOB, so a MessageID can never meet a content key.
CREATE TABLE dedup (
    queue      TEXT    NOT NULL,
    key        ANY     NOT NULL,
    seq        INTEGER NOT NULL,
    body_hash  BLOB    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

-- Every committed message of a queue with a window leaves its dedup row in the
-- same statement, so the row cannot exist without the message or the reverse.
-- +goose StatementBegin
CREATE TRIGGER trg_dedup_record AFTER INSERT ON messages
BEGIN
    INSERT OR REPLACE INTO dedup (queue, key, seq, body_hash, expires_at)
    SELECT NEW.queue, coalesce(NEW.message_id, NEW.body_hash),
           NEW.id, NEW.body_hash, NEW.enqueued_at + q.dedup_window_ms
      FROM queues q
     WHERE q.name = NEW.queue AND q.dedup_window_ms > 0;
END;
-- +goose StatementEnd

-- A settlement that succeeded, keyed by the whole request, so that the exact
-- same request retried is answered with success and nothing else is.
CREATE TABLE settlement_receipts (
    queue      TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    lock_token TEXT    NOT NULL,
    operation  TEXT    NOT NULL,
    args       TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, seq, lock_token, operation, args)
) STRICT, WITHOUT ROWID;

-- What a Receive tagged with an attempt id claimed, so a retry replays it.
-- request holds the options of the Receive: a retry must repeat them.
CREATE TABLE receive_attempts (
    queue      TEXT    NOT NULL,
    attempt_id TEXT    NOT NULL,
    request    TEXT    NOT NULL,
    result     BLOB    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, attempt_id)
) STRICT, WITHOUT ROWID;

-- Keys for the HTTP broker; only a hash of the secret is kept.
CREATE TABLE access_keys (
    id          TEXT    PRIMARY KEY,
    secret_hash BLOB    NOT NULL,
    scopes      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER NOT NULL DEFAULT 0
) STRICT;

-- +goose Down
DROP TABLE access_keys;
DROP TABLE receive_attempts;
DROP TABLE settlement_receipts;
DROP TRIGGER trg_dedup_record;
DROP TABLE dedup;
DROP TRIGGER trg_group_handover;
DROP TRIGGER trg_group_rejoin;
DROP TRIGGER trg_group_release_on_dead_letter;
DROP TRIGGER trg_group_release_on_delete;
DROP TABLE messages;
DROP TABLE queues;
DROP TABLE mqlite_guard;
