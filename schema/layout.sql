-- mqlite's layout: every object a store adds to a file, all named mqlite_...
-- (goose adds the migrations table mqlite_migrations, and SQLite
-- sqlite_sequence for its AUTOINCREMENT). Four parts, each begun by a
-- line "-- mqlite: <part>": the guard, the tables, the indexes and triggers
-- of the messages, then the other indexes. An upgrade creates the tables,
-- copies the rows, and only then creates the indexes and triggers, so that
-- no trigger fires on a copied row and each index is built once. A column a later layout added to a table is written here as
-- ALTER TABLE ... ADD COLUMN writes it into the table's text (", name type"
-- before the closing parenthesis), so that a fresh file and an upgraded one
-- hold the same text. A set of three states or more is an OR chain of
-- equalities, never an IN list, which SQLite builds into a temporary
-- b-tree at every execution of every statement that evaluates it.

-- mqlite: guard

-- The guard row names the layout this binary understands. A file whose token
-- differs is refused by Open (mqlite.ErrSchemaVersionMismatch) and never touched.
CREATE TABLE mqlite_guard (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    token TEXT    NOT NULL
) STRICT;
INSERT INTO mqlite_guard (id, token) VALUES (1, 'mqlite-schema-13');

-- mqlite: tables

-- A queue and its options. dedup_by_body = 1 deduplicates a message sent
-- without a MessageID by its content key (QueueOptions.DedupByBody).
-- paused_at is when the queue was paused (unix ms), 0 while it runs.
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

-- A message is a row and its state is a column. id is the sequence number,
-- strictly increasing and never reused: a send gives it explicitly, one past
-- the highest of the newest message and mqlite_sequence's floor (the
-- highest id ever deleted as the newest, which mqlite_sequence_floor keeps),
-- so that a send writes no sequence page as AUTOINCREMENT's did.
-- held = 1 marks a grouped message behind an earlier live message of its group
-- (live: any state but dead_lettered and completed); the triggers below keep
-- it exact, so the claim index holds only messages that could be handed out.
-- The first seven columns are what the connection's pre-update hook reads
-- (body_len among them, for the bytes a queue holds).
-- body holds a small body in the row; a large one (body IS NULL) lives in
-- mqlite_message_bodies, so that a claim, renewal or settlement, which
-- rewrites the row, never rewrites it. content_key is the first 16 bytes of
-- the body's SHA-256: what tells two bodies apart under one MessageID, and the
-- dedup key of a message without one on a queue with dedup_by_body. A message
-- that holds no lease has 32 dashes for lock_token, the length of a token and
-- never one (tokens are hex): a claim then rewrites the row at the same size,
-- where a NULL growing to 32 bytes split the row's full 1 KiB page on almost
-- every claim. locked_until is the end of the lease of a locked message.
-- A completed message is settled: state completed, settled_at the moment
-- of its completion (NULL in every other state, which the CHECK holds),
-- lock_token the token of the delivery that completed it, the body in its
-- row dropped. The row is the receipt of its completion, so that a retried
-- Complete succeeds, until the janitor's next pass turns it into a receipt
-- row and deletes it (and a body kept out of its row). A completion thus
-- rewrites the row in its page where a delete emptied pages and wrote a
-- receipt elsewhere. No read of the store shows a completed message: every
-- state index but mqlite_msg_settled leaves it out, and a read over the
-- rows names it through one condition of the engine (internal/engine,
-- state.go).
-- last_error is the last reason a delivery came back (NULL for none).
-- attempts is the history of the message's failed deliveries (NULL for
-- none, which is what a message that never fails keeps: no send, claim or
-- completion writes it): a JSON array of {"at": unix ms, "error": text,
-- "worker": text}, oldest first, the last Config.AttemptHistory of them,
-- appended by the statement that records the failure (an Abandon, a
-- Reject, a lapsed lease put back).
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

-- The floor of the message sequence: the highest id deleted while it was
-- the newest message (mqlite_sequence_floor), or carried over by an upgrade.
-- One row at most, written only when the newest message goes.
CREATE TABLE mqlite_sequence (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    floor INTEGER NOT NULL
) STRICT;

-- The bodies too large to keep in their message's row, written once.
CREATE TABLE mqlite_message_bodies (
    id   INTEGER PRIMARY KEY,
    body BLOB    NOT NULL
) STRICT;

-- Producer de-duplication: one row per (queue, key) inside the queue's window,
-- written by the send in the message's transaction (one multi-row insert for
-- a batch).
-- key is the MessageID (TEXT) or, for a message without one on a queue with
-- dedup_by_body, the content key (the first 16 bytes of the body's SHA-256, a
-- BLOB). The column is ANY so that the
-- two kinds keep their storage class: a TEXT never equals a BLOB, so a
-- MessageID can never meet a content key. content_key tells a resend under a
-- MessageID from a conflict; for a content key it is the key itself (NULL).
CREATE TABLE mqlite_dedup (
    queue       TEXT    NOT NULL,
    key         ANY     NOT NULL,
    seq         INTEGER NOT NULL,
    content_key BLOB,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) STRICT, WITHOUT ROWID;

-- A settlement that succeeded, keyed by the whole request, so that the exact
-- same request retried is answered with success and nothing else is (a
-- completion's receipt is its settled message until the janitor turns it
-- into a row here). seq
-- leads the key: receipts are written in about seq order, so they append
-- instead of landing on random pages, and the janitor finds the oldest
-- first. lock_token is the token's 16 bytes (the hex the caller holds,
-- decoded).
CREATE TABLE mqlite_settlement_receipts (
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
-- A rowid table keyed by the unique index mqlite_attempts_key: a lookup,
-- which mostly misses, searches the index's small cells and reads the row,
-- whose result spills to overflow pages, only on a hit.
CREATE TABLE mqlite_receive_attempts (
    id         INTEGER PRIMARY KEY,
    queue      TEXT    NOT NULL,
    attempt_id TEXT    NOT NULL,
    request    TEXT    NOT NULL,
    result     BLOB    NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

-- What the broker's commit requests (POST /v1/commit) with an idempotency
-- key answered, so a retry replays it: scope is the id of the access key
-- that sent it (one key's idempotency keys never meet another's), request
-- a digest of the request, result its answer. A rowid table keyed by the
-- unique index mqlite_commits_key, as the receive attempts are: id orders
-- a scope's records, oldest first, for the broker's bound on them.
CREATE TABLE mqlite_commits (
    id              INTEGER PRIMARY KEY,
    scope           TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    request         TEXT    NOT NULL,
    result          BLOB    NOT NULL,
    expires_at      INTEGER NOT NULL
) STRICT;

-- Topics fan a send out to their subscriptions. A topic and a queue never
-- share a name, so a send's target is never ambiguous.
CREATE TABLE mqlite_topics (
    name       TEXT    PRIMARY KEY,
    created_at INTEGER NOT NULL
) STRICT;

-- A subscription is an ordinary queue that gets a copy of every message of
-- its topic that passes its filter (JSON; '{}' takes everything).
CREATE TABLE mqlite_subscriptions (
    topic      TEXT    NOT NULL REFERENCES mqlite_topics (name),
    queue      TEXT    NOT NULL REFERENCES mqlite_queues (name),
    filter     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (topic, queue)
) STRICT, WITHOUT ROWID;

-- Keys for the HTTP broker; only a hash of the secret is kept.
CREATE TABLE mqlite_access_keys (
    id          TEXT    PRIMARY KEY,
    secret_hash BLOB    NOT NULL,
    scopes      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER NOT NULL DEFAULT 0
) STRICT;

-- A schedule enqueues one message into target (a queue or a topic) per
-- period. Its periods are the activations of cron (a robfig/cron spec in
-- time_zone) or, when cron is '', anchor_at + k * interval_ms. next_at is the
-- start of the first period not yet fired, last_at that of the last one fired
-- (0 for none): the firing transaction enqueues a period's message and moves
-- next_at past it together, so a period fires once whatever process holds the
-- file. The message's MessageID is 'schedule/<name>/<period start in ms>'.
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

-- mqlite: message indexes and triggers

-- A message leaves with its body (a completed message's body kept out of
-- its row goes when the janitor deletes the row; no trigger on the state,
-- so that a claim runs no trigger program for it).
CREATE TRIGGER mqlite_body_delete AFTER DELETE ON mqlite_messages
WHEN OLD.body IS NULL
BEGIN
    DELETE FROM mqlite_message_bodies WHERE id = OLD.id;
END;

-- The claim seeks this index: only claimable rows live in it. body_len
-- rides along in this index and the four below so that Stats sums a
-- queue's bytes from the indexes alone, never from the rows.
CREATE INDEX mqlite_msg_active ON mqlite_messages (queue, priority DESC, id, body_len) WHERE state = 'active' AND held = 0;
-- Sweeps: expired leases, due scheduled messages, dead letters, TTL deadlines.
CREATE INDEX mqlite_msg_locked ON mqlite_messages (queue, locked_until, body_len) WHERE state = 'locked';
CREATE INDEX mqlite_msg_scheduled ON mqlite_messages (queue, visible_at, body_len) WHERE state = 'scheduled';
CREATE INDEX mqlite_msg_dead ON mqlite_messages (queue, id, body_len, dead_lettered_at) WHERE state = 'dead_lettered';
CREATE INDEX mqlite_msg_deferred ON mqlite_messages (queue, id, body_len) WHERE state = 'deferred';
CREATE INDEX mqlite_msg_ttl ON mqlite_messages (expires_at) WHERE expires_at > 0;
-- Peek and find read a queue's scheduled messages a page at a time in id
-- order, which mqlite_msg_scheduled's due-time order is not: this index
-- stops after the page, where that one would read the queue's whole
-- scheduled backlog. (Stats counts and sums every entry either way, so it
-- keeps reading mqlite_msg_scheduled, which carries body_len.)
CREATE INDEX mqlite_msg_scheduled_id ON mqlite_messages (queue, id) WHERE state = 'scheduled';
-- The janitor turns completed messages into receipt rows, oldest
-- completion first.
CREATE INDEX mqlite_msg_settled ON mqlite_messages (settled_at) WHERE settled_at IS NOT NULL;

-- The newest message leaves (completed in bulk, expired, purged, its
-- queue deleted): its id becomes the floor, so that no later send reuses
-- it. Deleting any other message writes nothing here.
CREATE TRIGGER mqlite_sequence_floor AFTER DELETE ON mqlite_messages
WHEN NOT EXISTS (SELECT 1 FROM mqlite_messages WHERE id > OLD.id)
BEGIN
    INSERT OR REPLACE INTO mqlite_sequence (id, floor)
    VALUES (1, max(OLD.id, coalesce((SELECT floor FROM mqlite_sequence WHERE id = 1), 0)));
END;
-- Group probes: one index over the members in flight (locked, deferred or
-- scheduled: what keeps a later member waiting), one over the live members.
-- group_id is tested first, so that a message without a group (whose
-- every write evaluates the WHERE) stops there.
CREATE INDEX mqlite_msg_group_flight ON mqlite_messages (queue, group_id, id)
    WHERE group_id IS NOT NULL AND (state = 'locked' OR state = 'deferred' OR state = 'scheduled');
CREATE INDEX mqlite_msg_group_live ON mqlite_messages (queue, group_id, id)
    WHERE state NOT IN ('dead_lettered', 'completed') AND group_id IS NOT NULL;

-- The live front of a group left (deleted, dead-lettered or completed):
-- release the next one.
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

-- An update of a grouped message's state runs mqlite_group_state, one
-- INSERT into the view mqlite_group_moves of the row's new and old state and
-- held flag, whose INSTEAD OF trigger mqlite_group_move runs the group's
-- program; a message without a group runs only that one-line trigger, whose
-- program SQLite sizes by its body (a trigger's WHEN is evaluated inside
-- it). The program is three moves, each guarded by when it applies (no two
-- apply to the same change of state):
--
-- The live front of a group left (dead-lettered or completed): release the
-- next one.
--
-- A redriven message rejoins its group in id order, but never overtakes a
-- member in flight: while the group's front (held = 0) is locked, deferred or
-- scheduled, the redriven message waits behind it (held = 1), and becomes the
-- front when that one leaves or comes back to active (the third move).
-- Before an active front, or in a group with no live member, it takes its
-- place in id order at once.
--
-- A front back to active (abandoned, reaped, promoted) hands the front over to
-- an earlier member redriven while it was in flight: the group goes on in id
-- order.
CREATE VIEW mqlite_group_moves AS
SELECT 0 AS id, '' AS queue, '' AS group_id, '' AS state, 0 AS held, '' AS old_state, 0 AS old_held WHERE 0;

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

CREATE TRIGGER mqlite_group_state AFTER UPDATE OF state ON mqlite_messages
WHEN NEW.group_id IS NOT NULL
BEGIN
    INSERT INTO mqlite_group_moves VALUES (NEW.id, NEW.queue, NEW.group_id, NEW.state, NEW.held, OLD.state, OLD.held);
END;

-- mqlite: other indexes

-- The janitor deletes expired attempts and commit records oldest first; a
-- queue is a subscription of one topic at most; the schedule loop finds the
-- next period.
CREATE INDEX mqlite_attempts_expires ON mqlite_receive_attempts (expires_at);
CREATE UNIQUE INDEX mqlite_attempts_key ON mqlite_receive_attempts (queue, attempt_id);
CREATE INDEX mqlite_commits_expires ON mqlite_commits (expires_at);
CREATE UNIQUE INDEX mqlite_commits_key ON mqlite_commits (scope, idempotency_key);
CREATE UNIQUE INDEX mqlite_subscription_queue ON mqlite_subscriptions (queue);
CREATE INDEX mqlite_schedules_next ON mqlite_schedules (next_at);
