package engine_test

import (
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
	fillRaw(b, tb.Store.DB(), "big", 300_000)
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
			return len(res.Messages), err
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				if n, err := tc.page(); err != nil || n != 2 {
					b.Fatalf("%d messages, %v; want 2", n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/page")
		})
	}
}
