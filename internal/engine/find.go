package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mqlite/mqlite/internal/driver"
)

// idsOf is one state's ids of the queue ?1 from id ?2 on, read from the
// state's partial index: the index is named so that no plan can fall back
// to the table's rowid order, which reads every queue's rows.
func idsOf(index, cond string) string {
	return `SELECT id FROM mqlite_messages INDEXED BY ` + index + ` WHERE queue = ?1 AND id >= ?2 AND ` + cond
}

// liveGrouped is the condition of mqlite_msg_group_live: a live member of
// a group.
const liveGrouped = live + ` AND group_id IS NOT NULL`

// heldGroups walks the queue's groups with a live member, one seek of
// mqlite_msg_group_live each (groups), and bounds each group's part of a
// window: the id of its ?3-th live member from ?2 on (or the largest id),
// since a window of ?3 ids holds no more of one group (bounds).
const heldGroups = `WITH RECURSIVE groups(g) AS (
		SELECT (SELECT group_id FROM mqlite_messages INDEXED BY mqlite_msg_group_live
			WHERE queue = ?1 AND ` + liveGrouped + ` ORDER BY group_id LIMIT 1)
		UNION ALL
		SELECT (SELECT group_id FROM mqlite_messages INDEXED BY mqlite_msg_group_live
			WHERE queue = ?1 AND ` + liveGrouped + ` AND group_id > groups.g ORDER BY group_id LIMIT 1)
		FROM groups WHERE groups.g IS NOT NULL),
	bounds(g, last) AS (
		SELECT g, coalesce((SELECT id FROM mqlite_messages INDEXED BY mqlite_msg_group_live
			WHERE queue = ?1 AND group_id = groups.g AND id >= ?2 AND ` + liveGrouped + `
			ORDER BY id LIMIT 1 OFFSET ?3 - 1), 9223372036854775807)
		FROM groups WHERE g IS NOT NULL)
	`

// The ids of a queue per state. The active, scheduled (by id), deferred
// and dead-letter indexes are in id order: their scan stops after the
// page. The locked one is in lease order: its scan reads the queue's
// locked entries (the index alone, never a row) and sorts them.
// A held message (active, behind its group) has no index of its own: it is
// found through mqlite_msg_group_live, by group then id, among the first
// ?3 live members of each group from ?2 on (heldGroups), whose rows it
// reads for the state.
var (
	activeIDs = activeByPriority()
	heldIDs   = `SELECT m.id FROM bounds CROSS JOIN mqlite_messages m INDEXED BY mqlite_msg_group_live
		WHERE m.queue = ?1 AND m.group_id = bounds.g AND m.id >= ?2 AND m.id <= bounds.last
		  AND ` + liveGrouped + `
		  AND m.state = 'active' AND m.held = 1`
	lockedIDs    = idsOf("mqlite_msg_locked", `state = 'locked'`)
	scheduledIDs = idsOf("mqlite_msg_scheduled_id", `state = 'scheduled'`)
	deferredIDs  = idsOf("mqlite_msg_deferred", `state = 'deferred'`)
	deadIDs      = idsOf("mqlite_msg_dead", `state = 'dead_lettered'`)
	windowArms   = driver.Arms{Active: []string{activeIDs, heldIDs}, Locked: []string{lockedIDs},
		Scheduled: []string{scheduledIDs}, Deferred: []string{deferredIDs}, Dead: []string{deadIDs}}
)

// activeByPriority is the claimable ids of the queue ?1 from id ?2 on: one
// arm per priority, highest first, each a range of mqlite_msg_active (which
// orders a queue's entries by priority, then id) in id order, so that the
// window merges them (UNION ALL) where one scan of the queue's entries in
// priority order would have to be read whole and sorted.
func activeByPriority() string {
	arms := make([]string, 0, driver.MaxPriority+1)
	for p := driver.MaxPriority; p >= 0; p-- {
		arms = append(arms, idsOf("mqlite_msg_active", fmt.Sprintf(`priority = %d AND state = 'active' AND held = 0`, p)))
	}
	return strings.Join(arms, "\n\tUNION ALL ")
}

// windowSQL lists the ids of the queue ?1 in state from id ?2 on, in id
// order, at most ?3 of them: the states' index scans, each sorted by id
// where its index is not, merged (UNION ALL: a message is in one state)
// and cut by the LIMIT, so that nothing of another queue is read. state is one state, or "" for
// every live one (all but dead_lettered and completed).
func windowSQL(state string) (string, error) {
	arms, err := windowArms.For(state)
	if err != nil {
		return "", err
	}
	head := ""
	if arms[0] == activeIDs {
		head = heldGroups // the active and live windows read held messages
	}
	return head + strings.Join(arms, "\n\tUNION ALL ") + "\n\tORDER BY id LIMIT ?3", nil
}

// findRowsSQL reads the rows of the window's ids (?1, a JSON array), each
// by its rowid, and keeps those that pass the filters (?4 subject prefix,
// ?5 MessageID, ?6 and ?7 a property's key and value; the empty string for
// none), at most ?8. ?2 and ?3 are not read.
const findRowsSQL = `SELECT ` + returning + ` FROM mqlite_messages
		WHERE id IN (SELECT value FROM json_each(?1))
		  AND (?4 = '' OR substr(coalesce(subject, ''), 1, length(?4)) = ?4)
		  AND (?5 = '' OR message_id = ?5)
		  AND (?6 = '' OR EXISTS (SELECT 1 FROM json_each(mqlite_messages.properties) p WHERE p.key = ?6 AND p.value = ?7))
		ORDER BY id LIMIT ?8`

// Find reads a page of r: first the window of at most r.ScanMax messages
// of the queue in r.State from r.FromSeq (ids only, from the indexes),
// then the rows of the window that pass the other filters, at most r.Max
// of them within r.MaxBytes. The state is in the statement, the others
// are parameters.
func Find(ctx context.Context, db DBTX, r FindRequest) (FindResult, error) {
	window, err := windowSQL(r.State)
	if err != nil {
		return FindResult{}, err
	}
	ids, err := driver.QueryIDs(ctx, db, window, r.Queue, r.FromSeq, r.ScanMax)
	if err != nil {
		return FindResult{}, fmt.Errorf("find: %w", err)
	}
	if len(ids) == 0 {
		return FindResult{}, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return FindResult{}, fmt.Errorf("find: %w", err)
	}
	rows, err := db.QueryContext(ctx, findRowsSQL, string(list), nil, nil, r.SubjectPrefix, r.MessageID, r.PropertyKey, r.PropertyValue, r.Max)
	if err != nil {
		return FindResult{}, fmt.Errorf("find: %w", err)
	}
	out, err := driver.FindPage(ids, rows, r)
	if err != nil {
		return FindResult{}, fmt.Errorf("find: %w", err)
	}
	return out, nil
}
