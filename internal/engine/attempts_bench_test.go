package engine_test

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
)

// attemptLayouts are the two layouts of the receive attempts: the one
// before mqlite-schema-5, a WITHOUT ROWID table keyed by (queue,
// attempt_id) holding the recorded answer in its cells (which spill to
// overflow pages), and today's rowid table whose key lives in the unique
// index mqlite_attempts_key, small cells only.
var attemptLayouts = []struct{ name, ddl string }{
	{"without-rowid", `CREATE TABLE a (queue TEXT NOT NULL, attempt_id TEXT NOT NULL, request TEXT NOT NULL,
		result BLOB NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (queue, attempt_id)) STRICT, WITHOUT ROWID`},
	{"rowid+index", `CREATE TABLE a (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, attempt_id TEXT NOT NULL,
		request TEXT NOT NULL, result BLOB NOT NULL, expires_at INTEGER NOT NULL) STRICT;
		CREATE UNIQUE INDEX a_key ON a (queue, attempt_id)`},
}

// BenchmarkAttemptLookup measures the attempt-id lookup every Receive with
// an AttemptID makes (the Go client sends one with each), in both layouts
// and at two page sizes: a miss (the common case: a fresh id) and a hit
// (a retry), among 100,000 live attempts, each the recorded answer of a
// one-message claim with a 256-byte body, on the store's page cache
// (8 MiB). It reports the file's size and the process's CPU time per
// lookup, which moves less than the wall time on a loaded machine.
func BenchmarkAttemptLookup(b *testing.B) {
	const attempts = 100_000
	row := engine.Row{Seq: 1, DeliveryCount: 1, EnqueuedAt: 1, Body: make([]byte, 256),
		LockToken: "0123456789abcdef0123456789abcdef", LockedUntil: 2}
	result, err := json.Marshal([]engine.Row{row})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, attempts)
	for i := range ids {
		var r [16]byte
		_, _ = rand.Read(r[:])
		ids[i] = hex.EncodeToString(r[:])
	}
	for _, page := range []int{1024, 4096} {
		for _, l := range attemptLayouts {
			b.Run(fmt.Sprintf("page=%d/%s", page, l.name), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "attempts.db")
				db, err := sql.Open("sqlite", "file:"+path+"?_pragma=synchronous(NORMAL)&_pragma=cache_size(-8192)")
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				db.SetMaxOpenConns(1)
				for _, s := range []string{fmt.Sprintf("PRAGMA page_size = %d", page), "PRAGMA journal_mode = WAL", l.ddl} {
					if _, err := db.Exec(s); err != nil {
						b.Fatal(err)
					}
				}
				tx, err := db.Begin()
				if err != nil {
					b.Fatal(err)
				}
				for _, id := range ids {
					if _, err := tx.Exec(`INSERT INTO a (queue, attempt_id, request, result, expires_at) VALUES ('orders', ?, 'max=1 mode=peek-lock', ?, 9e15)`, id, result); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
					b.Fatal(err)
				}
				var pages int64
				if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
					b.Fatal(err)
				}
				const q = `SELECT request, result FROM a WHERE queue = ? AND attempt_id = ? AND expires_at > ?`
				stmt, err := db.Prepare(q)
				if err != nil {
					b.Fatal(err)
				}
				defer stmt.Close()
				misses := make([]string, 4096)
				for i := range misses {
					var r [16]byte
					_, _ = rand.Read(r[:])
					misses[i] = hex.EncodeToString(r[:])
				}
				for _, kind := range []string{"miss", "hit"} {
					b.Run(kind, func(b *testing.B) {
						b.ReportMetric(float64(pages*int64(page))/(1<<20), "file-MiB")
						cpu := testdb.CPUTime()
						defer func() {
							b.ReportMetric(float64((testdb.CPUTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
						}()
						for i := range b.N {
							id := misses[i%len(misses)]
							if kind == "hit" {
								id = ids[(i*7919)%len(ids)]
							}
							var req string
							var res []byte
							err := stmt.QueryRow("orders", id, 1).Scan(&req, &res)
							if (err == sql.ErrNoRows) != (kind == "miss") {
								b.Fatalf("%s: %v", kind, err)
							}
						}
					})
				}
			})
		}
	}
}
