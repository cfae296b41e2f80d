package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
)

// TestClaimPlanPinning fails when the claim stops seeking the active partial
// index, or when any head-of-line probe or sweep plans as a scan: query
// plans are behaviour (the O(n²) group backlog of MQLITE-22 must not return).
func TestClaimPlanPinning(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Options{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	db := b.Store.DB()
	plan := func(t *testing.T, query string, args ...any) string {
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
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		// "COVERING INDEX" is still the index: compare on the index name.
		return strings.ReplaceAll(strings.Join(lines, "\n"), "COVERING INDEX", "INDEX")
	}
	claimArgs := []any{"q", 1, 10, 30000, "tok"}
	for _, tc := range []struct {
		name  string
		query string
		args  []any
		want  []string
	}{
		{"claim", engine.ClaimSQL, claimArgs, []string{
			"SEARCH m USING INDEX idx_msg_active (queue=?)",
			"SEARCH b USING INDEX idx_msg_group_locked (queue=? AND group_id=? AND id<?)",
			"SEARCH b USING INDEX idx_msg_group_deferred (queue=? AND group_id=? AND id<?)",
			"SEARCH b USING INDEX idx_msg_group_scheduled (queue=? AND group_id=? AND id<?)",
		}},
		{"claim and delete", engine.ClaimDeleteSQL, claimArgs[:3], []string{
			"SEARCH m USING INDEX idx_msg_active (queue=?)",
		}},
		{"promote due", engine.PromoteDueSQL, []any{"q", 1}, []string{
			"SEARCH messages USING INDEX idx_msg_scheduled (queue=? AND visible_at<?)",
		}},
		{"reap expired", engine.ReapExpiredSQL, []any{"q", 1, 10}, []string{
			"SEARCH messages USING INDEX idx_msg_locked (queue=? AND locked_until<?)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := plan(t, tc.query, tc.args...)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("plan lacks %q:\n%s", w, got)
				}
			}
			for _, line := range strings.Split(got, "\n") {
				if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "CONSTANT ROW") {
					t.Errorf("plan scans: %q\n%s", line, got)
				}
			}
		})
	}
}
