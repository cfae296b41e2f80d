package engine

// nextSeq is the sequence number of the next message a statement inserts,
// as a scalar subquery (SQLite evaluates it once per statement): one past
// the newest message and past the floor that mqlite_sequence keeps of the
// newest ever deleted, so that a number is never given twice. A send
// thus writes no sequence page: the floor is written only when the newest
// message is deleted (the trigger mqlite_sequence_floor), where
// AUTOINCREMENT rewrote its sqlite_sequence row in every send's
// transaction.
const nextSeq = `(SELECT max(coalesce((SELECT max(id) FROM mqlite_messages), 0),
	coalesce((SELECT floor FROM mqlite_sequence WHERE id = 1), 0)) + 1)`
