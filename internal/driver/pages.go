package driver

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// ScanRow reads one Row from s, whose columns are, in the order of Row's
// fields: seq, state, delivery count, enqueued_at, expires_at, visible_at,
// MessageID, group (NULL for none), subject, properties, body, lock token,
// locked_until, dead-letter reason, description and moment, last error,
// priority and the history of failed attempts (NULL for none). Each
// engine's row statements list them so.
func ScanRow(s Scanner) (Row, error) {
	var c Row
	var gid, attempts sql.NullString
	err := s.Scan(&c.Seq, &c.State, &c.DeliveryCount, &c.EnqueuedAt, &c.ExpiresAt, &c.VisibleAt,
		&c.MessageID, &gid, &c.Subject, &c.Properties, &c.Body, &c.LockToken, &c.LockedUntil,
		&c.DeadLetterReason, &c.DeadLetterDescription, &c.DeadLetteredAt, &c.LastError, &c.Priority, &attempts)
	if gid.Valid {
		c.GroupID = &gid.String
	}
	if err == nil && attempts.Valid {
		c.Attempts, err = ParseAttempts(attempts.String)
	}
	return c, err
}

// QueryIDs runs query on db, whose one column is a message's id, and
// returns the ids in the order read.
func QueryIDs(ctx context.Context, db DBTX, query string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// PageRows reads a page from rows (ScanRow's columns) until they end or,
// when maxBytes is positive, until the sizes (Row.Size) of the page would
// pass it: the first row comes whatever its size, and no body is read
// past the page. full reports that the budget ended the page. It closes
// rows.
func PageRows(rows *sql.Rows, maxBytes int64) (page []Row, full bool, err error) {
	defer rows.Close()
	var total int64
	for rows.Next() {
		c, err := ScanRow(rows)
		if err != nil {
			return nil, false, err
		}
		if total += c.Size(); maxBytes > 0 && len(page) > 0 && total > maxBytes {
			return page, true, nil
		}
		page = append(page, c)
	}
	return page, false, rows.Err()
}

// FindPage is the page of Find from its window, the ids of the messages it
// examined in order, and rows, those of them that pass r's filters, at
// most r.Max in id order (ScanRow's columns). The next page starts after
// the last row when the page is full (r.Max rows, or r.MaxBytes), else
// after the window when it examined r.ScanMax messages; NextSeq is 0 when
// nothing is left to examine. It closes rows.
func FindPage(ids []int64, rows *sql.Rows, r FindRequest) (FindResult, error) {
	page, full, err := PageRows(rows, r.MaxBytes)
	if err != nil {
		return FindResult{}, err
	}
	out := FindResult{Rows: page, Scanned: len(ids)}
	switch {
	case full || (len(page) > 0 && len(page) == r.Max):
		out.NextSeq = page[len(page)-1].Seq + 1
	case len(ids) > 0 && len(ids) == r.ScanMax:
		out.NextSeq = ids[len(ids)-1] + 1
	}
	return out, nil
}

// Arms are an engine's statements, each listing the ids of one state's
// messages of a queue, that a page's window merges.
type Arms struct {
	Active, Locked, Scheduled, Deferred, Dead []string
}

// For returns the arms of a window over state: one state, or "" for
// every live one (all but dead_lettered and completed). Another state is
// an error.
func (a Arms) For(state string) ([]string, error) {
	switch state {
	case "":
		return slices.Concat(a.Active, a.Locked, a.Scheduled, a.Deferred), nil
	case "active":
		return a.Active, nil
	case "locked":
		return a.Locked, nil
	case "scheduled":
		return a.Scheduled, nil
	case "deferred":
		return a.Deferred, nil
	case "dead_lettered":
		return a.Dead, nil
	}
	return nil, fmt.Errorf("find: unknown state %q", state)
}
