package engine_test

import (
	"database/sql"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkBrowseBesideABigQueue pages through a queue of two messages
// beside a queue of 300,000 (the tenant layout where a page used to walk
// the other tenant's rows): Peek, Find without a state, and Find of one
// state. A page must cost what the small queue holds.
func BenchmarkBrowseBesideABigQueue(b *testing.B) {
	benchBrowse(b, 300_000, "")
}

// BenchmarkBrowseABacklog pages through a queue's own backlog of 100,000:
// one group's (all but its front held), then scheduled messages. A page of
// the group reads the page's members; a page of the scheduled messages
// reads the page's entries of their index by id.
func BenchmarkBrowseABacklog(b *testing.B) {
	for _, state := range []string{"held", "scheduled"} {
		b.Run(state, func(b *testing.B) { benchBrowse(b, 100_000, state) })
	}
}

// benchBrowse pages through "small" with n messages in "big" (ungrouped
// and active), or with n messages of its own in backlog ("held": one
// group; "scheduled": due in a year).
func benchBrowse(b *testing.B, n int, backlog string) {
	tb := testdb.Open(b, mqlite.Config{})
	tb.Queue(b, "big", mqlite.QueueOptions{})
	tb.Queue(b, "small", mqlite.QueueOptions{})
	for range 2 {
		err := tb.Store.Tx(bctx, func(tx *mqlite.Tx) error {
			_, err := outbox.SendOne(tx.Context(), tx.SQL(), "small", outbox.Message{Body: []byte("x")})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	switch backlog {
	case "":
		fillRaw(b, tb.Store.DB(), "big", n)
	case "held":
		fillRaw(b, tb.Store.DB(), "small", n)
		exec(b, tb.Store.DB(), `UPDATE mqlite_messages SET group_id = 'g', held = 1 WHERE queue = 'small'`)
		exec(b, tb.Store.DB(), `UPDATE mqlite_messages SET held = 0 WHERE id = (SELECT min(id) FROM mqlite_messages WHERE queue = 'small')`)
	case "scheduled":
		fillRaw(b, tb.Store.DB(), "small", n)
		exec(b, tb.Store.DB(), `UPDATE mqlite_messages SET state = 'scheduled', visible_at = 1e15 WHERE queue = 'small' AND id > 2`)
	}
	want, wantActive := min(n, 100), min(n, 100)
	switch backlog {
	case "":
		want, wantActive = 2, 2
	case "scheduled":
		wantActive = 2
	}
	for _, tc := range []struct {
		name string
		page func() (int, error)
	}{
		{"peek", func() (int, error) {
			ms, err := tb.Store.Peek(bctx, "small", mqlite.PeekParams{Max: 100})
			return len(ms), err
		}},
		{"find", func() (int, error) {
			res, err := tb.Store.Find(bctx, "small", mqlite.FindParams{Max: 100})
			return len(res.Messages), err
		}},
		{"find active", func() (int, error) {
			res, err := tb.Store.Find(bctx, "small", mqlite.FindParams{Max: 100, State: mqlite.StateActive})
			if len(res.Messages) == wantActive {
				return want, err
			}
			return len(res.Messages), err
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				if got, err := tc.page(); err != nil || got != want {
					b.Fatalf("%d messages, %v; want %d", got, err, want)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/page")
		})
	}
}

// exec runs one statement of a benchmark's setup.
func exec(b *testing.B, db *sql.DB, query string) {
	b.Helper()
	if _, err := db.Exec(query); err != nil {
		b.Fatal(err)
	}
}
