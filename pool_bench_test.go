package mqlite_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkTxPostgres measures Store.Tx on PostgreSQL's pool in its two
// forms side by side, in one run: "alone", each call a transaction of its
// own on the caller's goroutine; "groups", up to the pool's size of group
// commits at once; and, for the record, "one group", one group commit at
// a time (the form of a store with one connection). Eight goroutines each send one message per Tx (the
// eight producers of bench/postgres).
//
//	go test -run '^$' -bench BenchmarkTxPostgres -benchtime 2000x -count 3 .
func BenchmarkTxPostgres(b *testing.B) {
	for _, form := range []string{"alone", "groups", "one group"} {
		b.Run(form, func(b *testing.B) {
			st := openPoolB(b)
			mqlite.SetTxAlone(st, form == "alone")
			if form == "one group" {
				mqlite.SetTxParallel(st, 1) // before: one group at a time
			}
			ctx := context.Background()
			body := make([]byte, 256)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			b.ResetTimer()
			for range 8 {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := st.Tx(ctx, func(tx *mqlite.Tx) error {
							_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: body})
							return err
						}); err != nil {
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
		})
	}
}
