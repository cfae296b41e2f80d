package mqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/groupcommit"
	"github.com/mqlite/mqlite/internal/handoff"
	"github.com/mqlite/mqlite/internal/tally"
	"github.com/mqlite/mqlite/internal/txmark"
)

// Tx is one callback's transaction of Store.Tx: its own savepoint inside
// the transaction of a group commit (on PostgreSQL, a transaction of its
// own). It is not safe for concurrent use.
type Tx struct {
	tx  *sql.Tx
	ctx context.Context
}

// SQL returns the *sql.Tx, for the application's statements and for
// outbox.SendOne / SendBatch.
func (t *Tx) SQL() *sql.Tx { return t.tx }

// Context returns the context to run statements with inside the
// transaction: it carries the values of Store.Tx's ctx but not its
// cancellation, because an interrupted statement must not leave a
// half-finished transaction on the store's only connection. See Store.Tx for
// how cancellation is honoured instead.
func (t *Tx) Context() context.Context { return t.ctx }

// Tx runs fn in one transaction on the store's connection and commits when fn
// returns nil. It rolls back fn's work when fn returns an error (which Tx
// returns), when fn panics (the panic is re-raised after the rollback), and
// when ctx is cancelled before fn's work joined the commit, even if fn
// returned nil: then ctx's error is returned and neither the business rows
// nor the messages exist.
//
// Group commit: calls of Tx that arrive while another transaction of the
// store runs or commits wait for the next one and share it: each fn runs,
// one after the other, in a savepoint of its own (the first whose work the
// transaction holds needs none: undoing it is a rollback), released into
// the shared transaction when fn returns nil or rolled back to alone (fn's
// error, its panic, its ctx ended); then one COMMIT for the group, after which every
// caller whose fn returned nil returns: nil, or the commit's error (then
// none of the group's work exists). A caller whose fn failed returns at
// once with its own error. fn runs on a goroutine of the store's, not on
// the caller's (the caller waits for it): a panic of fn is raised again in
// the caller, and a runtime.Goexit of fn (t.FailNow) rolls fn's work back
// and makes Tx return an error. A call that finds the store idle begins and
// commits at once: grouping adds no timer and no wait. A group takes at
// most 64 callers and 4 MiB of message bodies; the callers left wait for the
// next group. Under SyncFull this is what spares one fsync per caller.
// Metrics, Receivers, wake-ups and the settlements of consumer.CompleteTx
// follow each fn's work: applied on the group's commit, dropped with a
// rolled-back savepoint. Every store method that writes runs through Tx and
// is grouped the same way. A transaction the caller opens itself on DB()
// (database/sql's BeginTx, sqlx, GORM, InTx) is not grouped: it has the
// connection to itself until it ends.
//
// Hand-off: before a group's COMMIT, the store claims for a Receive that
// sleeps on a queue the group made a message of claimable, and hands that
// Receive the messages once the commit succeeded (see Receive).
//
// Cancellation contract: statements run with tx.Context(), which is never
// cancelled, so a statement is never interrupted half-way. A callback that
// runs several statements should check ctx.Err() between them and return
// early; Tx cannot stop a callback that keeps running. While the store's
// connection is busy (a group, a transaction on DB(), a backup), Tx waits
// for its turn until ctx ends, and then returns ctx's error (wrapped)
// without running fn. Once fn has returned nil with ctx alive, its work is
// in the group's transaction and Tx waits for that commit whatever ctx
// does: at most the callbacks of the callers after it in the group and the
// COMMIT.
//
// The store has one connection and the transaction holds it until the
// group commits, so fn must not call the store's own methods: a call made
// with tx.Context() (or a context derived from it), such as st.Complete for
// an exactly-once effect or a nested st.Tx, fails at once with ErrInsideTx
// and changes nothing. Write with tx.SQL() instead (outbox.SendOne, the
// application's statements, savepoints of its own) and settle after Tx
// returns; fn must not commit or roll back tx.SQL(), which is the group's.
// A store call made inside fn with an unrelated context
// (context.Background()) cannot be recognised: it waits for its turn until
// its own ctx ends, which without a deadline is for ever.
//
// On PostgreSQL the store keeps a pool (Config.MaxConns) and Tx groups
// nothing: each call is a transaction of its own on a connection of the
// pool, up to the pool's size at once (PostgreSQL groups the WAL flushes
// of concurrent commits itself), and fn runs on the caller's goroutine.
// What differs: a call waits only for a free connection (ctx ends that
// wait as above); there are no savepoints, so undoing fn's work is the
// transaction's rollback; a runtime.Goexit of fn rolls fn's work back and
// goes on ending the caller's goroutine instead of making Tx return; and
// fn may call the store's methods with an unrelated context without
// waiting for ever, as long as the pool has another connection free.
// Metrics, Receivers, wake-ups, the hand-off and consumer.CompleteTx's
// settlements follow each transaction as above, kept apart from those of
// the transactions beside it.
func (s *Store) Tx(ctx context.Context, fn func(tx *Tx) error) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.txAlone {
		return s.txOwn(ctx, fn)
	}
	o := s.group.Do(ctx, fn)
	if o.Panicked != nil {
		panic(o.Panicked) // fn's panic, raised again in its caller after the rollback
	}
	return o.Err
}

// txAloneOnPool is how Store.Tx runs on a pool's engine (PostgreSQL): true,
// each call its own transaction on its own connection (txOwn); false, up
// to the pool's size of group commits at once (groupcommit.Parallel).
// Measured beside each other (BenchmarkTxPostgres, eight callers, five
// interleaved runs): 216 µs a call alone, 238 in parallel groups, 358 in
// one group at a time; the form kept is the faster.
var txAloneOnPool = true

// txOwn runs fn in a transaction of its own, on a connection of the pool,
// on the caller's goroutine: Store.Tx on a pool's engine. It keeps what a
// group does for its callers (the same hooks run: the hand-off before the
// commit, the records of the transaction's connection applied on its
// commit and dropped with its rollback) and Store.Tx's contract, but for
// a runtime.Goexit of fn, which ends the caller's goroutine after the
// rollback.
func (s *Store) txOwn(ctx context.Context, fn func(tx *Tx) error) error {
	h := txHooks{s}
	stmtCtx := context.WithoutCancel(ctx)
	// As InTx: the begin follows ctx while it waits for a connection, and
	// the transaction is not tied to ctx once begun.
	beginCtx, cancel := context.WithCancel(stmtCtx)
	defer cancel() // after the commit or rollback below: it ends nothing then
	stop := context.AfterFunc(ctx, cancel)
	tx, err := s.db.BeginTx(beginCtx, nil)
	if !stop() {
		if err == nil {
			_ = tx.Rollback()
		}
		return fmt.Errorf("begin: waiting for the connection: %w", ctx.Err())
	}
	if err != nil {
		if cerr := s.checkOpen(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("begin: %w", err)
	}
	done := false
	defer func() {
		if !done { // fn panicked (the panic goes on) or called runtime.Goexit
			_ = tx.Rollback()
		}
	}()
	ferr := h.Run(stmtCtx, tx, fn)
	done = true
	if ferr == nil {
		ferr = ctx.Err()
	}
	if ferr != nil {
		return errors.Join(ferr, ignoreDone(tx.Rollback()))
	}
	if err := h.Commit(tx); err != nil {
		if cerr := s.checkOpen(); cerr != nil && !errors.Is(err, cerr) {
			err = errors.Join(cerr, err)
		}
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

var _ groupcommit.Hooks[func(tx *Tx) error, stepMark] = txHooks{}

// txHooks is what the group commit of Store.Tx asks of the store
// (groupcommit.Hooks).
type txHooks struct{ s *Store }

// Begin begins a group's transaction on the store's connection. No ctx to
// wait with: the group is no caller's. database/sql ends the wait with an
// error when Close closes the handle.
func (h txHooks) Begin() (*sql.Tx, error) { return h.s.db.BeginTx(context.Background(), nil) }

// Run runs a caller's callback in tx, its ctx marked (ErrInsideTx) while it
// runs.
func (h txHooks) Run(ctx context.Context, tx *sql.Tx, fn func(tx *Tx) error) error {
	txCtx, end := txmark.With(ctx, &txmark.Mark{Store: h.s})
	defer end()
	return fn(&Tx{tx: tx, ctx: txCtx})
}

// stepMark is what the hooks had recorded of the open transaction when a
// step of a group commit began.
type stepMark struct {
	tally   tally.Mark
	settled int
}

// MarkStep records where the hook records of tx, the open transaction,
// stand, for UndoStep.
func (h txHooks) MarkStep(tx *sql.Tx) stepMark {
	k := h.s.keyOf(tx)
	return stepMark{settled: h.s.receivers.MarkInTx(k), tally: h.s.tally.MarkKey(k)}
}

// UndoStep drops what the hooks recorded since mark: the rows a step rolled
// back to its savepoint are not counted, and its settlements not applied,
// when the group commits. A wake-up it marked stays: waking a receiver for
// nothing costs one look, and a due bound lowered too far one early probe.
func (h txHooks) UndoStep(tx *sql.Tx, mark stepMark) {
	k := h.s.keyOf(tx)
	h.s.tally.UndoKey(k, mark.tally)
	h.s.receivers.UndoInTx(k, mark.settled)
}

// keyOf is the key under which the engine reports the records of tx, a
// transaction on the store's handle: 0 on the one connection of an engine
// that is not shared, the key of tx's connection on a pool.
func (s *Store) keyOf(tx *sql.Tx) uint64 {
	if !s.queues.shared {
		return 0
	}
	k, _ := driver.KeyOf(tx)
	return uint64(k)
}

// Commit commits a group's transaction. A Receive sleeps for a message the
// group made claimable: claim it for that Receive before the commit, hand
// it over after.
func (h txHooks) Commit(tx *sql.Tx) error {
	s := h.s
	reserved := s.handoffs.Reserve(s.notify.Marked)
	var claims []handoff.Claim[Message, ReceiveOptions]
	if len(reserved) > 0 {
		claims = handoff.ClaimFor(context.Background(), tx, reserved, s.claimHandoff)
	}
	err := tx.Commit()
	s.handoffs.End(reserved, claims, err == nil)
	return err
}

// Closed is ErrClosed once Close has begun.
func (h txHooks) Closed() error { return h.s.checkOpen() }

// ready is the preamble of every Store call that uses the connection:
// ErrClosed once Close has begun, ErrInsideTx for a ctx of an open Store.Tx
// or InTx transaction on this store's connection.
func (s *Store) ready(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if txmark.Inside(ctx, s, s.id, s.storeIDOf) {
		return fmt.Errorf("%w: use the transaction's SQL(), or call the store after the transaction", ErrInsideTx)
	}
	return nil
}

// storeIDOf asks the engine which store's handle tx, a transaction of
// InTx, is on.
func (s *Store) storeIDOf(ctx context.Context, tx any) (int64, error) {
	db, ok := tx.(driver.DBTX)
	if !ok {
		return 0, fmt.Errorf("%T runs no statement", tx)
	}
	return s.eng.StoreID(ctx, db)
}

// SQLTx is what InTx needs of a transaction: *sql.Tx and *sqlx.Tx have it.
type SQLTx interface {
	Commit() error
	Rollback() error
}

// InTx runs fn in one transaction that begin starts, with the rules of
// Store.Tx (a call of the store with fn's ctx fails with ErrInsideTx), for code that holds the store's handle (st.DB(), or sqlx's
// sqlx.NewDb(st.DB(), "sqlite")) rather than the *Store:
//
//	err := mqlite.InTx(ctx, st.DB().BeginTx, func(ctx context.Context, tx *sql.Tx) error { ... })
//	err := mqlite.InTx(ctx, dbx.BeginTxx, func(ctx context.Context, tx *sqlx.Tx) error { ... })
//
// It commits when fn returns nil and rolls back when fn returns an error
// (which InTx returns), when fn panics (the panic goes on after the
// rollback) and when ctx is cancelled before the commit, even if fn
// returned nil: then ctx's error is returned and nothing fn wrote exists.
// begin is given a context that ends with ctx while begin waits (for the
// store's connection), and never after begin returned, so that a wait
// honours ctx's deadline but the transaction is not tied to ctx: when ctx
// ends during the wait InTx returns ctx's error, wrapped, and fn never
// runs.
// fn gets the context to run its statements with: ctx's values without its
// cancellation, so that no statement is interrupted half-way on the store's
// only connection (see Store.Tx); a long fn should check the ctx given to
// InTx between statements. A begin error is returned wrapped ("begin: ...").
// Open the transaction on the store's handle: the outbox refuses any other
// (ErrNotAStore). The transaction is the caller's own, never part of a
// group commit of Store.Tx: it holds the connection alone until it ends.
func InTx[T SQLTx](ctx context.Context, begin func(context.Context, *sql.TxOptions) (T, error),
	fn func(ctx context.Context, tx T) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	stmtCtx := context.WithoutCancel(ctx)
	// The transaction watches the context begin was given for its whole
	// life (database/sql rolls it back when that context ends), so begin
	// gets one that follows ctx only while it waits: stop detaches it.
	beginCtx, cancel := context.WithCancel(stmtCtx)
	defer cancel() // after the commit or rollback below: it ends nothing then
	stop := context.AfterFunc(ctx, cancel)
	tx, err := begin(beginCtx, nil)
	if !stop() {
		// ctx ended while begin waited, or just as it returned: a begun
		// transaction is being rolled back (it keeps the connection).
		if err == nil {
			_ = tx.Rollback()
		}
		return fmt.Errorf("begin: waiting for the connection: %w", ctx.Err())
	}
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		return fmt.Errorf("begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			// fn panicked: roll back, then let the panic continue.
			_ = tx.Rollback()
		}
	}()
	fnCtx, end := txmark.With(stmtCtx, &txmark.Mark{Tx: tx})
	defer end() // a panicking fn's transaction ends too
	ferr := fn(fnCtx, tx)
	end()
	done = true
	if ferr != nil {
		return errors.Join(ferr, ignoreDone(tx.Rollback()))
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ignoreDone drops sql.ErrTxDone: a callback may have ended the transaction
// itself.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// oneKeyForTests, set by a test before Open, makes the store hear every
// report under key 0: one list of records for every transaction of the
// pool, as before the records were kept per transaction. It is the control
// of the tests that show a rollback beside a commit keeps to its own.
// noOpsForTests makes it drop what each change says made it
// (RowChange.Op): the control of the tests of the event counters.
var oneKeyForTests, noOpsForTests bool

// oneKey returns cfg, its reports all under key 0 when oneKeyForTests is
// set, its changes told without their Op when noOpsForTests is.
func (s *Store) oneKey(cfg driver.ConnConfig) driver.ConnConfig {
	if noOpsForTests {
		changed := cfg.Changed
		cfg.Changed = func(k driver.TxKey, c driver.RowChange) { c.Op = ""; changed(k, c) }
	}
	if !oneKeyForTests {
		return cfg
	}
	commit, rollback, changed, settling, created, dropped := cfg.Commit, cfg.Rollback, cfg.Changed, cfg.Settling, cfg.Created, cfg.Dropped
	cfg.Commit = func(driver.TxKey) { commit(0) }
	cfg.Rollback = func(driver.TxKey) { rollback(0) }
	cfg.Changed = func(_ driver.TxKey, c driver.RowChange) { changed(0, c) }
	cfg.Settling = func(_ driver.TxKey, op driver.Op, q string, seq int64, tok string) { settling(0, op, q, seq, tok) }
	cfg.Created = func(_ driver.TxKey, q string) { created(0, q) }
	cfg.Dropped = func(_ driver.TxKey, q string) { dropped(0, q) }
	return cfg
}

// committed applies what the transaction of key reported, which committed
// (ConnConfig.Commit).
func (s *Store) committed(key driver.TxKey) {
	s.tally.Commit(uint64(key))
	s.notify.Commit()
	s.receivers.Committed(uint64(key))
}

// rolledBack drops what the transaction of key reported, which rolled back
// (ConnConfig.Rollback).
func (s *Store) rolledBack(key driver.TxKey) {
	s.tally.Rollback(uint64(key))
	s.notify.Rollback()
	s.receivers.RolledBack(uint64(key))
}

// changed is the pre-update hook's report of a messages row in the
// transaction of key: the tally counts it, and the bytes it sends count
// toward the group commit's bound.
func (s *Store) changed(key driver.TxKey, c driver.RowChange) {
	s.tally.Change(uint64(key), tally.Change{Queue: c.Queue, Old: c.Old, New: c.New, Bytes: c.Bytes, Cause: causeOf(c.Op), Redelivered: c.Redelivered})
	if c.Old == "" {
		s.group.Wrote(c.Bytes)
	}
}

// settling records a settlement op of the delivery (queue, seq, token)
// inside the transaction of key (driver.ConnConfig.Settling): the tally's
// cause is set at once, like the store's own settlements set it (the tally
// applies its counts on commit only), and the registry of Receivers forgets
// the delivery when that transaction commits, never when it rolls back.
func (s *Store) settling(key driver.TxKey, op driver.Op, queue string, seq int64, token string) {
	s.tally.TagKey(uint64(key), causeOf(op))
	s.receivers.SettledInTx(uint64(key), queue, seq, token)
}

// causeOf maps a settlement to the tally's cause.
func causeOf(op driver.Op) tally.Cause {
	switch op {
	case driver.OpComplete:
		return tally.Complete
	case driver.OpAbandon, driver.OpRelease:
		return tally.Abandon
	case driver.OpReject:
		return tally.Reject
	case driver.OpClaim:
		return tally.Receive
	}
	return tally.None
}
