package engine

// StateCompleted is the state of a completed message: settled, kept as the
// receipt of its completion (settled_at holds the moment) until the
// janitor turns it into a receipt row. It is an internal state: no read of
// the store shows a completed message, so mqlite.State has no value for
// it. This file and schema/layout.sql are the only places that spell it;
// every statement names it through the fragments below.
const StateCompleted = "completed"

// notCompleted is the condition that leaves completed messages out of a
// read over a queue's rows that no state index bounds.
const notCompleted = `state <> '` + StateCompleted + `'`

// live is the condition of a message that still counts in its group: any
// state but dead_lettered and completed. It is, word for word, the WHERE of
// the index mqlite_msg_group_live and of the group triggers in
// schema/layout.sql, so that a query that names it can use that index.
const live = `state NOT IN ('dead_lettered', '` + StateCompleted + `')`

// inFlight is the condition of a group member b in flight: locked,
// deferred or scheduled, what keeps a later member of its group waiting.
// It is, word for word, the states of the WHERE of the index
// mqlite_msg_group_flight in schema/layout.sql, so that the claim's probe
// (alias b) can use that index. An OR chain, not an IN list: SQLite builds
// a constant IN list of three values into a temporary b-tree at every
// execution of the statement.
const inFlight = `(b.state = 'locked' OR b.state = 'deferred' OR b.state = 'scheduled')`

// settledSet is the assignment of a completion at the moment now (an SQL
// expression): the row becomes its completion's receipt (see
// completedReceipt), its token kept, without its body, a lease or a time to
// live.
func settledSet(now string) string {
	return `state = '` + StateCompleted + `', settled_at = ` + now + `, locked_until = 0, body = NULL, expires_at = 0`
}

// settledBefore is the condition of a completed message settled before the
// moment at (an SQL expression), for the janitor's index mqlite_msg_settled.
func settledBefore(at string) string {
	return `settled_at IS NOT NULL AND settled_at <= ` + at
}
