package outbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// rawSchema is the raw-SQL baseline: one table, one partial
// index over the ready rows, in the store's own file and settings.
const rawSchema = `CREATE TABLE raw (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL,
	state TEXT NOT NULL, received_at INTEGER NOT NULL);
CREATE INDEX raw_ready ON raw (queue, id) WHERE state = 'ready'`

const rawInsert = `INSERT INTO raw (queue, body, state, received_at) VALUES ('bench', ?, 'ready', ?)`

// BenchmarkSend measures the outbox beside the raw-SQL baseline
// in the same run, on the store's real settings (WAL, synchronous NORMAL,
// automatic checkpoints on): one message per transaction and 100 per
// transaction, 256-byte random bodies, de-duplication on (the default
// 10-minute window) keyed by the body (noid) or by an increasing MessageID
// (id). With -count 3 the variants alternate, so each ratio compares runs
// that shared the machine's state. It reports msgs/s, process CPU per
// message and WAL bytes appended per message (frames counted in the
// wal-index, checkpoints included).
func BenchmarkSend(b *testing.B) {
	for _, batch := range []int{1, 100} {
		for _, schema := range []string{"raw", "raw-autoincrement"} {
			b.Run(fmt.Sprintf("%s/batch=%d", schema, batch), func(b *testing.B) {
				db, path := benchStore(b)
				ddl := rawSchema
				if schema == "raw-autoincrement" {
					ddl = strings.Replace(ddl, "INTEGER PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT", 1)
				}
				if _, err := db.Exec(ddl); err != nil {
					b.Fatal(err)
				}
				runBatches(b, db, path, batch, func(ctx context.Context, tx *sql.Tx, _ int) error {
					stmt, err := tx.PrepareContext(ctx, rawInsert)
					if err != nil {
						return err
					}
					defer stmt.Close()
					for range batch {
						if _, err := stmt.ExecContext(ctx, randomBody(), 1); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
		for _, ids := range []bool{false, true} {
			name := "noid"
			if ids {
				name = "id"
			}
			b.Run(fmt.Sprintf("mqlite-%s/batch=%d", name, batch), func(b *testing.B) {
				db, path := benchStore(b)
				msgs := make([]outbox.Message, batch)
				runBatches(b, db, path, batch, func(ctx context.Context, tx *sql.Tx, first int) error {
					for i := range msgs {
						msgs[i] = outbox.Message{Body: randomBody()}
						if ids {
							msgs[i].MessageID = fmt.Sprintf("order-%09d", first+i)
						}
					}
					if batch == 1 {
						_, err := outbox.SendOne(ctx, tx, "bench", msgs[0])
						return err
					}
					_, err := outbox.SendBatch(ctx, tx, "bench", msgs)
					return err
				})
			})
		}
	}
}

func randomBody() []byte {
	b := make([]byte, 256)
	_, _ = rand.Read(b)
	return b
}

// benchStore opens a store on a fresh file with the queue "bench" and its
// default options; the store keeps every setting of its own.
func benchStore(b *testing.B) (*sql.DB, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.db")
	st, err := mqlite.Open(context.Background(), path, mqlite.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(context.Background(), "bench", mqlite.QueueOptions{}); err != nil {
		b.Fatal(err)
	}
	return st.DB(), path
}

// runBatches runs b.N/batch transactions of fn (first is the number of
// messages sent before) and reports msgs/s, CPU and WAL bytes per message.
func runBatches(b *testing.B, db *sql.DB, path string, batch int, fn func(ctx context.Context, tx *sql.Tx, first int) error) {
	ctx := context.Background()
	wal := testdb.NewWALCounter(b, path)
	pageSize := testdb.Int(b, db, `PRAGMA page_size`)
	txs := max(b.N/batch, 1)
	cpu := testdb.CPUTime()
	b.ResetTimer()
	for i := range txs {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := fn(ctx, tx, i*batch); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		wal.Step()
	}
	b.StopTimer()
	n := float64(txs * batch)
	b.ReportMetric(n/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(wal.Frames*(pageSize+24))/n, "walB/msg")
	b.ReportMetric(float64((testdb.CPUTime()-cpu).Microseconds())/n, "cpu-µs/msg")
}
