package outbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// BenchmarkSend measures the outbox beside a bare-SQL baseline on the same
// settings (WAL, synchronous=NORMAL, one connection): one message per
// transaction and 100 per transaction, 256-byte bodies, dedup on. It
// reports messages per second and WAL bytes written per message (the WAL is
// not checkpointed during the run, so its growth is what was written).
func BenchmarkSend(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("outbox/batch=%d", batch), func(b *testing.B) {
			st, db := benchStore(b)
			defer st.Close()
			msgs := make([]outbox.Message, batch)
			runBatches(b, db, batch, func(ctx context.Context, tx *sql.Tx) error {
				for i := range msgs {
					msgs[i] = outbox.Message{Body: randomBody()}
				}
				if batch == 1 {
					_, err := outbox.SendOne(ctx, tx, "bench", msgs[0])
					return err
				}
				_, err := outbox.SendBatch(ctx, tx, "bench", msgs)
				return err
			})
		})
		b.Run(fmt.Sprintf("bare/batch=%d", batch), func(b *testing.B) {
			st, db := benchStore(b)
			defer st.Close()
			if _, err := db.Exec(`CREATE TABLE bare (id INTEGER PRIMARY KEY, body BLOB NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			runBatches(b, db, batch, func(ctx context.Context, tx *sql.Tx) error {
				if batch == 1 {
					_, err := tx.ExecContext(ctx, `INSERT INTO bare (body) VALUES (?)`, randomBody())
					return err
				}
				stmt, err := tx.PrepareContext(ctx, `INSERT INTO bare (body) VALUES (?)`)
				if err != nil {
					return err
				}
				defer stmt.Close()
				for range batch {
					if _, err := stmt.ExecContext(ctx, randomBody()); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

func randomBody() []byte {
	b := make([]byte, 256)
	_, _ = rand.Read(b)
	return b
}

func benchStore(b *testing.B) (*mqlite.Store, *sql.DB) {
	b.Helper()
	st, err := mqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), mqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.CreateQueue(context.Background(), "bench", mqlite.QueueOptions{}); err != nil {
		b.Fatal(err)
	}
	db := st.DB()
	if _, err := db.Exec(`PRAGMA wal_autocheckpoint = 0`); err != nil {
		b.Fatal(err)
	}
	return st, db
}

// runBatches runs b.N/batch transactions of fn and reports msgs/s and WAL
// bytes per message.
func runBatches(b *testing.B, db *sql.DB, batch int, fn func(context.Context, *sql.Tx) error) {
	ctx := context.Background()
	var walPath string
	if err := db.QueryRow(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&walPath); err != nil {
		b.Fatal(err)
	}
	walPath += "-wal"
	before := fileSize(walPath)
	txs := max(b.N/batch, 1)
	cpu := testdb.CPUTime()
	b.ResetTimer()
	for range txs {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := fn(ctx, tx); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := float64(txs * batch)
	b.ReportMetric(n/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(fileSize(walPath)-before)/n, "walB/msg")
	b.ReportMetric(float64((testdb.CPUTime()-cpu).Microseconds())/n, "cpu-µs/msg")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
