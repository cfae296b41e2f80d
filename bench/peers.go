package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"
	_ "modernc.org/sqlite" // the "sqlite" driver of raw SQL, goqite and River

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/bench/internal/mqside"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

const queueName = "bench"

// latencyWorkers is how many handlers each peer's consumer runs at once in
// the latency scenario: the same for every peer.
const latencyWorkers = 8

// latencyTimeout bounds how long a latency run waits for its last message.
const latencyTimeout = 60 * time.Second

// Peers are the libraries compared, in table order.
func Peers() []Peer {
	return []Peer{
		{Name: "raw SQL", Open: openRaw, NoLatency: true},
		{Name: "goqite v0.4.0", Open: openGoqite},
		{Name: "River v0.51.2 sqlite", Open: openRiver},
		{Name: "mqlite", Open: mqliteOpener(mqlite.SyncNormal, false)},
		{Name: "mqlite, MessageID", Open: mqliteOpener(mqlite.SyncNormal, true)},
		{Name: "mqlite, Sync FULL", Open: mqliteOpener(mqlite.SyncFull, false)},
	}
}

// latencyRun is the bookkeeping of one latency measurement: the sender
// notes when each send began, the handler when each message arrived.
type latencyRun struct {
	start []time.Time
	mu    sync.Mutex
	recv  []time.Time
	got   chan struct{} // one per first arrival
}

func newLatencyRun(n int) *latencyRun {
	return &latencyRun{start: make([]time.Time, n), recv: make([]time.Time, n), got: make(chan struct{}, n)}
}

// body is the body of latency message i: its index, padded to BodySize.
func (l *latencyRun) body(i int) []byte {
	b := make([]byte, BodySize)
	copy(b, fmt.Sprintf("%08d", i))
	for j := 8; j < len(b); j++ {
		b[j] = 'x'
	}
	return b
}

// arrived is called by a handler with the body it got.
func (l *latencyRun) arrived(body []byte) {
	now := time.Now()
	i, err := strconv.Atoi(string(body[:8]))
	if err != nil || i < 0 || i >= len(l.recv) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recv[i].IsZero() {
		l.recv[i] = now
		l.got <- struct{}{}
	}
}

// run sends message i at offset at[i] with send, then waits for every
// arrival and returns the latencies.
func (l *latencyRun) run(ctx context.Context, at []time.Duration, send func(ctx context.Context, body []byte) error) ([]time.Duration, error) {
	t0 := time.Now()
	for i, off := range at {
		if d := time.Until(t0.Add(off)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		l.start[i] = time.Now()
		if err := send(ctx, l.body(i)); err != nil {
			return nil, err
		}
	}
	deadline := time.NewTimer(latencyTimeout)
	defer deadline.Stop()
	for range at {
		select {
		case <-l.got:
		case <-deadline.C:
			return nil, fmt.Errorf("not every message arrived within %s", latencyTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]time.Duration, len(at))
	for i := range out {
		out[i] = l.recv[i].Sub(l.start[i])
	}
	return out, nil
}

// inTx runs fn in a transaction on db.
func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ---- raw SQL: the ceiling -------------------------------------------------

// raw is the baseline docs/benchmark.md compares against: one table, one partial index on the ready
// rows, a claim by UPDATE … RETURNING of the lowest ids, completion by
// DELETE. No leases, tokens, receipts, dedup or groups.
type raw struct{ db *sql.DB }

func openRaw(ctx context.Context, path string) (Instance, error) {
	db, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	for _, ddl := range []string{
		`CREATE TABLE raw (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, body BLOB NOT NULL,
			state TEXT NOT NULL, received_at INTEGER)`,
		`CREATE INDEX raw_ready ON raw (queue, id) WHERE state = 'ready'`,
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return nil, errors.Join(fmt.Errorf("raw schema: %w", err), db.Close())
		}
	}
	return &raw{db: db}, nil
}

func (r *raw) DB() *sql.DB  { return r.db }
func (r *raw) Close() error { return r.db.Close() }

func (r *raw) Send(ctx context.Context, bodies [][]byte) error {
	return inTx(ctx, r.db, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO raw (queue, body, state) VALUES (?, ?, 'ready')`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, b := range bodies {
			if _, err := stmt.ExecContext(ctx, queueName, b); err != nil {
				return err
			}
		}
		return nil
	})
}

func (r *raw) Drain(ctx context.Context, n, batch int) error {
	for done := 0; done < n; {
		var ids []int64
		err := inTx(ctx, r.db, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `UPDATE raw SET state = 'claimed', received_at = ?
				WHERE id IN (SELECT id FROM raw WHERE queue = ? AND state = 'ready' ORDER BY id LIMIT ?)
				RETURNING id, body`, time.Now().UnixMilli(), queueName, batch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var body []byte
				if err := rows.Scan(&id, &body); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return rows.Err()
		})
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(ids) == 0 {
			return fmt.Errorf("queue empty after %d of %d", done, n)
		}
		err = inTx(ctx, r.db, func(tx *sql.Tx) error {
			for _, id := range ids {
				if _, err := tx.ExecContext(ctx, `DELETE FROM raw WHERE id = ?`, id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		done += len(ids)
	}
	return nil
}

func (r *raw) Latency(context.Context, []time.Duration) ([]time.Duration, error) {
	return nil, errors.New("raw SQL has no consumer")
}

// ---- mqlite ---------------------------------------------------------------

type mq struct {
	st        *mqlite.Store
	messageID bool
	next      int
}

func mqliteOpener(sync mqlite.SyncMode, messageID bool) func(context.Context, string) (Instance, error) {
	return func(ctx context.Context, path string) (Instance, error) {
		st, err := mqlite.Open(ctx, path, mqlite.Config{Sync: sync, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		if err := st.CreateQueue(ctx, queueName, mqlite.QueueOptions{}); err != nil {
			return nil, errors.Join(err, st.Close())
		}
		return &mq{st: st, messageID: messageID}, nil
	}
}

func (m *mq) DB() *sql.DB  { return m.st.DB() }
func (m *mq) Close() error { return m.st.Close() }

func (m *mq) message(body []byte) outbox.Message {
	msg := outbox.Message{Body: body}
	if m.messageID {
		m.next++
		msg.MessageID = fmt.Sprintf("m-%09d", m.next) // increasing, as an order id would be
	}
	return msg
}

func (m *mq) Send(ctx context.Context, bodies [][]byte) error {
	msgs := make([]outbox.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = m.message(b)
	}
	return mqside.Send(ctx, m.st, queueName, msgs)
}

func (m *mq) Drain(ctx context.Context, n, batch int) error {
	return mqside.Drain(ctx, m.st, queueName, n, batch)
}

// Latency: consumer.Loop with its defaults but Concurrency (latencyWorkers).
func (m *mq) Latency(ctx context.Context, at []time.Duration) ([]time.Duration, error) {
	l := newLatencyRun(len(at))
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		errc <- consumer.Loop(loopCtx, m.st, queueName, func(_ context.Context, msg mqlite.Message) error {
			l.arrived(msg.Body)
			return nil
		}, consumer.LoopConfig{Concurrency: latencyWorkers, Logger: slog.New(slog.DiscardHandler)})
	}()
	lat, err := l.run(ctx, at, func(ctx context.Context, body []byte) error { return m.Send(ctx, [][]byte{body}) })
	stop()
	return lat, errors.Join(err, <-errc)
}

// ---- goqite ---------------------------------------------------------------

// goqiteSchema is goqite v0.4.0's schema_sqlite.sql.
var goqiteSchema = []string{
	`create table goqite (
		id text primary key default ('m_' || lower(hex(randomblob(16)))),
		created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
		updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
		queue text not null,
		body blob not null,
		timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
		received integer not null default 0,
		priority integer not null default 0
	) strict`,
	`create trigger goqite_updated_timestamp after update on goqite begin
		update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
	end`,
	`create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created)`,
}

type gq struct {
	db *sql.DB
	q  *goqite.Queue
}

func openGoqite(ctx context.Context, path string) (Instance, error) {
	db, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	for _, ddl := range goqiteSchema {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return nil, errors.Join(fmt.Errorf("goqite schema: %w", err), db.Close())
		}
	}
	return &gq{db: db, q: goqite.New(goqite.NewOpts{DB: db, Name: queueName})}, nil
}

func (g *gq) DB() *sql.DB  { return g.db }
func (g *gq) Close() error { return g.db.Close() }

func (g *gq) Send(ctx context.Context, bodies [][]byte) error {
	return inTx(ctx, g.db, func(tx *sql.Tx) error {
		for _, b := range bodies {
			if err := g.q.SendTx(ctx, tx, goqite.Message{Body: b}); err != nil {
				return err
			}
		}
		return nil
	})
}

// Drain: Receive and Delete (a transaction each) one at a time; in batches,
// goqite has no batch receive, so its Tx twins claim 100 in one
// transaction and delete them in another.
func (g *gq) Drain(ctx context.Context, n, batch int) error {
	for done := 0; done < n; {
		var ids []goqite.ID
		if batch == 1 {
			m, err := g.q.Receive(ctx)
			if err != nil {
				return err
			}
			if m == nil {
				return fmt.Errorf("queue empty after %d of %d", done, n)
			}
			if err := g.q.Delete(ctx, m.ID); err != nil {
				return err
			}
			done++
			continue
		}
		err := inTx(ctx, g.db, func(tx *sql.Tx) error {
			for range batch {
				m, err := g.q.ReceiveTx(ctx, tx)
				if err != nil {
					return err
				}
				if m == nil {
					break
				}
				ids = append(ids, m.ID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("queue empty after %d of %d", done, n)
		}
		err = inTx(ctx, g.db, func(tx *sql.Tx) error {
			for _, id := range ids {
				if err := g.q.DeleteTx(ctx, tx, id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		done += len(ids)
	}
	return nil
}

// Latency: a jobs.Runner with its defaults (poll interval 100 ms) but Limit
// (latencyWorkers), sent to with jobs.CreateTx. Its default Limit is
// GOMAXPROCS, and the runner sleeps a whole poll interval whenever Limit
// jobs are in flight, which on 2 cores caps it near 20 jobs/s.
func (g *gq) Latency(ctx context.Context, at []time.Duration) ([]time.Duration, error) {
	l := newLatencyRun(len(at))
	r := jobs.NewRunner(jobs.NewRunnerOpts{Queue: g.q, Limit: latencyWorkers})
	r.Register("bench", func(_ context.Context, body []byte) error {
		l.arrived(body)
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Start(runCtx)
	}()
	lat, err := l.run(ctx, at, func(ctx context.Context, body []byte) error {
		return inTx(ctx, g.db, func(tx *sql.Tx) error {
			_, err := jobs.CreateTx(ctx, tx, g.q, "bench", goqite.Message{Body: body})
			return err
		})
	})
	stop()
	<-done
	return lat, err
}

// ---- River ----------------------------------------------------------------

// riverArgs carries the body as a JSON string (the bodies are ASCII).
type riverArgs struct {
	Body string `json:"b"`
}

// Kind names the job kind.
func (riverArgs) Kind() string { return "bench" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	fn func(body []byte)
}

// Work hands the job's body to fn.
func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	w.fn([]byte(job.Args.Body))
	return nil
}

type rv struct {
	db     *sql.DB
	insert *river.Client[*sql.Tx] // insert-only
}

func openRiver(ctx context.Context, path string) (Instance, error) {
	db, err := openSQLite(path)
	if err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riversqlite.New(db), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, errors.Join(fmt.Errorf("river migrate: %w", err), db.Close())
	}
	c, err := river.NewClient(riversqlite.New(db), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return &rv{db: db, insert: c}, nil
}

func (r *rv) DB() *sql.DB  { return r.db }
func (r *rv) Close() error { return r.db.Close() }

func (r *rv) Send(ctx context.Context, bodies [][]byte) error {
	return r.send(ctx, r.insert, bodies)
}

func (r *rv) send(ctx context.Context, c *river.Client[*sql.Tx], bodies [][]byte) error {
	return inTx(ctx, r.db, func(tx *sql.Tx) error {
		if len(bodies) == 1 {
			_, err := c.InsertTx(ctx, tx, riverArgs{Body: string(bodies[0])}, nil)
			return err
		}
		params := make([]river.InsertManyParams, len(bodies))
		for i, b := range bodies {
			params[i] = river.InsertManyParams{Args: riverArgs{Body: string(b)}}
		}
		_, err := c.InsertManyTx(ctx, tx, params)
		return err
	})
}

// worker returns a River client that works the default queue with
// maxWorkers and fetch timings; fn gets each body.
func (r *rv) worker(maxWorkers int, cooldown, poll time.Duration, fn func([]byte)) (*river.Client[*sql.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{fn: fn})
	return river.NewClient(riversqlite.New(r.db), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           workers,
		FetchCooldown:     cooldown,
		FetchPollInterval: poll,
	})
}

// Drain: a client with MaxWorkers = batch that fetches as fast as River
// allows (FetchCooldown and FetchPollInterval 1 ms); timed until n jobs are
// completed in the table (River's completer persists them in the
// background). The count is read every 10 ms: River's completion events
// are sent without blocking and may be dropped under load, so they cannot
// be counted.
func (r *rv) Drain(ctx context.Context, n, batch int) error {
	c, err := r.worker(batch, time.Millisecond, time.Millisecond, func([]byte) {})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(5 * time.Minute)
	defer deadline.Stop()
	var waitErr error
	for done := 0; done < n && waitErr == nil; {
		select {
		case <-tick.C:
			if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
				waitErr = fmt.Errorf("count completed jobs: %w", err)
			}
		case <-deadline.C:
			waitErr = fmt.Errorf("river completed %d of %d", done, n)
		case <-ctx.Done():
			waitErr = ctx.Err()
		}
	}
	return errors.Join(waitErr, c.Stop(context.WithoutCancel(ctx)))
}

// Latency: a client with River's default fetch timings (FetchCooldown
// 100 ms, FetchPollInterval 1 s; on SQLite its notifier polls a table every
// 50 ms) and MaxWorkers latencyWorkers, inserting with InsertTx through the
// same client.
func (r *rv) Latency(ctx context.Context, at []time.Duration) ([]time.Duration, error) {
	l := newLatencyRun(len(at))
	c, err := r.worker(latencyWorkers, 0, 0, l.arrived)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	lat, err := l.run(ctx, at, func(ctx context.Context, body []byte) error {
		return r.send(ctx, c, [][]byte{body})
	})
	return lat, errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
}
