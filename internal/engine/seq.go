package engine

import "strings"

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

// dedupParams is how many parameters one row of dedupSQL binds.
const dedupParams = 3

// dedupSQL returns the insert of n dedup rows of the queue ?1, whose window
// is ?2 ms from now, from (key, seq, content_key) rows of anonymous
// parameters; a padding row is all NULL and writes none. A send writes the
// dedup rows of its messages with it, in the same transaction: one
// statement for a chunk of a batch, where a trigger ran a program and read
// the queue for every message.
func dedupSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT OR REPLACE INTO mqlite_dedup (queue, key, seq, content_key, expires_at)
	SELECT ?1, column1, column2, column3, (SELECT mqlite_now()) + ?2 FROM (VALUES `)
	row := "(?" + strings.Repeat(", ?", dedupParams-1) + ")"
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(`) WHERE column1 IS NOT NULL`)
	return b.String()
}

// dedupSQLs holds dedupSQL for every power of two up to maxChunk.
var dedupSQLs = bySize(maxChunk, dedupSQL)
