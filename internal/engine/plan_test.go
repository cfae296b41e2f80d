package engine_test

import (
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
		return testdb.Plan(t, db, query, args...)
	}
	claimArgs := []any{"q", 1, 10, 30000, 32}
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
		{"claim one", engine.ClaimOneSQL, claimArgs, []string{
			"SEARCH m USING INDEX idx_msg_active (queue=?)",
			"SEARCH b USING INDEX idx_msg_group_locked (queue=? AND group_id=? AND id<?)",
		}},
		{"due probe", engine.DueProbeSQL, []any{"q", 1}, []string{
			"SEARCH messages USING INDEX idx_msg_scheduled (queue=? AND visible_at<?)",
			"SEARCH messages USING INDEX idx_msg_locked (queue=? AND locked_until<?)",
		}},
		{"claim and delete", engine.ClaimDeleteSQL, claimArgs, []string{
			"SEARCH m USING INDEX idx_msg_active (queue=?)",
		}},
		{"promote due", engine.PromoteDueSQL, []any{"q", 1}, []string{
			"SEARCH messages USING INDEX idx_msg_scheduled (queue=? AND visible_at<?)",
		}},
		{"reap expired", engine.ReapExpiredSQL, []any{"q", 1, 10}, []string{
			"SEARCH messages USING INDEX idx_msg_locked (queue=? AND locked_until<?)",
		}},
		// The sweeps over every queue seek their partial index per queue
		// (or by deadline), so an idle sweep costs a few index seeks.
		{"reap all", engine.ReapAllSQL, []any{1, 10}, []string{
			"SEARCH messages USING INDEX idx_msg_locked (queue=? AND locked_until<?)",
		}},
		{"promote all", engine.PromoteAllSQL, []any{1, 10}, []string{
			"SEARCH messages USING INDEX idx_msg_scheduled (queue=? AND visible_at<?)",
		}},
		{"recover", engine.RecoverSQL, []any{1}, []string{
			"SEARCH messages USING INDEX idx_msg_locked (queue=?)",
		}},
		{"expire delete", engine.ExpireDeleteSQL, []any{1, 10}, []string{
			"SEARCH messages USING INDEX idx_msg_ttl (expires_at>? AND expires_at<?)",
		}},
		{"expire dead-letter", engine.ExpireDeadLetterSQL, []any{1, 10}, []string{
			"SEARCH messages USING INDEX idx_msg_ttl (expires_at>? AND expires_at<?)",
		}},
		{"dead letters by count", `SELECT count(*) FROM messages WHERE queue = ?1 AND state = 'dead_lettered'`,
			[]any{"q"}, []string{"SEARCH messages USING INDEX idx_msg_dead (queue=?)"}},
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
