package engine

import (
	"strings"
	"testing"
)

// TestBrowsePlans: every state filter of peek and find (each state, and
// the default every live state) reads the queue's ids from the states'
// partial indexes, seeking the queue, and then the page's rows by rowid;
// no plan walks the table, which holds every queue's rows.
func TestBrowsePlans(t *testing.T) {
	t.Parallel()
	db := planDB(t)
	const (
		active = "SEARCH mqlite_messages USING INDEX mqlite_msg_active (queue=? AND priority=? AND id>?)"
		// The held messages: the walk of the queue's groups, each group's
		// bound, and its members up to the bound.
		groups    = "SEARCH mqlite_messages USING INDEX mqlite_msg_group_live (queue=? AND group_id>?)"
		bound     = "SEARCH mqlite_messages USING INDEX mqlite_msg_group_live (queue=? AND group_id=? AND id>?)"
		held      = "SEARCH m USING INDEX mqlite_msg_group_live (queue=? AND group_id=? AND id>? AND id<?)"
		locked    = "SEARCH mqlite_messages USING INDEX mqlite_msg_locked (queue=?)"
		scheduled = "SEARCH mqlite_messages USING INDEX mqlite_msg_scheduled_id (queue=? AND id>?)"
		deferred  = "SEARCH mqlite_messages USING INDEX mqlite_msg_deferred (queue=? AND id>?)"
		dead      = "SEARCH mqlite_messages USING INDEX mqlite_msg_dead (queue=? AND id>?)"
		byRowid   = "SEARCH mqlite_messages USING INTEGER PRIMARY KEY (rowid=?)"
	)
	for _, tc := range []struct {
		state string
		want  []string
		// inOrder: every index the window reads is in id order, so it
		// sorts nothing and stops after the page (a scheduled backlog of
		// 100,000 is read a page at a time, not read whole and sorted).
		inOrder bool
	}{
		{"", []string{active, groups, bound, held, locked, scheduled, deferred}, false},
		{"active", []string{active, groups, bound, held}, false},
		{"locked", []string{locked}, false},
		{"scheduled", []string{scheduled}, true},
		{"deferred", []string{deferred}, true},
		{"dead_lettered", []string{dead}, true},
	} {
		window, err := windowSQL(tc.state)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []struct {
			name, sql string
			rowid     bool
		}{
			{"find window", window, false},
			{"peek", peekSQL(window), true},
		} {
			t.Run(q.name+" "+tc.state, func(t *testing.T) {
				got := explain(t, db, q.sql, "q", 1, 10, "", "", "", "", 10)
				want := tc.want
				if q.rowid {
					want = append([]string{byRowid}, want...)
				}
				for _, w := range want {
					if !strings.Contains(got, w) {
						t.Errorf("plan lacks %q:\n%s", w, got)
					}
				}
				if tc.inOrder && strings.Contains(got, "TEMP B-TREE") {
					t.Errorf("the window sorts:\n%s", got)
				}
				for _, line := range strings.Split(got, "\n") {
					// A subquery's co-routine is the ids found by index;
					// json_each reads one row's properties; groups is the
					// queue's groups, one seek each.
					if strings.HasPrefix(line, "SCAN ") && !strings.HasPrefix(line, "SCAN (subquery-") &&
						!strings.Contains(line, "VIRTUAL TABLE") && line != "SCAN groups" && line != "SCAN CONSTANT ROW" ||
						strings.Contains(line, "(rowid>?)") {
						t.Errorf("plan reads past the queue: %q\n%s", line, got)
					}
				}
			})
		}
	}
	// Find reads the rows of its window's ids, each by its rowid.
	if got := explain(t, db, findRowsSQL, "[1,2]", nil, nil, "", "", "", "", 10); !strings.Contains(got, byRowid) ||
		strings.Contains(got, "SCAN mqlite_messages") {
		t.Errorf("find rows plan:\n%s", got)
	}
	if _, err := windowSQL("completed"); err == nil {
		t.Error("a window of completed rows")
	}
}
