package postgres

import (
	"github.com/mqlite/mqlite/internal/driver"
)

// historyOf is how many failed deliveries a statement on db keeps in each
// message's history: its store's ConnConfig.AttemptHistory (0 or less
// keeps none), or driver.DefaultAttemptHistory on a handle of no store.
func historyOf(db driver.DBTX) int {
	if st := storeOf(db); st != nil {
		return st.cfg.AttemptHistory
	}
	return driver.DefaultAttemptHistory
}

// attemptSet is the assignment that appends the attempt (at, error,
// worker: SQL expressions, the text ones already cut to their bounds) to
// the history of the row a failure updates, keeping the last n (an SQL
// integer): ", attempts = ...". With n of 0 or less the history stays as
// it is. The history is the row's own column, so the statement that
// updates the row (holding its lock) is the one read-modify-write: two
// failures of one delivery never both append. It is stored as text, the
// JSON array driver.ParseAttempts reads.
func attemptSet(at, error, worker, n string) string {
	return `, attempts = CASE WHEN ` + n + `::int <= 0 THEN attempts ELSE (
	SELECT jsonb_agg(e ORDER BY i)::text FROM (
		SELECT e, i FROM jsonb_array_elements(coalesce(attempts::jsonb, '[]'::jsonb) ||
			jsonb_build_array(jsonb_build_object('at', ` + at + `::bigint, 'error', ` + error + `::text, 'worker', ` + worker + `::text)))
			WITH ORDINALITY AS a(e, i)
		ORDER BY i DESC LIMIT ` + n + `::int) last) END`
}

// leaseExpired is the error of a lapsed lease's attempt, as SQL.
const leaseExpired = "'" + driver.AttemptLeaseExpired + "'"

// abandonError is the error an Abandon records: its reason, cut.
func abandonError(s driver.Settlement) string {
	return driver.Cut(s.LastError, driver.MaxAttemptErrorLen)
}

// rejectError is the error a Reject records: its reason, and its
// description after a colon when it has one, cut.
func rejectError(s driver.Settlement) string {
	e := s.Reason
	if s.Description != "" {
		e += ": " + s.Description
	}
	return driver.Cut(e, driver.MaxAttemptErrorLen)
}
