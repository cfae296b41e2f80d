package engine

import (
	"context"
	"fmt"
)

// FindRequest is one page of Find: the messages of Queue from FromSeq on
// that match every filter set, among at most ScanMax messages of the queue
// examined.
type FindRequest struct {
	Queue    string
	FromSeq  int64
	Max      int
	MaxBytes int64 // as PeekRequest's
	// State is one state, or "" for every state but dead_lettered. The
	// caller validates it: it is written into the statement, so that the
	// planner can pick the state's partial index.
	State string
	// SubjectPrefix, MessageID and Property filter when not empty.
	SubjectPrefix string
	MessageID     string
	PropertyKey   string
	PropertyValue string
	// ScanMax bounds the messages of the queue (in State) the page
	// examines: the filters on subject, MessageID and property have no
	// index, so a page reads at most ScanMax index entries and returns
	// where it stopped.
	ScanMax int
}

// FindResult is a page of Find. NextSeq is where the next page starts, 0
// when the queue has no more messages to examine.
type FindResult struct {
	Rows    []Row
	NextSeq int64
	Scanned int
}

// stateCond is the statement's condition on the state.
func stateCond(state string) string {
	if state == "" {
		return `state NOT IN ('dead_lettered', 'completed')`
	}
	return `state = '` + state + `'`
}

// Find reads a page of r: first the window of at most r.ScanMax messages
// of the queue in r.State from r.FromSeq (ids only), then the rows of the
// window that pass the other filters, at most r.Max of them within
// r.MaxBytes. The state is in the statement, the others are parameters.
func Find(ctx context.Context, db DBTX, r FindRequest) (FindResult, error) {
	switch r.State {
	case "", "active", "scheduled", "locked", "deferred", "dead_lettered":
	default:
		return FindResult{}, fmt.Errorf("find: unknown state %q", r.State)
	}
	window := `SELECT id FROM mqlite_messages WHERE queue = ?1 AND id >= ?2 AND ` + stateCond(r.State) + ` ORDER BY id LIMIT ?3`
	var out FindResult
	var last int64
	if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(max(id), 0) FROM (`+window+`)`,
		r.Queue, r.FromSeq, r.ScanMax).Scan(&out.Scanned, &last); err != nil {
		return FindResult{}, fmt.Errorf("find: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT `+returning+` FROM mqlite_messages
		WHERE id IN (`+window+`)
		  AND (?4 = '' OR substr(coalesce(subject, ''), 1, length(?4)) = ?4)
		  AND (?5 = '' OR message_id = ?5)
		  AND (?6 = '' OR EXISTS (SELECT 1 FROM json_each(mqlite_messages.properties) p WHERE p.key = ?6 AND p.value = ?7))
		ORDER BY id LIMIT ?8`,
		r.Queue, r.FromSeq, r.ScanMax, r.SubjectPrefix, r.MessageID, r.PropertyKey, r.PropertyValue, r.Max)
	if err != nil {
		return FindResult{}, fmt.Errorf("find: %w", err)
	}
	defer rows.Close()
	var total int64
	full := false
	for rows.Next() {
		c, err := scanRow(rows)
		if err != nil {
			return FindResult{}, fmt.Errorf("find: %w", err)
		}
		if total += c.Size(); r.MaxBytes > 0 && len(out.Rows) > 0 && total > r.MaxBytes {
			full = true
			break
		}
		out.Rows = append(out.Rows, c)
	}
	if err := rows.Err(); err != nil {
		return FindResult{}, fmt.Errorf("find: %w", err)
	}
	switch {
	case full || len(out.Rows) == r.Max:
		out.NextSeq = out.Rows[len(out.Rows)-1].Seq + 1
	case out.Scanned == r.ScanMax:
		out.NextSeq = last + 1
	}
	return out, nil
}
