-- +goose Up
-- The guard row names the layout this binary understands. A file whose token
-- differs is refused by Open (mqlite.ErrSchemaVersionMismatch) and never touched.
CREATE TABLE mqlite_guard (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    token TEXT    NOT NULL
) STRICT;
INSERT INTO mqlite_guard (id, token) VALUES (1, 'mqlite-schema-3');

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
-- The first six columns are what the connection's pre-update hook reads.
-- body holds a small body in the row; a large one (body IS NULL) lives in
-- message_bodies, so that a claim, renewal or settlement, which rewrites the
-- row, never rewrites it. content_key is the first 16 bytes of the body's
-- SHA-256: the dedup key of a message without a MessageID, and what tells
-- two bodies apart under one MessageID. A message that holds no lease has
-- 32 dashes for lock_token, the length of a token and never one (tokens are
-- hex): a claim then rewrites the row at the same size, where a NULL growing
-- to 32 bytes split the row's full 1 KiB page on almost every claim.
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

-- The bodies too large to keep in their message's row, written once.
CREATE TABLE message_bodies (
    id   INTEGER PRIMARY KEY,
    body BLOB    NOT NULL
) STRICT;

-- A message leaves with its body.
-- +goose StatementBegin
CREATE TRIGGER trg_body_delete AFTER DELETE ON messages
WHEN OLD.body IS NULL
BEGIN
    DELETE FROM message_bodies WHERE id = OLD.id;
END;
-- +goose StatementEnd

-- The claim seeks this index: only claimable rows live in it. body_len
-- rides along in this index and the four below so that Stats sums a
-- queue's bytes from the indexes alone, never from the rows.
CREATE INDEX idx_msg_active ON messages (queue, id, body_len) WHERE state = 'active' AND held = 0;
-- Sweeps: expired leases, due scheduled messages, dead letters, TTL deadlines.
CREATE INDEX idx_msg_locked ON messages (queue, locked_until, body_len) WHERE state = 'locked';
CREATE INDEX idx_msg_scheduled ON messages (queue, visible_at, body_len) WHERE state = 'scheduled';
CREATE INDEX idx_msg_dead ON messages (queue, id, body_len, dead_lettered_at) WHERE state = 'dead_lettered';
CREATE INDEX idx_msg_deferred ON messages (queue, id, body_len) WHERE state = 'deferred';
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
-- key is the MessageID (TEXT) or, when there is none, the content key (the
-- first 16 bytes of the body's SHA-256, a BLOB). The column is ANY so that the
-- two kinds keep their storage class: a TEXT never equals a BLOB, so a
-- MessageID can never meet a content key. content_key tells a resend under a
-- MessageID from a conflict; for a content key it is the key itself (NULL).
CREATE TABLE dedup (
    queue       TEXT    NOT NULL,
    key         ANY     NOT NULL,
    seq         INTEGER NOT NULL,
    content_key BLOB,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

-- Every committed message of a queue with a window leaves its dedup row in the
-- same statement, so the row cannot exist without the message or the reverse.
-- +goose StatementBegin
CREATE TRIGGER trg_dedup_record AFTER INSERT ON messages
BEGIN
    INSERT OR REPLACE INTO dedup (queue, key, seq, content_key, expires_at)
    SELECT NEW.queue, coalesce(NEW.message_id, NEW.content_key),
           NEW.id, CASE WHEN NEW.message_id IS NOT NULL THEN NEW.content_key END,
           NEW.enqueued_at + q.dedup_window_ms
      FROM queues q
     WHERE q.name = NEW.queue AND q.dedup_window_ms > 0;
END;
-- +goose StatementEnd

-- A settlement that succeeded, keyed by the whole request, so that the exact
-- same request retried is answered with success and nothing else is. seq
-- leads the key: receipts are written in about seq order, so they append
-- instead of landing on random pages, and the janitor finds the oldest
-- first. lock_token is the token's 16 bytes (the hex the caller holds,
-- decoded).
CREATE TABLE settlement_receipts (
    seq        INTEGER NOT NULL,
    lock_token BLOB    NOT NULL,
    operation  TEXT    NOT NULL,
    args       TEXT    NOT NULL,
    queue      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (seq, lock_token, operation, args)
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
CREATE INDEX idx_attempts_expires ON receive_attempts (expires_at);

-- Topics fan a send out to their subscriptions. A topic and a queue never
-- share a name, so a send's target is never ambiguous.
CREATE TABLE topics (
    name       TEXT    PRIMARY KEY,
    created_at INTEGER NOT NULL
) STRICT;

-- A subscription is an ordinary queue that gets a copy of every message of
-- its topic that passes its filter (JSON; '{}' takes everything).
CREATE TABLE subscriptions (
    topic      TEXT    NOT NULL REFERENCES topics (name),
    queue      TEXT    NOT NULL REFERENCES queues (name),
    filter     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (topic, queue)
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX idx_subscription_queue ON subscriptions (queue);

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
DROP TABLE subscriptions;
DROP TABLE topics;
DROP TABLE receive_attempts;
DROP TABLE settlement_receipts;
DROP TRIGGER trg_dedup_record;
DROP TABLE dedup;
DROP TRIGGER trg_body_delete;
DROP TABLE message_bodies;
DROP TRIGGER trg_group_handover;
DROP TRIGGER trg_group_rejoin;
DROP TRIGGER trg_group_release_on_dead_letter;
DROP TRIGGER trg_group_release_on_delete;
DROP TABLE messages;
DROP TABLE queues;
DROP TABLE mqlite_guard;
