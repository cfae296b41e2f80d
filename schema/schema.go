// Package schema owns mqlite's on-disk layout: the DDL (layout.sql), the
// goose migrations that bring a file to it, the guard token that names it,
// and Apply, which brings a file up to date or refuses it.
//
// Every object a store adds to a file is named mqlite_… (SQLite's own
// sqlite_sequence, which goose's table needs, aside), so a store can share the application's file with
// tables of any other name. The complete DDL is pinned by
// testdata/schema.golden.sql. A file carrying a guard token this binary does
// not know was written by an incompatible mqlite and is refused with
// mqlite.ErrSchemaVersionMismatch before anything is written.
package schema

import (
	"context"
	"database/sql"
	_ "embed" // layout.sql
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/mqlite/mqlite/internal/errs"
)

// Token names the table layout this binary reads and writes. An incompatible
// change to the layout must change it, so that an older binary refuses the
// file instead of misreading it.
const Token = "mqlite-schema-13"

// unprefixedToken is the guard token of the layout before every name took
// the mqlite_ prefix; migration 3 upgrades it in place, straight to Token.
const unprefixedToken = "mqlite-schema-3"

// prefixedToken is the guard token of the first prefixed layout, before a
// queue could pause, a message kept its last error, and receive attempts
// were keyed by an index; migration 4 upgrades it in place to
// receiptToken.
const prefixedToken = "mqlite-schema-4"

// receiptToken is the guard token of the layout in which a completion
// deleted its message and wrote a receipt row, and a message's body_len
// came after its strings; migration 5 upgrades it in place, to
// sharedAttemptsToken.
const receiptToken = "mqlite-schema-5"

// tombstoneToken is the guard token of the layout in which a completion
// first left its row completed as its receipt (the layout's own word for
// that row named the token), before scheduled messages were indexed by id
// as well as by due time; migration 6 upgrades it in place, to scheduledToken.
const tombstoneToken = "mqlite-schema-6"

// scheduledToken is the guard token of the layout in which a completed
// message kept its completion moment in locked_until, seqs were numbered
// by AUTOINCREMENT and a trigger wrote every message's dedup row;
// migration 7 upgrades it in place, to sharedAttemptsToken.
const scheduledToken = "mqlite-schema-7"

// inListToken is the guard token of the layout in which the CHECK of a
// message's state, the WHERE of mqlite_msg_group_flight and the WHEN of
// mqlite_group_handover named their states in constant IN lists, which
// SQLite builds into a temporary b-tree at every statement that evaluates
// them; migration 8 upgrades it in place, to sharedAttemptsToken.
const inListToken = "mqlite-schema-8"

// sharedAttemptsToken is the guard token of the layout in which the
// broker's commit records (POST /v1/commit) lived in
// mqlite_receive_attempts, under the queue name "/commit/<access key id>"
// (commitScopePrefix) and their idempotency key as the attempt id;
// migration 9 moves them into mqlite_commits, to commitsToken.
const sharedAttemptsToken = "mqlite-schema-9"

// commitsToken is the guard token of the layout before priorities: a
// message had no priority column and the claim index mqlite_msg_active
// ordered a queue's claimable messages by id alone; migration 10 adds the
// column and orders the index by (queue, priority DESC, id), to
// priorityToken.
const commitsToken = "mqlite-schema-10"

// priorityToken is the guard token of the layout before the history of
// failed deliveries: a message kept only its last error (last_error);
// migration 11 adds the column attempts, to attemptsToken.
const priorityToken = "mqlite-schema-11"

// attemptsToken is the guard token of the layout whose three group
// triggers on an update of a message's state (mqlite_group_release_on_leave,
// mqlite_group_rejoin, mqlite_group_handover) ran for every message, a
// message without a group included; migration 12 makes them one program
// behind the view mqlite_group_moves, which only a grouped message runs, to
// Token.
const attemptsToken = "mqlite-schema-12"

// commitScopePrefix begins the queue name under which the layout with
// shared attempts kept a commit record: no queue's name can (a queue name
// begins with a letter or a digit).
const commitScopePrefix = "/commit/"

// tokens are the guard tokens of the layouts, oldest first: an upgrade
// finds nothing to do on a file of its target layout or a later one.
var tokens = []string{unprefixedToken, prefixedToken, receiptToken, tombstoneToken, scheduledToken,
	inListToken, sharedAttemptsToken, commitsToken, priorityToken, attemptsToken, Token}

// VersionTable is the table in which goose records applied migrations.
const VersionTable = "mqlite_migrations"

// Latest is the goose version of a file in this binary's layout.
const Latest = 12

// Prefix begins the name of every object mqlite adds to a file.
const Prefix = "mqlite_"

//go:embed layout.sql
var layout string

// part returns the part of layout.sql that begins with the line
// "-- mqlite: <name>" and ends at the next such line.
func part(name string) string {
	const mark = "-- mqlite: "
	_, rest, ok := strings.Cut(layout, mark+name+"\n")
	if !ok {
		panic("schema: layout.sql has no part " + name) // the embedded file is fixed at build time
	}
	if i := strings.Index(rest, mark); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// versionTableSQL is the DDL goose runs for its version table on SQLite; the
// golden test checks that SQL agrees with what goose writes.
const versionTableSQL = `CREATE TABLE ` + VersionTable + ` (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		version_id INTEGER NOT NULL,
		is_applied INTEGER NOT NULL,
		tstamp TIMESTAMP DEFAULT (datetime('now'))
	)`

// SQL returns, as one script in one transaction, everything a new store adds
// to a file: goose's version table with the versions this binary applies,
// and the layout. It is what `mqlite schema` prints, so a DBA can read it,
// or run it on their own terms, after which Open finds the store up to date.
func SQL() string {
	var b strings.Builder
	b.WriteString("-- Everything mqlite adds to a file, as of layout " + Token + ".\nBEGIN;\n\n")
	b.WriteString("-- goose's record of the migrations applied.\n" + versionTableSQL + ";\n")
	b.WriteString("INSERT INTO " + VersionTable + " (version_id, is_applied) VALUES (0, 1)")
	for v := 1; v <= Latest; v++ {
		fmt.Fprintf(&b, ", (%d, 1)", v)
	}
	b.WriteString(";\n\n")
	b.WriteString(strings.TrimSpace(layout))
	b.WriteString("\n\nCOMMIT;\n")
	return b.String()
}

// migrations are the goose migrations, each in its own transaction. A new
// file runs them all: the first creates the layout, the others find the
// current token and do nothing. A file made before the mqlite_ prefix has
// recorded versions 1 and 2 (which then created the unprefixed layout); the
// third upgrades it to the current layout in one transaction, and the fourth
// then finds nothing to do. A file of the first prefixed layout has recorded
// 1 to 3 and runs the fourth and the fifth, each in its own transaction (a
// crash between them leaves a file of the layout in between, which the next
// Open takes on from there); a file of the layout with receipts runs the
// fifth, which makes the messages' table and all its indexes of the
// layout with shared attempts, so that the sixth to the eighth find
// nothing to do; a file of the layout mqlite-schema-6 runs the sixth and
// the seventh, each in its own transaction, and a file of the layout
// before settled_at the seventh, each of which makes the layout with
// shared attempts so that the eighth finds nothing to do; a file of the
// layout with IN lists runs the eighth. The ninth, in its own
// transaction, moves the broker's commit records of a file of the layout
// with shared attempts (any file the third did not bring up to date) into
// their own table. The tenth, in its own transaction, gives the messages
// of a file of the layout before priorities their priority column (0) and
// the claim index its priority order. The eleventh, in its own
// transaction, gives the messages of a file of the layout before the
// history of failed deliveries their attempts column (NULL: no failure
// recorded). The twelfth, in its own transaction, makes the three group
// triggers on an update of a message's state one program behind a view,
// which only a grouped message runs.
func migrations() []*goose.Migration {
	return []*goose.Migration{
		goose.NewGoMigration(1, &goose.GoFunc{RunTx: create}, nil),
		goose.NewGoMigration(2, &goose.GoFunc{RunTx: func(context.Context, *sql.Tx) error { return nil }}, nil),
		goose.NewGoMigration(3, &goose.GoFunc{RunTx: upgradeUnprefixed}, nil),
		goose.NewGoMigration(4, &goose.GoFunc{RunTx: upgradePrefixed}, nil),
		goose.NewGoMigration(5, &goose.GoFunc{RunTx: upgradeReceipts}, nil),
		goose.NewGoMigration(6, &goose.GoFunc{RunTx: upgradeTombstones}, nil),
		goose.NewGoMigration(7, &goose.GoFunc{RunTx: upgradeSettled}, nil),
		goose.NewGoMigration(8, &goose.GoFunc{RunTx: upgradeInLists}, nil),
		goose.NewGoMigration(9, &goose.GoFunc{RunTx: upgradeCommits}, nil),
		goose.NewGoMigration(10, &goose.GoFunc{RunTx: upgradePriority}, nil),
		goose.NewGoMigration(11, &goose.GoFunc{RunTx: upgradeAttempts}, nil),
		goose.NewGoMigration(12, &goose.GoFunc{RunTx: upgradeGroupMoves}, nil),
	}
}

// indexParts are the parts of layout.sql that hold indexes and triggers.
var indexParts = []string{"message indexes and triggers", "other indexes"}

// create writes the whole layout into a file that has none.
func create(ctx context.Context, tx *sql.Tx) error {
	for _, p := range append([]string{"guard", "tables"}, indexParts...) {
		if _, err := tx.ExecContext(ctx, part(p)); err != nil {
			return fmt.Errorf("%w: create the layout, %s: %w", errs.ErrMigration, p, err)
		}
	}
	return nil
}

// unprefixedTables are the tables of the unprefixed layout, in the order
// they are copied; each becomes mqlite_<name> with the same columns (the
// queues gain dedup_by_body).
var unprefixedTables = []string{"queues", "messages", "message_bodies", "dedup", "settlement_receipts",
	"receive_attempts", "topics", "subscriptions", "access_keys", "schedules"}

// upgradeUnprefixed moves a file of the unprefixed layout to the prefixed
// one, in the migration's one transaction: a failure at any step, or a
// SIGKILL, leaves the old layout whole. Every row is copied as it is, so
// messages keep their seq, state, lease and token; the sequence of seqs goes
// on where it was (its floor carried into mqlite_sequence). Every queue that existed keeps deduplicating bodies, as
// it did, so an upgrade changes no behaviour under a running application.
// On a file that migration 1 created, it finds the new token and does
// nothing. The unprefixed layout predates the broker, so its receive
// attempts hold no commit records: it goes straight to Token, with
// mqlite_commits empty.
func upgradeUnprefixed(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, unprefixedToken, Token)
	if step == nil {
		return err
	}
	if err := step("create the tables", part("tables")); err != nil {
		return err
	}
	for _, t := range unprefixedTables {
		cols, err := columns(ctx, tx, t)
		if errors.Is(err, errNoTable) && t == "schedules" {
			continue // a file made before schedules existed (version 1)
		}
		if err != nil {
			return fmt.Errorf("%w: upgrade from %s to %s, columns of %s: %w", errs.ErrMigration, unprefixedToken, Token, t, err)
		}
		into, from := cols, cols
		if t == "queues" {
			into, from = cols+", dedup_by_body", cols+", 1"
		}
		if err := step("copy "+t, `INSERT INTO `+Prefix+t+` (`+into+`) SELECT `+from+` FROM `+t); err != nil {
			return err
		}
		if err := sameCount(ctx, tx, t); err != nil {
			return err
		}
	}
	if err := carrySequence(step, `SELECT seq FROM sqlite_sequence WHERE name = 'messages'`); err != nil {
		return err
	}
	for _, t := range unprefixedTables {
		// A table leaves with its indexes and triggers; no trigger fires.
		if err := step("drop "+t, `DROP TABLE IF EXISTS `+t); err != nil {
			return err
		}
	}
	for _, p := range indexParts {
		if err := step("create the "+p, part(p)); err != nil {
			return err
		}
	}
	return step("write the guard "+Token, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, Token)
}

// stepFunc runs one statement of an upgrade, naming the step in its error.
type stepFunc func(name, query string, args ...any) error

// upgradeFrom reads the guard of a file an upgrade from layout from to
// layout to runs on. It returns the upgrade's step function when the file
// holds layout from; nil and no error when it already holds layout to or a
// later one (a new file, or one an earlier migration brought up to date);
// nil and an error otherwise.
func upgradeFrom(ctx context.Context, tx *sql.Tx, from, to string) (stepFunc, error) {
	return upgradeAmong(ctx, tx, tokens, from, to)
}

// upgradeAmong is upgradeFrom among the guard tokens known, oldest first
// (tokens on SQLite, postgresTokens on PostgreSQL).
func upgradeAmong(ctx context.Context, tx *sql.Tx, known []string, from, to string) (stepFunc, error) {
	var token string
	if err := tx.QueryRowContext(ctx, `SELECT token FROM mqlite_guard WHERE id = 1`).Scan(&token); err != nil {
		return nil, fmt.Errorf("%w: upgrade: read the guard: %w", errs.ErrMigration, err)
	}
	if at := slices.Index(known, token); at >= 0 && at >= slices.Index(known, to) {
		return nil, nil
	}
	if token != from {
		return nil, fmt.Errorf("%w: upgrade: the store has %q", errs.ErrSchemaVersionMismatch, token)
	}
	return func(name, query string, args ...any) error {
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return fmt.Errorf("%w: upgrade from %s to %s, %s: %w", errs.ErrMigration, from, to, name, err)
		}
		if afterStep != nil {
			afterStep(name)
		}
		return nil
	}, nil
}

// afterStep, when set (by the crash test), is called after each step of an
// upgrade, inside its transaction.
var afterStep func(step string)

// upgradePrefixed moves a file of the first prefixed layout to the layout
// with receipts (receiptToken), in the migration's one transaction. Two
// columns are added in place (SQLite writes no row for them: an old row
// reads the default); the receive attempts, a few short-lived rows, are
// copied aside, and their table is made again as a rowid table keyed by a
// unique index. The messages' table keeps its columns in the order of that
// layout, which migration 5 then changes.
func upgradePrefixed(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, prefixedToken, receiptToken)
	if step == nil {
		return err
	}
	const cols = "queue, attempt_id, request, result, expires_at"
	for _, s := range []struct{ name, query string }{
		{"add mqlite_queues.paused_at", `ALTER TABLE mqlite_queues ADD COLUMN paused_at INTEGER NOT NULL DEFAULT 0`},
		{"add mqlite_messages.last_error", `ALTER TABLE mqlite_messages ADD COLUMN last_error TEXT`},
		{"copy the receive attempts aside", `CREATE TEMP TABLE mqlite_attempts_copy AS SELECT ` + cols + ` FROM mqlite_receive_attempts`},
		{"drop mqlite_receive_attempts", `DROP TABLE mqlite_receive_attempts`},
		{"create mqlite_receive_attempts", statement("CREATE TABLE mqlite_receive_attempts (")},
		{"copy the receive attempts back", `INSERT INTO mqlite_receive_attempts (` + cols + `) SELECT ` + cols + ` FROM temp.mqlite_attempts_copy`},
		{"drop the copy", `DROP TABLE temp.mqlite_attempts_copy`},
		{"create mqlite_attempts_expires", statement("CREATE INDEX mqlite_attempts_expires ")},
		{"create mqlite_attempts_key", statement("CREATE UNIQUE INDEX mqlite_attempts_key ")},
	} {
		if err := step(s.name, s.query); err != nil {
			return err
		}
	}
	return step("write the guard "+receiptToken, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, receiptToken)
}

// messageColumns are the columns of mqlite_messages that every layout since
// the one with receipts has, in the order of the current layout.
const messageColumns = `id, queue, state, held, visible_at, locked_until, body_len, lock_token,
	delivery_count, expires_at, enqueued_at, message_id, group_id, subject, properties, content_key,
	body, dead_letter_reason, dead_letter_desc, dead_lettered_at, last_error`

// upgradeReceipts moves a file of the layout with receipts to the current
// one, in the migration's one transaction: the messages are copied aside,
// their table is made again with body_len among the columns the
// connection's hook reads, and the rows come back with their seqs, states,
// leases and tokens; the sequence of seqs goes on where it was (its floor
// read from sqlite_sequence before the table goes). Then the messages' indexes
// and triggers are made: a completion now leaves its row completed (the
// receipt of the completion), and one index probes a group's members in
// flight where three did. The receipts the file
// holds stay and replay as before. The file then holds the layout with
// shared attempts, which migration 9 takes on.
func upgradeReceipts(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, receiptToken, sharedAttemptsToken)
	if step == nil {
		return err
	}
	if err := newSequence(step); err != nil {
		return err
	}
	return rebuildMessages(step, messageColumns, messageColumns, sharedAttemptsToken)
}

// newSequence creates mqlite_sequence in a file of a layout whose messages
// AUTOINCREMENT numbered, and carries their sequence into its floor: from
// sqlite_sequence, before the old table takes its row with it.
func newSequence(step stepFunc) error {
	if err := step("create mqlite_sequence", statement("CREATE TABLE mqlite_sequence (")); err != nil {
		return err
	}
	return carrySequence(step, `SELECT seq FROM sqlite_sequence WHERE name = 'mqlite_messages'`)
}

// rebuildMessages makes mqlite_messages again in the current layout, in
// the migration's one transaction, and writes the guard to: it copies
// the messages aside, makes the table again, copies them back (into the
// columns into, from the expressions from of the copy), and only then
// makes the messages' indexes and triggers, so that each index is built
// once and no trigger fires on a copied row (nor does the drop of the old
// table fire mqlite_sequence_floor). The sequence's floor must be in
// mqlite_sequence before it runs (newSequence, for a layout without it).
// The table and indexes it makes are those of the layout before priorities
// (unprioritized, with the group triggers of that layout: separate), which
// migration 10 then takes on like any file of that layout.
func rebuildMessages(step stepFunc, into, from, to string) error {
	for _, s := range []struct{ name, query string }{
		{"copy the messages aside", `CREATE TEMP TABLE mqlite_messages_copy AS SELECT * FROM mqlite_messages`},
		{"drop mqlite_messages", `DROP TABLE mqlite_messages`},
		{"create mqlite_messages", unprioritized(statement("CREATE TABLE mqlite_messages ("))},
		{"copy the messages back", `INSERT INTO mqlite_messages (` + into + `) SELECT ` + from + ` FROM temp.mqlite_messages_copy`},
		{"drop the copy of the messages", `DROP TABLE temp.mqlite_messages_copy`},
		{"create the message indexes and triggers", separateGroupTriggers(unprioritized(part("message indexes and triggers")))},
	} {
		if err := step(s.name, s.query); err != nil {
			return err
		}
	}
	return step("write the guard "+to, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, to)
}

// upgradeTombstones moves a file of the layout mqlite-schema-6
// (tombstoneToken) to the layout before settled_at (scheduledToken), in
// the migration's one transaction: it adds the index of scheduled messages by id
// (mqlite_msg_scheduled_id), which peek and find seek for a page of the
// scheduled state. No row changes; building the index reads the queue's
// scheduled messages once.
func upgradeTombstones(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, tombstoneToken, scheduledToken)
	if step == nil {
		return err
	}
	// The index as that layout wrote it: mqlite_msg_scheduled_id has not
	// changed since.
	if err := step("create mqlite_msg_scheduled_id", statement("CREATE INDEX mqlite_msg_scheduled_id ")); err != nil {
		return err
	}
	return step("write the guard "+scheduledToken, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, scheduledToken)
}

// settledFrom are the expressions that copy a message of the layout before
// settled_at into messageColumns and settled_at: a completed message
// (its row, the receipt) kept the moment of its completion in locked_until, which
// now holds only a lease's end.
var settledFrom = strings.Replace(messageColumns, "locked_until",
	`CASE WHEN state = 'completed' THEN 0 ELSE locked_until END`, 1) +
	`, CASE WHEN state = 'completed' THEN locked_until END`

// upgradeSettled moves a file of the layout before settled_at to the
// layout with shared attempts, in the migration's one transaction
// (rebuildMessages): a
// completed message's completion moment moves from locked_until to
// settled_at, which a CHECK ties to the state; seqs are given by the send
// from the newest message and mqlite_sequence's floor, where AUTOINCREMENT
// wrote sqlite_sequence in every send; the trigger that wrote a dedup row
// per message goes (the send writes them); the completed rows' index
// mqlite_msg_completed becomes mqlite_msg_settled.
func upgradeSettled(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, scheduledToken, sharedAttemptsToken)
	if step == nil {
		return err
	}
	if err := newSequence(step); err != nil {
		return err
	}
	return rebuildMessages(step, messageColumns+", settled_at", settledFrom, sharedAttemptsToken)
}

// upgradeInLists moves a file of the layout with IN lists to the layout
// with shared attempts, in the migration's one transaction
// (rebuildMessages): the CHECK of
// the state lives in the table's text, so the table is made again, every
// row copied as it is; mqlite_msg_group_flight and mqlite_group_handover
// come back with their states as OR chains. mqlite_sequence and its floor
// stay as they are.
func upgradeInLists(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, inListToken, sharedAttemptsToken)
	if step == nil {
		return err
	}
	cols := messageColumns + ", settled_at"
	return rebuildMessages(step, cols, cols, sharedAttemptsToken)
}

// commitRecords picks the broker's commit records among the receive
// attempts of the layout with shared attempts: the queue names that begin
// with commitScopePrefix (below "/commit0": '0' follows '/'), a range of
// mqlite_attempts_key.
const commitRecords = `queue >= '` + commitScopePrefix + `' AND queue < '/commit0'`

// upgradeCommits moves a file of the layout with shared attempts to the
// current one, in the migration's one transaction: it makes
// mqlite_commits, moves every commit record there from
// mqlite_receive_attempts (its scope the access key's id after
// commitScopePrefix, its id kept, so a scope's records keep their order;
// an expired one too, which the janitor deletes as before), deletes them
// from the attempts, and then makes the new table's indexes. The receive
// attempts stay as they are.
func upgradeCommits(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, sharedAttemptsToken, commitsToken)
	if step == nil {
		return err
	}
	for _, s := range []struct{ name, query string }{
		{"create mqlite_commits", statement("CREATE TABLE mqlite_commits (")},
		{"move the commit records", `INSERT INTO mqlite_commits (id, scope, idempotency_key, request, result, expires_at)
			SELECT id, substr(queue, ` + fmt.Sprint(len(commitScopePrefix)+1) + `), attempt_id, request, result, expires_at
			FROM mqlite_receive_attempts WHERE ` + commitRecords + ` ORDER BY id`},
		{"delete the commit records from the attempts", `DELETE FROM mqlite_receive_attempts WHERE ` + commitRecords},
		{"create mqlite_commits_expires", statement("CREATE INDEX mqlite_commits_expires ")},
		{"create mqlite_commits_key", statement("CREATE UNIQUE INDEX mqlite_commits_key ")},
	} {
		if err := step(s.name, s.query); err != nil {
			return err
		}
	}
	return step("write the guard "+commitsToken, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, commitsToken)
}

// priorityColumn is the priority column as ALTER TABLE adds it: the text
// layout.sql holds after settled_at, so that an upgraded file and a new one
// hold the same table text.
const priorityColumn = `priority INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9)`

// claimIndexColumns are mqlite_msg_active's columns in today's layout, and
// unprioritizedClaimIndexColumns in the layout before priorities.
const (
	claimIndexColumns              = `mqlite_msg_active ON mqlite_messages (queue, priority DESC, id, body_len)`
	unprioritizedClaimIndexColumns = `mqlite_msg_active ON mqlite_messages (queue, id, body_len)`
)

// unprioritized turns DDL of layout.sql into that of the layout before
// priorities: the messages' table without the priority column (nor the
// attempts column, which came after it), the claim
// index in (queue, id) order. It panics if the text has neither, so that a
// change to layout.sql cannot slip past it.
func unprioritized(ddl string) string {
	out := strings.Replace(ddl, ", "+priorityColumn+", "+attemptsColumn, "", 1)
	out = strings.Replace(out, claimIndexColumns, unprioritizedClaimIndexColumns, 1)
	if out == ddl {
		panic("schema: layout.sql's messages have no priority column nor claim index in priority order")
	}
	return out
}

// upgradePriority moves a file of the layout before priorities to the
// current one, in the migration's one transaction: every message gets
// priority 0 (ALTER TABLE ... ADD COLUMN, which rewrites no row: the
// default is read from the table's text), and mqlite_msg_active is made
// again in (queue, priority DESC, id) order, so that the claim takes the
// highest priority first and then the lowest seq, as it took the lowest
// seq. A file whose messages' table an earlier migration made again
// (rebuildMessages) holds that layout's table too.
func upgradePriority(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, commitsToken, priorityToken)
	if step == nil {
		return err
	}
	for _, s := range []struct{ name, query string }{
		{"add the priority column", `ALTER TABLE mqlite_messages ADD COLUMN ` + priorityColumn},
		{"drop mqlite_msg_active", `DROP INDEX mqlite_msg_active`},
		{"create mqlite_msg_active", statement("CREATE INDEX mqlite_msg_active ")},
	} {
		if err := step(s.name, s.query); err != nil {
			return err
		}
	}
	return step("write the guard "+priorityToken, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, priorityToken)
}

// attemptsColumn is the attempts column as ALTER TABLE adds it: the text
// layout.sql holds after priority, so that an upgraded file and a new one
// hold the same table text.
const attemptsColumn = `attempts TEXT`

// upgradeAttempts moves a file of the layout before the history of failed
// deliveries to the current one, in the migration's one transaction: the
// messages' table gains the column attempts (ALTER TABLE ... ADD COLUMN,
// which rewrites no row: every message reads NULL, no failure recorded;
// its last_error stays as it was). No index changes.
func upgradeAttempts(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, priorityToken, attemptsToken)
	if step == nil {
		return err
	}
	if err := step("add the attempts column", `ALTER TABLE mqlite_messages ADD COLUMN `+attemptsColumn); err != nil {
		return err
	}
	return step("write the guard "+attemptsToken, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, attemptsToken)
}

// upgradeGroupMoves moves a file of the layout whose group triggers ran
// for every message to the current one, in the migration's one
// transaction: the three triggers on an update of a message's state go,
// and their statements, each guarded by its trigger's WHEN, come back as
// one program (mqlite_group_move) behind the view mqlite_group_moves, which
// mqlite_group_state runs for a grouped message alone. No row changes: a
// group's held flags are what the old triggers left, which the new program
// keeps as they would have.
func upgradeGroupMoves(ctx context.Context, tx *sql.Tx) error {
	step, err := upgradeFrom(ctx, tx, attemptsToken, Token)
	if step == nil {
		return err
	}
	for _, s := range []struct{ name, query string }{
		{"drop mqlite_group_release_on_leave", `DROP TRIGGER mqlite_group_release_on_leave`},
		{"drop mqlite_group_rejoin", `DROP TRIGGER mqlite_group_rejoin`},
		{"drop mqlite_group_handover", `DROP TRIGGER mqlite_group_handover`},
		{"create mqlite_group_moves", statement("CREATE VIEW mqlite_group_moves ")},
		{"create mqlite_group_move", trigger("CREATE TRIGGER mqlite_group_move ")},
		{"create mqlite_group_state", trigger("CREATE TRIGGER mqlite_group_state ")},
	} {
		if err := step(s.name, s.query); err != nil {
			return err
		}
	}
	return step("write the guard "+Token, `UPDATE mqlite_guard SET token = ? WHERE id = 1`, Token)
}

// trigger returns the trigger of layout.sql that begins with head, up to
// its END.
func trigger(head string) string {
	i := strings.Index(layout, "\n"+head)
	if i < 0 {
		panic("schema: layout.sql has no " + head) // the embedded file is fixed at build time
	}
	rest := layout[i+1:]
	return rest[:strings.Index(rest, "\nEND;")+len("\nEND")]
}

// groupMoves is the text of layout.sql that makes the view
// mqlite_group_moves and the triggers mqlite_group_move and
// mqlite_group_state, and separateTriggers what the layouts before
// mqlite-schema-13 held in its place: the three group triggers on an update
// of a message's state, as rebuildMessages makes them.
var groupMoves = func() string {
	head := "CREATE VIEW mqlite_group_moves "
	i := strings.Index(layout, head)
	end := trigger("CREATE TRIGGER mqlite_group_state ")
	j := strings.Index(layout, end)
	if i < 0 || j < i {
		panic("schema: layout.sql has no mqlite_group_moves before mqlite_group_state")
	}
	return layout[i : j+len(end)+len(";\n")]
}()

// separateTriggers are the group triggers of the layouts before
// mqlite-schema-13 (see groupMoves).
const separateTriggers = `CREATE TRIGGER mqlite_group_release_on_leave AFTER UPDATE OF state ON mqlite_messages
WHEN NEW.group_id IS NOT NULL AND OLD.held = 0
 AND NEW.state IN ('dead_lettered', 'completed') AND OLD.state NOT IN ('dead_lettered', 'completed')
BEGIN
    UPDATE mqlite_messages SET held = 0
     WHERE held = 1 AND id = (
           SELECT b.id FROM mqlite_messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state NOT IN ('dead_lettered', 'completed')
            ORDER BY b.id LIMIT 1);
END;

CREATE TRIGGER mqlite_group_rejoin AFTER UPDATE OF state ON mqlite_messages
WHEN NEW.group_id IS NOT NULL
 AND OLD.state = 'dead_lettered' AND NEW.state <> 'dead_lettered'
BEGIN
    UPDATE mqlite_messages SET held = EXISTS (
           SELECT 1 FROM mqlite_messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state NOT IN ('dead_lettered', 'completed') AND b.id <> NEW.id
              AND (b.id < NEW.id OR (b.held = 0 AND b.state <> 'active')))
     WHERE id = NEW.id;
    UPDATE mqlite_messages SET held = 1
     WHERE queue = NEW.queue AND group_id = NEW.group_id
       AND state NOT IN ('dead_lettered', 'completed') AND id > NEW.id AND held = 0
       AND (SELECT held FROM mqlite_messages WHERE id = NEW.id) = 0;
END;

CREATE TRIGGER mqlite_group_handover AFTER UPDATE OF state ON mqlite_messages
WHEN NEW.group_id IS NOT NULL AND NEW.held = 0 AND NEW.state = 'active'
 AND (OLD.state = 'locked' OR OLD.state = 'deferred' OR OLD.state = 'scheduled')
BEGIN
    UPDATE mqlite_messages SET held = 0
     WHERE id = (SELECT b.id FROM mqlite_messages b
                  WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
                    AND b.state NOT IN ('dead_lettered', 'completed') AND b.id < NEW.id
                  ORDER BY b.id LIMIT 1);
    UPDATE mqlite_messages SET held = 1
     WHERE id = NEW.id AND EXISTS (
           SELECT 1 FROM mqlite_messages b
            WHERE b.queue = NEW.queue AND b.group_id = NEW.group_id
              AND b.state NOT IN ('dead_lettered', 'completed') AND b.id < NEW.id);
END;
`

// separateGroupTriggers turns DDL of layout.sql into that of the layouts
// before mqlite-schema-13: the three group triggers on an update of the
// state where the view and its two triggers are. It panics if the text has
// not the view, so that a change to layout.sql cannot slip past it.
func separateGroupTriggers(ddl string) string {
	if !strings.Contains(ddl, groupMoves) {
		panic("schema: the DDL has no mqlite_group_moves")
	}
	return strings.Replace(ddl, groupMoves, separateTriggers, 1)
}

// statement returns the statement of layout.sql that begins with head, up
// to its semicolon: a table or an index (a trigger's body holds semicolons).
func statement(head string) string {
	i := strings.Index(layout, "\n"+head)
	if i < 0 {
		panic("schema: layout.sql has no " + head) // the embedded file is fixed at build time
	}
	rest := layout[i+1:]
	return rest[:strings.Index(rest, ";")]
}

// carrySequence makes the seqs of mqlite_messages go on after the highest
// ever given before the upgrade, deleted messages included, which the query
// from (one row, one column, or none) reads: it becomes the floor in
// mqlite_sequence.
func carrySequence(step stepFunc, from string) error {
	return step("carry the message sequence", `INSERT OR REPLACE INTO mqlite_sequence (id, floor)
		SELECT 1, coalesce((`+from+`), 0)`)
}

// errNoTable is the error of columns for a table the file does not have.
var errNoTable = errors.New("no such table")

// columns lists the columns of table t, comma-separated.
func columns(ctx context.Context, tx *sql.Tx, t string) (string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, t)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return "", err
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	if len(cols) == 0 {
		return "", errNoTable
	}
	return strings.Join(cols, ", "), nil
}

// sameCount checks that the copy of table t holds as many rows as t.
func sameCount(ctx context.Context, tx *sql.Tx, t string) error {
	var old, copied int64
	err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+t+`), (SELECT count(*) FROM `+Prefix+t+`)`).Scan(&old, &copied)
	if err == nil && old != copied {
		err = fmt.Errorf("%d rows, copied %d", old, copied)
	}
	if err != nil {
		return fmt.Errorf("%w: upgrade: check the copy of %s: %w", errs.ErrMigration, t, err)
	}
	return nil
}

// GuardToken reads the guard token of the file behind db. It returns "" and
// no error when the file has no guard table yet (a new or foreign file).
func GuardToken(ctx context.Context, db *sql.DB) (string, error) {
	var n int
	err := db.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'mqlite_guard'`).Scan(&n)
	if err != nil {
		return "", fmt.Errorf("look for guard: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	var token string
	err = db.QueryRowContext(ctx, `SELECT token FROM mqlite_guard WHERE id = 1`).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("%w: guard table without a token", errs.ErrSchemaVersionMismatch)
	}
	if err != nil {
		return "", fmt.Errorf("read guard: %w", err)
	}
	return token, nil
}

// State is what Check found in a file.
type State int

const (
	// Current is a store in this binary's layout, up to date.
	Current State = iota
	// Fresh is a file without a store: new, or the application's own
	// database, which mqlite may share.
	Fresh
	// Outdated is a store in an earlier layout that Apply upgrades, or a
	// store of this layout with migrations left to record.
	Outdated
)

// Check tells what the file behind db holds, or returns
// ErrSchemaVersionMismatch when mqlite cannot use it: a guard token this
// binary does not know (a newer or foreign mqlite), or, in a file that is not
// yet a store of this layout, an object whose name begins with mqlite_ that
// the store would not have made (another program's, or a clash waiting to
// happen half-way through a migration). It only reads, so a refused file is
// left byte-identical.
func Check(ctx context.Context, db *sql.DB) (State, error) {
	token, err := GuardToken(ctx, db)
	if err != nil {
		return 0, err
	}
	switch token {
	case "":
		// goose's table alone is a creation cut short before its first
		// migration committed.
		return Fresh, refuseForeign(ctx, db, VersionTable)
	case unprefixedToken:
		return Outdated, refuseForeign(ctx, db, VersionTable, "mqlite_guard")
	case prefixedToken, receiptToken, tombstoneToken, scheduledToken, inListToken, sharedAttemptsToken, commitsToken, priorityToken, attemptsToken:
		return Outdated, nil
	case Token:
		v, err := version(ctx, db)
		if err != nil {
			return 0, err
		}
		if v < Latest {
			return Outdated, nil
		}
		return Current, nil
	}
	return 0, fmt.Errorf("%w: file has %q, this binary needs %q",
		errs.ErrSchemaVersionMismatch, token, Token)
}

// version reads the highest migration the file has applied.
func version(ctx context.Context, db *sql.DB) (int64, error) {
	var v sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT max(version_id) FROM `+VersionTable+` WHERE is_applied`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read the migrations applied: %w", err)
	}
	return v.Int64, nil
}

// Version returns the highest migration applied to the file behind db: 0 for
// a file without a store, Latest for one in this binary's layout.
func Version(ctx context.Context, db *sql.DB) (int64, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`,
		VersionTable).Scan(&n); err != nil || n == 0 {
		return 0, err
	}
	return version(ctx, db)
}

// refuseForeign returns ErrSchemaVersionMismatch when the file holds an
// object named mqlite_… (in any case: SQLite's names are case-insensitive)
// other than those allowed.
func refuseForeign(ctx context.Context, db *sql.DB, allowed ...string) error {
	var clash string
	err := db.QueryRowContext(ctx, `SELECT name FROM sqlite_schema
		WHERE name LIKE 'mqlite\_%' ESCAPE '\' AND lower(name) NOT IN (SELECT value FROM json_each(?))
		ORDER BY name LIMIT 1`, jsonList(allowed)).Scan(&clash)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("look for clashing objects: %w", err)
	}
	return fmt.Errorf("%w: the file is not an mqlite store of this layout but already has an object named %q (mqlite reserves every name that begins with %q)",
		errs.ErrSchemaVersionMismatch, clash, Prefix)
}

func jsonList(v []string) string {
	b, _ := json.Marshal(v) // strings only
	return string(b)
}

// Apply runs every pending migration on db. Call Check first: Apply assumes
// the file is new, in the unprefixed layout, or carries Token. A migration
// that fails rolls back whole; the error says which step.
func Apply(ctx context.Context, db *sql.DB) error {
	store, err := database.NewStore(database.DialectSQLite3, VersionTable)
	if err != nil {
		return fmt.Errorf("migration store: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, nil,
		goose.WithStore(store), goose.WithDisableGlobalRegistry(true), goose.WithGoMigrations(migrations()...))
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		if !errors.Is(err, errs.ErrMigration) && !errors.Is(err, errs.ErrSchemaVersionMismatch) {
			err = fmt.Errorf("%w: %w", errs.ErrMigration, err)
		}
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}
