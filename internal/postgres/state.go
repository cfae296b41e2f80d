package postgres

// stateCompleted is the state of a completed message: settled, its row
// kept as the receipt of its completion (settled_at holds the moment)
// until the janitor turns it into a receipt row. No read of the store
// shows it. This file and schema/postgres.sql are the only places of the
// engine that spell it; statements name it through the fragments below.
const stateCompleted = "completed"

// settledSet is the assignment of a completion at the moment now (an SQL
// expression): the row becomes its completion's receipt, its token kept,
// without its body, a lease or a time to live.
func settledSet(now string) string {
	return `state = '` + stateCompleted + `', settled_at = ` + now + `, locked_until = 0, body = NULL, expires_at = 0`
}
