package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

// BenchmarkSend times a transaction that sends a batch of 1 or 100 plain
// messages (no MessageID, no group) into a queue that does not
// deduplicate bodies, by the plain statement (sendPlain) and by the full
// one (sendQueue), in one run, so that their ratio is of the same machine
// state:
//
//	go test -run '^$' -bench BenchmarkSend -count 5 ./internal/postgres
func BenchmarkSend(b *testing.B) {
	ctx := context.Background()
	db := openWithQueue(b, driver.Queue{Name: "q", MaxDeliveryCount: 5, LockDurationMS: 30_000, DedupWindowMS: 600_000})
	db.SetMaxOpenConns(1) // every statement prepared once, on one connection
	body := make([]byte, 256)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	type sendFunc func(context.Context, driver.DBTX, string, []driver.SendMessage, int64) ([]driver.Copy, bool, error)
	for _, n := range []int{1, 100} {
		msgs := make([]driver.SendMessage, n)
		for i := range msgs {
			msgs[i] = driver.SendMessage{Body: body}
		}
		for _, f := range []struct {
			name string
			send sendFunc
		}{{"plain", sendPlain}, {"full", sendQueue}} {
			b.Run(fmt.Sprintf("%s/%d", f.name, n), func(b *testing.B) {
				start := time.Now()
				for b.Loop() {
					tx, err := db.BeginTx(ctx, &sql.TxOptions{})
					if err != nil {
						b.Fatal(err)
					}
					if _, found, err := f.send(ctx, tx, "q", msgs, testNow); err != nil || !found {
						b.Fatalf("send: found %v, %v", found, err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}
