// Package mqlite is a reliable message queue and transactional outbox inside
// one SQLite file, in pure Go.
//
// Open a Store on a file, create queues, and send messages with
// [github.com/mqlite/mqlite/outbox] inside your own transaction, so that each
// message commits with your business rows or not at all. Receive them with
// peek-lock delivery (Store.Receive and the settlements, or
// [github.com/mqlite/mqlite/consumer.Loop]), which is at-least-once, fenced and
// idempotent to retry.
//
// # The store
//
//	st, err := mqlite.Open(ctx, "app.db", mqlite.Config{})
//	defer st.Close()
//	err = st.CreateQueue(ctx, "orders", mqlite.QueueOptions{})
//
// One file has one writer: Open takes an advisory lock on "<file>.lock" and a
// second Open of the file, in any process, fails with ErrDBLocked. The store
// holds exactly one SQLite connection (WAL mode, synchronous=NORMAL unless
// Config.Sync or MQLITE_SYNC=full say FULL); every statement of the process
// is serialized on it, which is what makes each claim atomic. Store.DB is
// that connection's *sql.DB, for the application's own tables. A file
// written by an incompatible mqlite is refused with ErrSchemaVersionMismatch
// and left untouched.
//
// # Sending
//
// outbox.SendOne and outbox.SendBatch write into the caller's *sql.Tx (or
// *sqlx.Tx, or the *sql.Tx behind a GORM transaction) on the store's
// connection; Store.Tx runs such a transaction for you. A resend with the
// same MessageID inside the queue's DedupWindow returns the original
// sequence number; the same id with another body is ErrDuplicateConflict.
// A message without a MessageID is deduplicated by its body only on a queue
// created with QueueOptions.DedupByBody (off by default).
//
// # Receiving
//
// Store.Receive claims messages: each is locked for the queue's LockDuration
// with a fresh 128-bit token, and its delivery count grows in the same
// statement. Complete, Abandon, Reject, Defer and Renew need that token and a
// lease that has not ended, or they return ErrLockLost; the exact same
// settlement retried after it succeeded succeeds again (a receipt, kept about
// 30 minutes). A message is never handed out more than MaxDeliveryCount
// times: the last lapsed or abandoned delivery dead-letters it. Messages with
// a GroupID (every message of a FIFO queue) are handed out one at a time, in
// order, within their group.
//
// # Time
//
// Every timestamp is epoch milliseconds from Config.Clock, the one entrance
// of time; Store.Clock returns it. Time reaches SQL by two routes:
//
//   - As a parameter: the store's own statements (claim, settle, renew,
//     sweeps, recovery, queue administration) read the clock in Go once the
//     connection is theirs and pass "now" as an argument.
//   - Through the SQL function mqlite_now(): outbox.SendOne and SendBatch run
//     on the caller's bare *sql.Tx, where the store cannot pass a parameter,
//     so the store's connection carries mqlite_now() (and
//     mqlite_max_message_bytes()), which read the same Clock and limit. A
//     transaction on any other connection lacks them and is refused with
//     ErrNotAStore.
//
// No timestamp a message, a lease, a receipt or a schedule stores, and no
// moment that is due, is read from the wall clock or SQLite's
// CURRENT_TIMESTAMP: all come from the Clock. The wall clock only measures
// how long a call waits or runs: Receive's Wait, Config.BusyTimeout, and
// the durations of spans and metrics. consumer.Loop asks its store for the
// clock (consumer.Store.Clock), so a Loop over a store with a fake clock needs
// no second one. Tests inject a fake clock and move it instead of sleeping.
//
// # Errors
//
// Errors are values: match them with errors.Is against the ErrXxx variables
// of this package. A validation error matches both ErrInvalidArgument and
// the sentinel of its field.
//
// # Cancellation
//
// Every call takes a context. A call whose context is done before it starts
// returns the context's error and changes nothing. Once a transaction runs on
// the store's connection, its statements are not interrupted half-way (an
// interrupted statement inside a transaction would wedge the only
// connection); Store.Tx instead rolls back when its context is cancelled
// before the commit. See Store.Tx.
//
// # Concurrency
//
// A Store is safe for concurrent use by many goroutines; they queue for its
// one connection, each until its context ends. A Store.Tx callback holds
// that connection: a store call made with its tx.Context() fails at once
// with ErrInsideTx. Close stops every goroutine the store started.
package mqlite
