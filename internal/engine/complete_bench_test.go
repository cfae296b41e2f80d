package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
)

// completeBacklog is how many messages BenchmarkCompleteForms completes
// at each size: a multiple of every size but 128 (30 calls of 128).
const completeBacklog = 3840

// BenchmarkCompleteForms drains a backlog with claims of n deliveries and
// one CompleteMany of them per transaction, in the three forms of a
// completion's receipt, in the same run: "mixed" (today's: the rows kept
// completed below bulkComplete deliveries in a call, deleted with receipt
// rows from it), "keep" (always kept completed) and "delete" (always
// deleted, receipt rows written). It reports the completions' CPU and WAL
// per message (the claims are not counted) and, as compact-cpu-µs/msg and
// compact-walB/msg, the janitor's later pass that turns the completed rows
// into receipt rows (CompactReceipts), which the rows kept completed owe.
func BenchmarkCompleteForms(b *testing.B) {
	for _, n := range []int{1, 4, 12, 32, 128} {
		for _, form := range []string{"mixed", "keep", "delete"} {
			b.Run(fmt.Sprintf("n=%d/%s", n, form), func(b *testing.B) {
				for range b.N {
					completeForm(b, n, form)
				}
			})
		}
	}
}

// completeForm is one run of BenchmarkCompleteForms.
func completeForm(b *testing.B, n int, form string) {
	b.StopTimer()
	tb := testdb.Open(b, mqlite.Config{})
	tb.Queue(b, "q", mqlite.QueueOptions{})
	fill(b, tb.Store, "q", completeBacklog, "")
	db := tb.Store.DB()
	wal := testdb.NewWALCounter(b, tb.Path)
	var cpu time.Duration
	var frames int64
	done := 0
	for {
		msgs, err := tb.Store.Receive(bctx, "q", mqlite.ReceiveOptions{Max: n})
		if err != nil {
			b.Fatal(err)
		}
		wal.Step()
		if len(msgs) == 0 {
			break
		}
		locks := make([]engine.Settlement, len(msgs))
		for i, m := range msgs {
			locks[i] = engine.Settlement{Queue: m.Queue, Seq: m.Seq, Token: m.LockToken}
		}
		now := msgs[0].EnqueuedAt.UnixMilli() + 1
		b.StartTimer()
		c0, f0 := testdb.CPUTime(), wal.Frames
		tx, err := db.BeginTx(bctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		errs, err := engine.CompleteManyAs(bctx, tx, locks, now, form)
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		wal.Step()
		cpu += testdb.CPUTime() - c0
		frames += wal.Frames - f0
		b.StopTimer()
		for _, e := range errs {
			if e != nil {
				b.Fatal(e)
			}
		}
		done += len(msgs)
	}
	if done != completeBacklog {
		b.Fatalf("completed %d", done)
	}
	// The janitor's pass over what the completions kept completed.
	now := testdb.Int(b, db, `SELECT coalesce(max(settled_at), 0) FROM mqlite_messages`)
	c0, f0 := testdb.CPUTime(), wal.Frames
	for {
		k, err := engine.CompactReceipts(bctx, db, now)
		if err != nil {
			b.Fatal(err)
		}
		wal.Step()
		if k < engine.ReceiptBatch {
			break
		}
	}
	compactCPU, compactFrames := testdb.CPUTime()-c0, wal.Frames-f0
	if r := testdb.Int(b, db, `SELECT count(*) FROM mqlite_settlement_receipts`); r != completeBacklog {
		b.Fatalf("%d receipts after the janitor's pass, want %d", r, completeBacklog)
	}
	per := func(v float64) float64 { return v / completeBacklog }
	b.ReportMetric(per(float64(cpu.Microseconds())), "cpu-µs/msg")
	b.ReportMetric(per(float64(frames*(engine.PageSize+24))), "walB/msg")
	b.ReportMetric(per(float64(compactCPU.Microseconds())), "compact-cpu-µs/msg")
	b.ReportMetric(per(float64(compactFrames*(engine.PageSize+24))), "compact-walB/msg")
}
