package engine

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqlite/mqlite/schema"
)

// planDB opens a fresh file with the schema and one queue "q", on the
// engine's own connection (the root package cannot be imported here).
func planDB(t *testing.T) DBTX {
	t.Helper()
	ctx := context.Background()
	db, release, err := openDB(ConnConfig{Path: filepath.Join(t.TempDir(), "plan.db"), BusyTimeoutMS: 1000,
		Now: func() int64 { return 1 }, Closing: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.Apply(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := CreateQueue(ctx, db, Queue{Name: "q", MaxDeliveryCount: 10, LockDurationMS: 30000}, 1); err != nil {
		t.Fatal(err)
	}
	return db
}

// explain returns the EXPLAIN QUERY PLAN details of query, one line each,
// with "COVERING INDEX" folded into "INDEX" (a covering index is still the
// index a test pins).
func explain(t testing.TB, db DBTX, query string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatalf("explain: %v", err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain: %v", err)
	}
	return strings.ReplaceAll(strings.Join(lines, "\n"), "COVERING INDEX", "INDEX")
}

// TestClaimPlanPinning fails when the claim stops seeking the active partial
// index, or when any head-of-line probe or sweep plans as a scan: query
// plans are behaviour (the O(n²) group backlog of MQLITE-22 must not return).
func TestClaimPlanPinning(t *testing.T) {
	t.Parallel()
	db := planDB(t)
	claimArgs := []any{"q", 1, 10, 30000, 32}
	for _, tc := range []struct {
		name  string
		query string
		args  []any
		want  []string
	}{
		{"claim", claimSQL, claimArgs, []string{
			"SEARCH m USING INDEX mqlite_msg_active (queue=?)",
			"SEARCH b USING INDEX mqlite_msg_group_flight (queue=? AND group_id=? AND id<?)",
		}},
		{"claim one", claimOneSQL, append(claimArgs, newToken()), []string{
			"SEARCH m USING INDEX mqlite_msg_active (queue=?)",
			"SEARCH b USING INDEX mqlite_msg_group_flight (queue=? AND group_id=? AND id<?)",
		}},
		{"still held", stillHeldSQL, []any{`[{"q":"q","s":1,"t":"x"}]`, "q", 1}, []string{
			"SEARCH m USING INTEGER PRIMARY KEY (rowid=?)",
		}},
		{"complete many", completeSQLs[4][0], []any{1, 1, "q", "t", 2, "q", "t", nil, nil, nil, nil, nil, nil}, []string{
			"SEARCH m USING INTEGER PRIMARY KEY (rowid=?)",
		}},
		{"complete many in bulk", completeSQLs[4][1], []any{1, 1, "q", "t", 2, "q", "t", nil, nil, nil, nil, nil, nil}, []string{
			"SEARCH m USING INTEGER PRIMARY KEY (rowid=?)",
		}},
		// The row to seek is the subquery that tells the store, run once.
		{"complete in a caller's transaction", completeTxSQL, []any{1, "q", "t"}, []string{
			"SEARCH mqlite_messages USING INTEGER PRIMARY KEY (rowid=?)",
			"SCALAR SUBQUERY 1",
		}},
		{"next due", nextDueSQL, []any{"q"}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_scheduled (queue=?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_locked (queue=?)",
		}},
		{"due probe", dueProbeSQL, []any{"q"}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_scheduled (queue=?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_locked (queue=?)",
		}},
		{"claim and delete", claimDeleteSQL, claimArgs, []string{
			"SEARCH m USING INDEX mqlite_msg_active (queue=?)",
		}},
		// With a byte budget, the running sum reads the candidates only.
		{"claim within a budget", claimBudgetSQL, append(claimArgs, 4096), []string{
			"SEARCH m USING INDEX mqlite_msg_active (queue=?)",
			"SEARCH b USING INDEX mqlite_msg_group_flight (queue=? AND group_id=? AND id<?)",
		}},
		{"claim and delete within a budget", claimDeleteBudgetSQL, append(claimArgs, 4096), []string{
			"SEARCH m USING INDEX mqlite_msg_active (queue=?)",
		}},
		{"promote due", promoteDueSQL, []any{"q", 1}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_scheduled (queue=? AND visible_at<?)",
		}},
		{"reap expired", reapExpiredSQL, []any{"q", 1, 10}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_locked (queue=? AND locked_until<?)",
		}},
		// The sweeps over every queue seek their partial index per queue
		// (or by deadline), so an idle sweep costs a few index seeks.
		{"reap all", reapAllSQL, []any{1, 10}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_locked (queue=? AND locked_until<?)",
		}},
		{"promote all", promoteAllSQL, []any{1, 10}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_scheduled (queue=? AND visible_at<?)",
		}},
		{"recover", recoverSQL, []any{1}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_locked (queue=?)",
		}},
		{"expire delete", expireDeleteSQL, []any{1, 10}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_ttl (expires_at>? AND expires_at<?)",
		}},
		{"expire dead-letter", expireDeadLetterSQL, []any{1, 10}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_ttl (expires_at>? AND expires_at<?)",
		}},
		{"stats", statsSQL, []any{"q"}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_active (queue=?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_group_live (queue=? AND group_id>?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_locked (queue=?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_scheduled (queue=?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_deferred (queue=?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_dead (queue=?)",
			"SEARCH mqlite_messages USING INTEGER PRIMARY KEY (rowid=?)",
		}},
		// The scrape's ages: one seek in each of two partial indexes (in
		// the claim index, one per priority).
		{"oldest", oldestSQL, []any{"q"}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_active (queue=? AND priority=?)",
			"SEARCH m USING INTEGER PRIMARY KEY (rowid=?)",
			"SEARCH mqlite_messages USING INDEX mqlite_msg_dead (queue=?)",
		}},
		// The janitor deletes in short batches found by index (receipts: the
		// first rows of the table in key order, a bounded read).
		{"janitor receipts of completed rows", compactSQL[0], []any{1, 10}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_settled (settled_at>? AND settled_at<?)",
		}},
		{"janitor completed rows", compactSQL[1], []any{1, 10}, []string{
			"SEARCH mqlite_messages USING INDEX mqlite_msg_settled (settled_at>? AND settled_at<?)",
		}},
		{"complete replay", completedReceipt, []any{"q", 1, "t", 1}, []string{
			"SEARCH mqlite_messages USING INTEGER PRIMARY KEY (rowid=?)",
		}},
		{"janitor attempts", janitorSQL[1], []any{1, 10}, []string{
			"SEARCH mqlite_receive_attempts USING INDEX mqlite_attempts_expires (expires_at<?)",
		}},
		{"janitor commit records", janitorSQL[2], []any{1, 10}, []string{
			"SEARCH mqlite_commits USING INDEX mqlite_commits_expires (expires_at<?)",
		}},
		{"janitor dedup chunk", dedupChunkEndSQL, []any{"", 0, 10, 1000}, []string{
			"SEARCH mqlite_dedup USING PRIMARY KEY ((queue,key)>(?,?))",
		}},
		{"janitor dedup last", dedupExpireLastSQL, []any{1, "", 0}, []string{
			"SEARCH mqlite_dedup USING PRIMARY KEY ((queue,key)>(?,?))",
		}},
		{"janitor dedup delete", dedupExpireSQL, []any{1, "", 0, "q", "k"}, []string{
			"SEARCH mqlite_dedup USING PRIMARY KEY ((queue,key)>(?,?) AND (queue,key)<(?,?))",
		}},
		{"dedup lookup of a chunk", chunkSQLs[4][1], []any{"q", "a", "b", "c", "d"}, []string{
			"SEARCH mqlite_dedup USING PRIMARY KEY (queue=? AND key=?)",
		}},
		{"dead letters by count", `SELECT count(*) FROM mqlite_messages WHERE queue = ?1 AND state = 'dead_lettered'`,
			[]any{"q"}, []string{"SEARCH mqlite_messages USING INDEX mqlite_msg_dead (queue=?)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explain(t, db, tc.query, tc.args...)
			// The claim reads mqlite_msg_active in its order (priority,
			// then id) and stops after Max: it never sorts the queue.
			if (tc.name == "claim" || tc.name == "claim one" || tc.name == "claim and delete") && strings.Contains(got, "TEMP B-TREE") {
				t.Errorf("the claim sorts:\n%s", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("plan lacks %q:\n%s", w, got)
				}
			}
			for _, line := range strings.Split(got, "\n") {
				// "SCAN per" reads the six rows stats computes; a VALUES
				// clause is the statement's own parameters; a subquery's
				// co-routine is the rows it found by index (the claim's
				// budget: at most Max of them).
				if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "CONSTANT ROW") &&
					!strings.Contains(line, "VIRTUAL TABLE") && !strings.HasSuffix(line, "-ROW VALUES CLAUSE") &&
					line != "SCAN per" && !strings.HasPrefix(line, "SCAN (subquery-") {
					t.Errorf("plan scans: %q\n%s", line, got)
				}
			}
		})
	}
}

// TestPurgeSeqsPlan: a purge of selected messages seeks each (through the
// state's partial index, by queue and seq), never scans the queue.
func TestPurgeSeqsPlan(t *testing.T) {
	t.Parallel()
	db := planDB(t)
	plan := explain(t, db, purgeSeqsSQL, "q", "dead_lettered", "[1,2,3]")
	if !strings.Contains(plan, "SEARCH mqlite_messages USING INDEX mqlite_msg_dead (queue=? AND id=?)") || strings.Contains(plan, "SCAN mqlite_messages") {
		t.Fatalf("plan:\n%s", plan)
	}
}
