package mqlite_test

import (
	"context"
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
			body := make([]byte, 256)
			b.ResetTimer()
			runTxCallers(context.Background(), b, st, 8, func(tx *mqlite.Tx) error {
				_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: body})
				return err
			})
		})
	}
}
