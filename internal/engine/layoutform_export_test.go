package engine

import (
	"fmt"
	"strings"
)

// LayoutForm is one form of the messages layout that BenchmarkLayoutForms
// measures beside today's: the DDL (schema/layout.sql transformed) and the
// text of every statement of the per-message path, the engine's own where
// the form keeps them.
type LayoutForm struct {
	Name string
	// DDL is the whole layout of a fresh file.
	DDL string
	// InsertOne is insertMessage; InsertChunk the multi-row insert of n
	// messages (chunkSQL), NextSeq the seq the first of them gets.
	InsertOne   string
	InsertChunk func(n int) string
	NextSeq     string
	// ClaimOne is claimOneSQL (scanned by ScanClaimed); ClaimMany
	// claimSQL (scanned by ScanRow).
	ClaimOne, ClaimMany string
	// CompleteOne is the completion of one delivery (?1 seq, ?2 queue, ?3
	// token, ?4 now); ReceiptOne, when not empty, the receipt it writes
	// beside (?1 queue, ?2 seq, ?3 token, ?4 expires_at).
	CompleteOne, ReceiptOne string
	// CompleteMany is completeSQL(n, true) and ReceiptMany receiptSQL(n):
	// the bulk completion of CompleteMany, the same in every form.
	CompleteMany func(n int) string
	ReceiptMany  func(n int) string
	// Compact is the janitor's turning of completed rows into receipt
	// rows (compactSQL), empty when the form keeps no completed row.
	Compact [2]string
}

// The engine's values the benchmark needs.
var (
	ScanClaimed  = scanClaimed
	ScanRow      = scanRow
	NewToken     = newToken
	ChunkOf      = chunkOf
	ReceiptTTL   = int64(ReceiptTTLMS)
	LayoutChunks = maxChunk
	Explain      = explain
)

// must replaces old by new in s and panics when s does not hold old: a
// form that silently kept today's text would measure nothing.
func must(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic(fmt.Sprintf("layout form: %q not found", old))
	}
	return strings.ReplaceAll(s, old, new)
}

// dropDDL removes the statement that begins with head (an index's or a
// trigger's CREATE) from the layout ddl.
func dropDDL(ddl, head string) string {
	i := strings.Index(ddl, head)
	if i < 0 {
		panic(fmt.Sprintf("layout form: %q not found", head))
	}
	end := ";\n"
	if strings.HasPrefix(head, "CREATE TRIGGER") {
		end = "\nEND;\n"
	}
	j := strings.Index(ddl[i:], end)
	return ddl[:i] + ddl[i+j+len(end):]
}

// dropGroupMoves removes the group triggers on an update of a message's
// state from the layout ddl: mqlite_group_state, and the view
// mqlite_group_moves with its trigger mqlite_group_move.
func dropGroupMoves(ddl string) string {
	for _, head := range []string{"CREATE TRIGGER mqlite_group_state ", "CREATE TRIGGER mqlite_group_move ", "CREATE VIEW mqlite_group_moves "} {
		ddl = dropDDL(ddl, head)
	}
	return ddl
}

// LayoutForms returns today's form and the candidates, from the layout
// text v13 (schema/layout.sql):
//
//   - v13: today (the group triggers on an update of the state one
//     program behind the view mqlite_group_moves, which a one-line
//     trigger runs for a grouped message alone).
//   - indexes: the state indexes consolidated: the scheduled-by-id,
//     deferred and dead indexes made one (queue, state, id) index over
//     the three parked states, and the group probe on the live-group
//     index (no group_flight): seven indexes on the messages where ten.
//   - receipt: a completion deletes the row and writes its receipt row,
//     one at a time as in bulk; no completed rows, no settled index, no
//     janitor pass turning them.
//   - nogroup: the group machinery gone (held always 0, no group
//     triggers, group indexes or claim probe): the most that a group row
//     per (queue, group) could save an ungrouped message.
//   - lean: the three together.
//   - idx-nogroup: indexes and nogroup.
//   - narrow: a completion that writes only the state and settled_at
//     (the body and the TTL kept until the janitor deletes the row).
//   - idx-nogroup-narrow: the three.
//   - flow: one index (flowIndex) in place of the claim's
//     (mqlite_msg_active), the leases' (mqlite_msg_locked) and the
//     janitor's (mqlite_msg_settled).
//   - flow-nogroup: flow and nogroup.
//   - notriggers: the group triggers and their view gone, the rest of
//     the group machinery kept (an ablation: what the triggers cost).
func LayoutForms(v13 string) []LayoutForm {
	base := LayoutForm{
		Name: "v13", DDL: v13, InsertOne: insertMessage,
		InsertChunk: func(n int) string { return chunkSQLs[n][0] }, NextSeq: nextSeqSQL,
		ClaimOne: claimOneSQL, ClaimMany: claimSQL,
		CompleteOne:  settleSQL[OpComplete],
		CompleteMany: func(n int) string { return completeSQLs[n][1] },
		ReceiptMany:  func(n int) string { return receiptSQLs[n] },
		Compact:      compactSQL,
	}
	indexes := func(f LayoutForm) LayoutForm {
		f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_scheduled_id ")
		f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_deferred ")
		f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_dead ")
		f.DDL = must(f.DDL, "CREATE INDEX mqlite_msg_ttl ",
			"CREATE INDEX mqlite_msg_parked ON mqlite_messages (queue, state, id, body_len, dead_lettered_at)"+
				" WHERE state = 'deferred' OR state = 'dead_lettered' OR state = 'scheduled';\nCREATE INDEX mqlite_msg_ttl ")
		if strings.Contains(f.DDL, "CREATE INDEX mqlite_msg_group_flight ") {
			f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_group_flight ")
			probe := "INDEXED BY mqlite_msg_group_live"
			f.ClaimOne = must(f.ClaimOne, "INDEXED BY mqlite_msg_group_flight", probe)
			f.ClaimMany = must(f.ClaimMany, "INDEXED BY mqlite_msg_group_flight", probe)
			f.ClaimOne = must(f.ClaimOne, "AND "+inFlight, "AND b."+live+" AND "+inFlight)
			f.ClaimMany = must(f.ClaimMany, "AND "+inFlight, "AND b."+live+" AND "+inFlight)
		}
		return f
	}
	receipt := func(f LayoutForm) LayoutForm {
		f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_settled ")
		f.CompleteOne = `DELETE FROM mqlite_messages WHERE ` + fence
		f.ReceiptOne = `INSERT OR REPLACE INTO mqlite_settlement_receipts
		(queue, seq, lock_token, operation, args, expires_at) VALUES (?1, ?2, unhex(?3), 'complete', '', ?4)`
		f.Compact = [2]string{}
		return f
	}
	nogroup := func(f LayoutForm) LayoutForm {
		for _, head := range []string{"CREATE INDEX mqlite_msg_group_flight ", "CREATE INDEX mqlite_msg_group_live ",
			"CREATE TRIGGER mqlite_group_release_on_delete "} {
			if strings.Contains(f.DDL, head) {
				f.DDL = dropDDL(f.DDL, head)
			}
		}
		f.DDL = dropGroupMoves(f.DDL)
		f.DDL = strings.ReplaceAll(f.DDL, "WHERE state = 'active' AND held = 0;", "WHERE state = 'active';")
		f.InsertOne = must(f.InsertOne, `?3 IS NOT NULL AND EXISTS (SELECT 1 FROM mqlite_messages b WHERE b.queue = ?1 AND b.`+live+` AND b.group_id = ?3)`, "0")
		i := strings.Index(f.ClaimOne, "\n\tAND (m.group_id IS NULL OR NOT EXISTS")
		j := strings.Index(f.ClaimOne[i:], "b.id < m.id))")
		probe := f.ClaimOne[i : i+j+len("b.id < m.id))")]
		f.ClaimOne = must(f.ClaimOne, probe, "")
		f.ClaimMany = must(f.ClaimMany, probe, "")
		f.ClaimOne = strings.ReplaceAll(f.ClaimOne, "m.queue = ?1 AND m.state = 'active' AND m.held = 0", "m.queue = ?1 AND m.state = 'active'")
		f.ClaimMany = strings.ReplaceAll(f.ClaimMany, "m.queue = ?1 AND m.state = 'active' AND m.held = 0", "m.queue = ?1 AND m.state = 'active'")
		return f
	}
	narrow := func(f LayoutForm) LayoutForm {
		f.CompleteOne = must(f.CompleteOne, settledSet("?4"), `state = '`+StateCompleted+`', settled_at = ?4`)
		return f
	}
	// flow: the claim's, the leases' and the completions' indexes made one
	// (flowIndex), so that a claim and a completion each move one entry
	// between neighbouring ranges of one index.
	flow := func(f LayoutForm) LayoutForm {
		f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_active ")
		f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_locked ")
		f.DDL = dropDDL(f.DDL, "CREATE INDEX mqlite_msg_settled ")
		f.DDL = must(f.DDL, "CREATE INDEX mqlite_msg_ttl ", flowIndex+"\nCREATE INDEX mqlite_msg_ttl ")
		for _, q := range []*string{&f.ClaimOne, &f.ClaimMany} {
			*q = must(*q, "m.queue = ?1 AND m.state = 'active' AND m.held = 0", "m.queue = ?1 AND "+flowCode("m.")+" = 2 AND m.state = 'active'")
			*q = must(*q, "ORDER BY m.priority DESC, m.id", "ORDER BY "+flowKey("m.")+", m.id")
		}
		settledFlow := `SELECT id FROM mqlite_messages WHERE queue = 'q' AND ` + flowCode("") + ` = 0 AND state = 'completed'
		AND settled_at <= ?1 ORDER BY ` + flowKey("") + `, id LIMIT ?2`
		f.Compact = [2]string{must(f.Compact[0], settled, settledFlow), must(f.Compact[1], settled, settledFlow)}
		return f
	}
	// notriggers: the group triggers gone, the group indexes and the
	// claim's probe kept (what of nogroup the triggers are).
	notriggers := func(f LayoutForm) LayoutForm {
		f.DDL = dropDDL(f.DDL, "CREATE TRIGGER mqlite_group_release_on_delete ")
		f.DDL = dropGroupMoves(f.DDL)
		return f
	}
	named := func(name string, f LayoutForm) LayoutForm { f.Name = name; return f }
	return []LayoutForm{
		base,
		named("indexes", indexes(base)),
		named("receipt", receipt(base)),
		named("nogroup", nogroup(base)),
		named("lean", nogroup(receipt(indexes(base)))),
		named("idx-nogroup", nogroup(indexes(base))),
		named("narrow", narrow(base)),
		named("idx-nogroup-narrow", narrow(nogroup(indexes(base)))),
		named("flow", flow(base)),
		named("flow-nogroup", nogroup(flow(base))),
		named("notriggers", notriggers(base)),
	}
}

// nextSeqSQL reads the seq the next message gets.
const nextSeqSQL = `SELECT ` + nextSeq

// flowCode is the range of a message in mqlite_msg_flow: the completed
// first, then the locked, then the claimable, then the held; p qualifies
// the columns ("m." or "").
func flowCode(p string) string {
	return `(CASE WHEN ` + p + `state = 'active' AND ` + p + `held = 0 THEN 2 WHEN ` + p + `state = 'locked' THEN 1 WHEN ` +
		p + `state = 'completed' THEN 0 ELSE 3 END)`
}

// flowKey orders a range of mqlite_msg_flow: the lease end of a locked
// message, the moment of a completed one, and the priority (highest
// first) of a claimable one, which id then orders.
func flowKey(p string) string {
	return `(CASE WHEN ` + p + `state = 'locked' THEN ` + p + `locked_until WHEN ` + p + `state = 'completed' THEN ` +
		p + `settled_at ELSE -` + p + `priority END)`
}

// flowIndex is the one index of the flow form: a queue's completed
// messages, then its leases, then its claimable messages, so that the
// entry a claim moves (the head of the claimable, to the end of the
// leases) and the one a completion moves (a lease, to the end of the
// completed) stay in neighbouring ranges, most often one page.
var flowIndex = `CREATE INDEX mqlite_msg_flow ON mqlite_messages (queue, ` + flowCode("") + `, ` + flowKey("") +
	`, id, body_len) WHERE state = 'active' OR state = 'locked' OR state = 'completed';`
