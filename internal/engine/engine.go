package engine

import (
	"context"
	"database/sql"
	"fmt"
)

// Engine is the store boundary (docs/internals.md): what package
// mqlite and the outbox need of a storage engine beyond portable SQL on a
// DBTX. Open the file, ready it, enqueue inside a caller's transaction,
// claim, settle, recover, back up. Everything SQLite-only (the connection's
// SQL functions and hooks, PRAGMAs, result codes, VACUUM INTO) lives behind
// it; the package's other functions (queue and topic administration,
// renewals, sweeps, dead letters, stats) are plain SQL over DBTX in the
// dialect SQLite and libSQL share. docs/internals.md lists the contract an
// engine signs; the conformance kit judges it.
type Engine interface {
	// Open returns the engine's handle on the file cfg.Path, serialized on
	// one connection, with cfg's callbacks wired. It does not read or write
	// the file's contents. release drops the handle's hold on cfg's
	// functions once the connection has closed.
	Open(cfg ConnConfig) (db *sql.DB, release func(), err error)
	// Prepare readies a file the schema check accepted, before the
	// migrations: its journal and page settings. fresh is a file with no
	// mqlite schema yet.
	Prepare(ctx context.Context, db *sql.DB, fresh bool) error
	// Enqueue is the in-transaction send: msgs into the queue or topic name
	// inside tx, which may be a caller's bare transaction on the handle.
	Enqueue(ctx context.Context, tx DBTX, name string, msgs []SendMessage) ([]SendResult, error)
	// Claim runs one Receive inside tx.
	Claim(ctx context.Context, tx DBTX, r ClaimRequest) ([]Row, error)
	// Settle applies one fenced settlement inside tx, with its receipt.
	Settle(ctx context.Context, tx DBTX, s Settlement) error
	// SettleTx is the in-transaction settlement: s inside tx, which may be
	// a caller's bare transaction on the handle, at the store's now (s.Now
	// is ignored), told to the store (ConnConfig.Settling) so that what
	// follows a settlement happens when tx commits. It never replays: a
	// delivery already settled is errs.ErrAlreadySettled (a live receipt
	// shows it) or errs.ErrLockLost, and the caller rolls tx back. A
	// transaction on any other handle is errs.ErrNotAStore, with nothing
	// written.
	SettleTx(ctx context.Context, tx DBTX, s Settlement) error
	// Recover releases every lease an earlier process left in the file.
	Recover(ctx context.Context, db DBTX, now int64) (int64, error)
	// Backup writes a consistent copy of the file to the new file path.
	Backup(ctx context.Context, db DBTX, path string) error
}

// SQLite is the engine on a local SQLite file, through modernc.org/sqlite.
type SQLite struct{}

var _ Engine = SQLite{}

// Local is the engine of every store; the outbox reaches it to enqueue on a
// caller's bare transaction, which carries no store.
var Local Engine = SQLite{}

// Open opens the file on a private driver instance; see openDB.
func (SQLite) Open(cfg ConnConfig) (*sql.DB, func(), error) { return openDB(cfg) }

// Prepare gives a new file the engine's page size and puts the file in WAL
// mode, which mqlite needs: readers never block the writer and a crash
// never leaves a torn state.
func (SQLite) Prepare(ctx context.Context, db *sql.DB, fresh bool) error {
	if fresh {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size = %d", PageSize)); err != nil {
			return fmt.Errorf("page size: %w", err)
		}
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return fmt.Errorf("journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode: file stays in %q mode, mqlite needs wal", mode)
	}
	return nil
}

// Enqueue sends; see Send.
func (SQLite) Enqueue(ctx context.Context, tx DBTX, name string, msgs []SendMessage) ([]SendResult, error) {
	return Send(ctx, tx, name, msgs)
}

// Claim claims; see the package function Claim.
func (SQLite) Claim(ctx context.Context, tx DBTX, r ClaimRequest) ([]Row, error) {
	return Claim(ctx, tx, r)
}

// Settle settles; see the package function Settle.
func (SQLite) Settle(ctx context.Context, tx DBTX, s Settlement) error { return Settle(ctx, tx, s) }

// SettleTx reads now from the store's clock and reports the settlement to
// the store through the handle's SQL function mqlite_settling, which no
// other handle has (errs.ErrNotAStore, as for a send), then settles; a
// fence that matches no row is alreadySettled, never a replay.
func (SQLite) SettleTx(ctx context.Context, tx DBTX, s Settlement) error {
	if s.Op == OpComplete {
		return CompleteTx(ctx, tx, s) // the same in one statement
	}
	if err := tx.QueryRowContext(ctx, `SELECT mqlite_settling(?, ?, ?, ?)`, string(s.Op), s.Queue, s.Seq, s.Token).Scan(&s.Now); err != nil {
		return interpret(string(s.Op), err)
	}
	return settle(ctx, tx, s, alreadySettled)
}

// Recover recovers; see the package function Recover.
func (SQLite) Recover(ctx context.Context, db DBTX, now int64) (int64, error) {
	return Recover(ctx, db, now)
}

// Backup runs VACUUM INTO path: a consistent, compacted copy of the last
// commit, taken while the store stays in use.
func (SQLite) Backup(ctx context.Context, db DBTX, path string) error {
	_, err := db.ExecContext(ctx, `VACUUM INTO ?`, path)
	return err
}
