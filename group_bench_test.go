package mqlite_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
)

// BenchmarkTxOverhead measures what Store.Tx costs around its callback:
// the callback writes one row into a one-column table, so that the
// figures are the group commit's own (joining, the savepoint, the BEGIN and
// COMMIT, the answer) and not a send's. "lone": one goroutine calls Tx after
// Tx, each call a group of one. "eight": eight goroutines at once, whose
// calls share groups. It reports CPU per call (cpu-µs/op) and calls per
// group commit.
//
//	go test -run '^$' -bench BenchmarkTxOverhead -benchtime 20000x -count 3 .
func BenchmarkTxOverhead(b *testing.B) {
	for _, tc := range []struct {
		name    string
		callers int
	}{{"lone", 1}, {"eight", 8}} {
		b.Run(tc.name, func(b *testing.B) {
			st := testdb.Open(b, mqlite.Config{}).Store
			if _, err := st.DB().Exec(`CREATE TABLE bench (v INTEGER)`); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			fn := func(tx *mqlite.Tx) error {
				_, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO bench (v) VALUES (1)`)
				return err
			}
			commits := mqlite.GroupCommits(st)
			cpu := testdb.CPUTime()
			b.ResetTimer()
			runTxCallers(ctx, b, st, tc.callers, fn)
			b.ReportMetric(float64((testdb.CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(b.N)/float64(mqlite.GroupCommits(st)-commits), "calls/group")
		})
	}
}

// runTxCallers runs b.N calls of st.Tx with fn from callers goroutines at
// once, and stops b's timer when they are done.
func runTxCallers(ctx context.Context, b *testing.B, st *mqlite.Store, callers int, fn func(tx *mqlite.Tx) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := st.Tx(ctx, fn); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
