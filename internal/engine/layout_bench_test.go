package engine_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
)

// layoutDB is one file of BenchmarkLayoutForms: a form of the layout (or
// the raw baseline, form nil) on the engine's own connection settings.
type layoutDB struct {
	form  *engine.LayoutForm
	db    *sql.DB
	wal   *testdb.WALCounter
	tally hotTally
	// WAL frames of the measured blocks.
	frames int64
	// janitor: the CPU and frames of turning the completed rows into
	// receipt rows after the drain (forms that keep them).
	janitor hotTally
	jframes int64
	// split: with LAYOUT_SPLIT set, the drain's CPU by transaction
	// (the claim's, the completion's).
	split [2]time.Duration
}

// layoutSplit is whether the drain measures its two transactions apart
// (two more getrusage calls a transaction, on every form alike).
var layoutSplit = os.Getenv("LAYOUT_SPLIT") != ""

// openLayoutDB opens a fresh file at path with the engine's connection
// (pragmas, page size, WAL, SQL functions; no hooks: they are the same
// for every form) and applies ddl.
func openLayoutDB(b *testing.B, path, ddl string) (*sql.DB, *testdb.WALCounter) {
	b.Helper()
	ctx := context.Background()
	db, release, err := engine.SQLite{}.Open(engine.ConnConfig{Path: path, BusyTimeoutMS: 5000, MaxMessageBytes: 1 << 20,
		Now: func() int64 { return time.Now().UnixMilli() }, Closing: func() bool { return false }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close(); release() })
	if err := (engine.SQLite{}).Prepare(ctx, db, true); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		b.Fatalf("ddl: %v", err)
	}
	return db, testdb.NewWALCounter(b, path)
}

// layoutPlan logs the query plan of query on db.
func layoutPlan(b *testing.B, db *sql.DB, name, query string, args ...any) {
	b.Logf("%s: %s", name, strings.ReplaceAll(engine.Explain(b, db, query, args...), "\n", "; "))
}

const layoutQueueSQL = `INSERT INTO mqlite_queues (name, ordering, max_delivery_count, lock_duration_ms, dedup_window_ms,
	default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes, created_at, updated_at, dedup_by_body)
	VALUES ('q', 'standard', 10, 30000, 600000, 0, 0, 0, 0, 0, 1, 1, 0)`

// layoutTx runs fn in one transaction of db and counts its WAL frames.
func layoutTx(b *testing.B, l *layoutDB, fn func(tx *sql.Tx)) {
	tx, err := l.db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	fn(tx)
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	l.wal.Step()
}

// layoutSend sends the bodies to the form's queue: one message by
// InsertOne, several by chunks as insertChunk cuts them.
func layoutSend(b *testing.B, tx *sql.Tx, f *engine.LayoutForm, bodies [][]byte) {
	if len(bodies) == 1 {
		key := bodies[0][:16]
		res, err := tx.Exec(f.InsertOne, "q", nil, nil, nil, 0, 0, nil, key, bodies[0], nil,
			len(bodies[0]), len(bodies[0]), "standard", 600000, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			b.Fatalf("sent %d", n)
		}
		return
	}
	for len(bodies) > 0 {
		n := engine.LayoutChunks
		for n > len(bodies) {
			n /= 2
		}
		var first int64
		if err := tx.QueryRow(f.NextSeq).Scan(&first); err != nil {
			b.Fatal(err)
		}
		args := make([]any, 1, 1+9*n)
		args[0] = "q"
		for i, body := range bodies[:n] {
			args = append(args, 0, 0, nil, nil, nil, body[:16], body, first+int64(i), 0)
		}
		if _, err := tx.Exec(f.InsertChunk(n), args...); err != nil {
			b.Fatal(err)
		}
		bodies = bodies[n:]
	}
}

// layoutRawSend is the raw baseline's send (BenchmarkHotPath's).
func layoutRawSend(b *testing.B, tx *sql.Tx, bodies [][]byte) {
	for _, body := range bodies {
		if _, err := tx.Exec(`INSERT INTO raw (queue, body, state, received_at) VALUES ('q', ?, 'ready', ?)`, body, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// layoutDrain receives up to batch messages of the form's queue and
// completes them, in two transactions, as the store does; it returns how
// many it drained.
func layoutDrain(b *testing.B, l *layoutDB, batch int) int {
	f := l.form
	now := time.Now().UnixMilli()
	type lock struct {
		seq   int64
		token string
	}
	var locks []lock
	c0 := cpuIf(layoutSplit)
	layoutTx(b, l, func(tx *sql.Tx) {
		// No due probe: the store skips it while nothing of the queue can
		// be due (DueBounds), as in a drain.
		if batch == 1 {
			token := engine.NewToken()
			r, err := engine.ScanClaimed(tx.QueryRow(f.ClaimOne, "q", now, 10, 30000, 1, token), token, now+30000)
			if err == sql.ErrNoRows {
				return
			}
			if err != nil {
				b.Fatal(err)
			}
			locks = append(locks, lock{r.Seq, r.LockToken})
			return
		}
		rows, err := tx.Query(f.ClaimMany, "q", now, 10, 30000, batch)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			r, err := engine.ScanRow(rows)
			if err != nil {
				b.Fatal(err)
			}
			locks = append(locks, lock{r.Seq, r.LockToken})
		}
		if err := rows.Close(); err != nil {
			b.Fatal(err)
		}
	})
	if len(locks) == 0 {
		return 0
	}
	c1 := cpuIf(layoutSplit)
	defer func() {
		if layoutSplit {
			l.split[0] += c1 - c0
			l.split[1] += testdb.CPUTime() - c1
		}
	}()
	layoutTx(b, l, func(tx *sql.Tx) {
		if len(locks) == 1 {
			res, err := tx.Exec(f.CompleteOne, locks[0].seq, "q", locks[0].token, now)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				b.Fatalf("completed %d", n)
			}
			if f.ReceiptOne != "" {
				if _, err := tx.Exec(f.ReceiptOne, "q", locks[0].seq, locks[0].token, now+engine.ReceiptTTL); err != nil {
					b.Fatal(err)
				}
			}
			return
		}
		n := engine.ChunkOf(len(locks))
		args := []any{now}
		rargs := []any{}
		for _, k := range locks {
			args = append(args, k.seq, "q", k.token)
			rargs = append(rargs, "q", k.seq, k.token, now+engine.ReceiptTTL)
		}
		for range n - len(locks) {
			args = append(args, nil, nil, nil)
			rargs = append(rargs, nil, nil, nil, nil)
		}
		rows, err := tx.Query(f.CompleteMany(n), args...)
		if err != nil {
			b.Fatal(err)
		}
		done := 0
		for rows.Next() {
			done++
		}
		if err := rows.Close(); err != nil {
			b.Fatal(err)
		}
		if done != len(locks) {
			b.Fatalf("completed %d of %d", done, len(locks))
		}
		if _, err := tx.Exec(f.ReceiptMany(n), rargs...); err != nil {
			b.Fatal(err)
		}
	})
	return len(locks)
}

// BenchmarkLayoutForms measures the per-message path's SQL on today's
// layout (mqlite-schema-13) and on candidate forms of it
// (engine.LayoutForms), beside the raw baseline of BenchmarkHotPath, each
// in a fresh file of its own on the engine's connection settings, the
// forms taking turns in blocks of 200 messages so that the machine's
// load falls on all alike: send one or 100 per transaction, and a
// backlog drained one at a time or 100 at a time (claim, then complete,
// in two transactions). Metrics per form: cpu-µs/msg and walB/msg (WAL
// frames × 1,048). The drain one at a time also reports, for the forms
// that keep completed rows, what turning them into receipt rows costs the
// janitor afterwards (<form>-janitor-cpu-µs/msg, -janitor-walB/msg).
func BenchmarkLayoutForms(b *testing.B) {
	v13, err := os.ReadFile(filepath.Join("..", "..", "schema", "layout.sql"))
	if err != nil {
		b.Fatal(err)
	}
	forms := engine.LayoutForms(string(v13))
	if only := os.Getenv("LAYOUT_FORMS"); only != "" {
		forms = slices.DeleteFunc(forms, func(f engine.LayoutForm) bool { return !slices.Contains(strings.Split(only, ","), f.Name) })
	}
	per := 20_000
	if s := os.Getenv("LAYOUT_PER"); s != "" {
		_, _ = fmt.Sscan(s, &per)
	}
	for _, op := range []string{"send", "drain"} {
		for _, batch := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/batch=%d", op, batch), func(b *testing.B) {
				for range b.N {
					layoutRound(b, forms, op, batch, per)
				}
			})
		}
	}
}

func layoutRound(b *testing.B, forms []engine.LayoutForm, op string, batch, per int) {
	dir := b.TempDir()
	dbs := make([]*layoutDB, len(forms)+1) // raw last
	bodies := make([][]byte, per)
	for i := range bodies {
		bodies[i] = make([]byte, 256)
		_, _ = rand.Read(bodies[i])
	}
	for i := range dbs {
		l := &layoutDB{}
		if i < len(forms) {
			l.form = &forms[i]
			l.db, l.wal = openLayoutDB(b, filepath.Join(dir, forms[i].Name+".db"), forms[i].DDL)
			if _, err := l.db.Exec(layoutQueueSQL); err != nil {
				b.Fatal(err)
			}
			if op == "drain" && batch == 1 {
				f := l.form
				layoutPlan(b, l.db, f.Name+" claim one", f.ClaimOne, "q", 1, 10, 30000, 1, "t")
				layoutPlan(b, l.db, f.Name+" claim", f.ClaimMany, "q", 1, 10, 30000, 100)
				layoutPlan(b, l.db, f.Name+" complete", f.CompleteOne, 1, "q", "t", 1)
				if f.Compact[0] != "" {
					layoutPlan(b, l.db, f.Name+" janitor", f.Compact[1], 1, 10)
				}
			}
		} else {
			l.db, l.wal = openLayoutDB(b, filepath.Join(dir, "raw.db"), `CREATE TABLE raw (id INTEGER PRIMARY KEY,
				queue TEXT NOT NULL, body BLOB NOT NULL, state TEXT NOT NULL, received_at INTEGER NOT NULL);
				CREATE INDEX raw_ready ON raw (queue, id) WHERE state = 'ready'`)
		}
		if op == "drain" {
			for done := 0; done < per; done += 1000 {
				layoutTx(b, l, func(tx *sql.Tx) {
					if l.form == nil {
						layoutRawSend(b, tx, bodies[done:done+1000])
						return
					}
					layoutSend(b, tx, l.form, bodies[done:done+1000])
				})
			}
		}
		dbs[i] = l
	}
	b.ResetTimer()
	for done := 0; done < per; done += hotBlock {
		for _, l := range dbs {
			f0 := l.wal.Frames
			l.tally.measure(hotBlock, func() {
				switch {
				case op == "send":
					for i := done; i < done+hotBlock; i += batch {
						layoutTx(b, l, func(tx *sql.Tx) {
							if l.form == nil {
								layoutRawSend(b, tx, bodies[i:i+batch])
								return
							}
							layoutSend(b, tx, l.form, bodies[i:i+batch])
						})
					}
				case l.form == nil:
					if n := rawDrainN(b, l.db, batch, hotBlock, l.wal); n != hotBlock {
						b.Fatalf("raw drained %d", n)
					}
				default:
					for n := 0; n < hotBlock; {
						got := layoutDrain(b, l, batch)
						if got == 0 {
							b.Fatal("the backlog ran out")
						}
						n += got
					}
				}
			})
			l.frames += l.wal.Frames - f0
		}
	}
	b.StopTimer()
	for _, l := range dbs {
		if op != "drain" || l.form == nil || l.form.Compact[0] == "" {
			continue
		}
		// The janitor's pass over what the drain left completed, a batch
		// per transaction as CompactReceipts runs it.
		now := time.Now().UnixMilli() + 1
		f0 := l.wal.Frames
		l.janitor.measure(per, func() {
			for {
				var turned int64
				layoutTx(b, l, func(tx *sql.Tx) {
					if _, err := tx.Exec(l.form.Compact[0], now, engine.ReceiptBatch); err != nil {
						b.Fatal(err)
					}
					res, err := tx.Exec(l.form.Compact[1], now, engine.ReceiptBatch)
					if err != nil {
						b.Fatal(err)
					}
					turned, _ = res.RowsAffected()
				})
				if turned == 0 {
					return
				}
			}
		})
		l.jframes = l.wal.Frames - f0
	}
	for _, l := range dbs {
		name := "raw"
		if l.form != nil {
			name = l.form.Name
		}
		b.ReportMetric(float64(l.tally.cpu.Microseconds())/float64(l.tally.msgs), name+"-cpu-µs/msg")
		b.ReportMetric(float64(l.frames*1048)/float64(l.tally.msgs), name+"-walB/msg")
		if layoutSplit && op == "drain" {
			b.ReportMetric(float64(l.split[0].Microseconds())/float64(l.tally.msgs), name+"-claim-cpu-µs/msg")
			b.ReportMetric(float64(l.split[1].Microseconds())/float64(l.tally.msgs), name+"-complete-cpu-µs/msg")
		}
		if l.janitor.msgs > 0 {
			b.ReportMetric(float64(l.janitor.cpu.Microseconds())/float64(l.janitor.msgs), name+"-janitor-cpu-µs/msg")
			b.ReportMetric(float64(l.jframes*1048)/float64(l.janitor.msgs), name+"-janitor-walB/msg")
		}
	}
	loadAverage(b)
}

// cpuIf is the process CPU so far when on, else 0.
func cpuIf(on bool) time.Duration {
	if !on {
		return 0
	}
	return testdb.CPUTime()
}
