package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver, raw SQL's
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/bench/internal/mqside"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

const queueName = "bench"

// workers is how many handlers work at once in the job and latency rows,
// and how many connections each side's pool keeps: the same for every
// side (mqlite's default pool on PostgreSQL).
const workers = 8

// waitFor bounds a drain, a work or a latency run.
const waitFor = 5 * time.Minute

// side is one library on one fresh schema.
type side interface {
	// send sends bodies in one transaction, as the library's API does it.
	// It is safe for concurrent use.
	send(ctx context.Context, bodies [][]byte) error
	// drain consumes n messages already in the queue, batch (1 or 100) at
	// a time, each batch settled as the library settles it.
	drain(ctx context.Context, n, batch int) error
	// work works n messages already in the queue with workers handlers:
	// each writes the row (n) of table done in the transaction that
	// completes its message. It returns once n rows are committed.
	work(ctx context.Context, n int) error
	// consume runs the library's consumer with workers handlers, calls
	// ready once it runs, got with each message's body when its handler
	// starts, and returns after n messages.
	consume(ctx context.Context, n int, ready func(), got func(body []byte)) error
	close() error
}

// peer is a library under comparison.
type peer struct {
	name string
	// open opens the side on the schema of url; setup creates its tables
	// (the first process on the schema), else they are there.
	open func(ctx context.Context, url string, setup bool) (side, error)
}

// peers are the sides compared, in table order.
func peers() []peer {
	return []peer{
		{name: "mqlite", open: openMQ},
		{name: "River v0.51.2 pgx", open: openRiver},
		{name: "raw SQL", open: openRaw},
	}
}

// doneTable is the table the job row writes to.
const doneTable = `CREATE TABLE done (n bigint PRIMARY KEY)`

// waitCount waits for n signals on c, or fails after waitFor.
func waitCount(ctx context.Context, c <-chan struct{}, n int, what string) error {
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for i := range n {
		select {
		case <-c:
		case <-deadline.C:
			return fmt.Errorf("%s: %d of %d in %s", what, i, n, waitFor)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ---- mqlite ---------------------------------------------------------------

type mq struct{ st *mqlite.Store }

func openMQ(ctx context.Context, url string, setup bool) (side, error) {
	st, err := mqlite.Open(ctx, url, mqlite.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if setup {
		if err := st.CreateQueue(ctx, queueName, mqlite.QueueOptions{}); err != nil {
			return nil, errors.Join(err, st.Close())
		}
		if _, err := st.DB().ExecContext(ctx, doneTable); err != nil {
			return nil, errors.Join(err, st.Close())
		}
	}
	return &mq{st: st}, nil
}

func (m *mq) close() error { return m.st.Close() }

func (m *mq) send(ctx context.Context, bodies [][]byte) error {
	msgs := make([]outbox.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = outbox.Message{Body: b}
	}
	return mqside.Send(ctx, m.st, queueName, msgs)
}

func (m *mq) drain(ctx context.Context, n, batch int) error {
	return mqside.Drain(ctx, m.st, queueName, n, batch)
}

// work: LoopTx, whose step writes the row in the transaction that
// completes the message (consumer.CompleteTx).
func (m *mq) work(ctx context.Context, n int) error {
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	completed := make(chan struct{}, n)
	ran := make(chan error, 1)
	go func() {
		ran <- consumer.LoopTx(loopCtx, m.st, queueName, func(_ context.Context, msg mqlite.Message) (consumer.TxStep, error) {
			return func(ctx context.Context, tx consumer.Tx) error {
				sqlTx, err := consumer.SQL(tx)
				if err != nil {
					return err
				}
				_, err = sqlTx.ExecContext(ctx, `INSERT INTO done (n) VALUES ($1)`, msg.Seq)
				return err
			}, nil
		}, consumer.LoopConfig{Concurrency: workers, Logger: slog.New(slog.DiscardHandler), Observer: mqside.Counter(completed)})
	}()
	err := waitCount(ctx, completed, n, "mqlite completed")
	stop()
	return errors.Join(err, <-ran)
}

// consume: consumer.Loop with its defaults but Concurrency.
func (m *mq) consume(ctx context.Context, n int, ready func(), got func([]byte)) error {
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	arrived := make(chan struct{}, n)
	ran := make(chan error, 1)
	go func() {
		ran <- consumer.Loop(loopCtx, m.st, queueName, func(_ context.Context, msg mqlite.Message) error {
			got(msg.Body)
			arrived <- struct{}{}
			return nil
		}, consumer.LoopConfig{Concurrency: workers, Logger: slog.New(slog.DiscardHandler)})
	}()
	ready()
	err := waitCount(ctx, arrived, n, "mqlite handled")
	stop()
	return errors.Join(err, <-ran)
}

// ---- River ----------------------------------------------------------------

// riverArgs carries the body as a JSON string (the bodies are ASCII).
type riverArgs struct {
	Body string `json:"b"`
}

// Kind names the job kind.
func (riverArgs) Kind() string { return "bench" }

// riverFunc hands each job to fn; fn's error is the job's.
type riverFunc struct {
	river.WorkerDefaults[riverArgs]
	fn func(ctx context.Context, job *river.Job[riverArgs]) error
}

// Work runs fn.
func (w *riverFunc) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	return w.fn(ctx, job)
}

type rv struct {
	pool   *pgxpool.Pool
	insert *river.Client[pgx.Tx] // insert-only
}

func openRiver(ctx context.Context, url string, setup bool) (side, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = workers
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if setup {
		migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			pool.Close()
			return nil, err
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			pool.Close()
			return nil, fmt.Errorf("river migrate: %w", err)
		}
		if _, err := pool.Exec(ctx, doneTable); err != nil {
			pool.Close()
			return nil, err
		}
	}
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &rv{pool: pool, insert: c}, nil
}

func (r *rv) close() error { r.pool.Close(); return nil }

func (r *rv) send(ctx context.Context, bodies [][]byte) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if len(bodies) == 1 {
		if _, err := r.insert.InsertTx(ctx, tx, riverArgs{Body: string(bodies[0])}, nil); err != nil {
			return err
		}
	} else {
		params := make([]river.InsertManyParams, len(bodies))
		for i, b := range bodies {
			params[i] = river.InsertManyParams{Args: riverArgs{Body: string(b)}}
		}
		if _, err := r.insert.InsertManyTx(ctx, tx, params); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// client returns a River client that works the default queue with
// maxWorkers and fetch timings (zero: River's defaults); fn works each job.
func (r *rv) client(maxWorkers int, cooldown, poll time.Duration, fn func(ctx context.Context, job *river.Job[riverArgs]) error) (*river.Client[pgx.Tx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, &riverFunc{fn: fn})
	return river.NewClient(riverpgxv5.New(r.pool), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:           ws,
		FetchCooldown:     cooldown,
		FetchPollInterval: poll,
	})
}

// drain: a client with MaxWorkers = batch that fetches as fast as River
// allows (FetchCooldown and FetchPollInterval 1 ms), timed until n jobs
// are completed in the table (River's completer persists them in the
// background, in batches). The count is read every 10 ms.
func (r *rv) drain(ctx context.Context, n, batch int) error {
	c, err := r.client(batch, time.Millisecond, time.Millisecond, func(context.Context, *river.Job[riverArgs]) error { return nil })
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	var waitErr error
	for done := 0; done < n && waitErr == nil; {
		select {
		case <-tick.C:
			if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
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

// work: the worker writes the row and completes the job in one
// transaction of its own (JobCompleteTx), River's way to make an effect
// exactly once; fetching as fast as River allows.
func (r *rv) work(ctx context.Context, n int) error {
	completed := make(chan struct{}, n)
	c, err := r.client(workers, time.Millisecond, time.Millisecond, func(ctx context.Context, job *river.Job[riverArgs]) error {
		tx, err := r.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tx.Exec(ctx, `INSERT INTO done (n) VALUES ($1)`, job.ID); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		completed <- struct{}{}
		return nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	err = waitCount(ctx, completed, n, "river completed")
	return errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
}

// consume: a client with River's default fetch timings (FetchCooldown
// 100 ms, FetchPollInterval 1 s, and LISTEN/NOTIFY for new jobs) and
// MaxWorkers workers.
func (r *rv) consume(ctx context.Context, n int, ready func(), got func([]byte)) error {
	arrived := make(chan struct{}, n)
	c, err := r.client(workers, 0, 0, func(_ context.Context, job *river.Job[riverArgs]) error {
		got([]byte(job.Args.Body))
		arrived <- struct{}{}
		return nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	ready()
	err = waitCount(ctx, arrived, n, "river handled")
	return errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
}

// ---- raw SQL: the hand-written queue --------------------------------------

// raw is the hand-written peek-lock queue on the same database and the same
// client (database/sql over pgx, a pool of workers connections): one
// table, a partial index on the ready rows, a statement trigger that
// notifies the consumers of other processes (as mqlite's does), a claim by
// UPDATE of the lowest ready ids chosen FOR UPDATE SKIP LOCKED, completion
// by DELETE. No tokens, receipts, dedup, delivery counts, groups or
// dead letters.
type raw struct {
	db  *sql.DB
	url string
}

var rawSchema = []string{
	`CREATE TABLE raw_messages (
		id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		queue       text   NOT NULL,
		body        bytea  NOT NULL,
		state       text   NOT NULL DEFAULT 'ready',
		locked_until bigint NOT NULL DEFAULT 0,
		enqueued_at bigint NOT NULL
	)`,
	`CREATE INDEX raw_ready ON raw_messages (queue, id) WHERE state = 'ready'`,
	`CREATE FUNCTION raw_notify() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_notify('raw_claimable', 'bench');
		RETURN NULL;
	END
	$$`,
	`CREATE TRIGGER raw_notify AFTER INSERT ON raw_messages FOR EACH STATEMENT EXECUTE FUNCTION raw_notify()`,
	doneTable,
}

func openRaw(ctx context.Context, url string, setup bool) (side, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	if setup {
		for _, ddl := range rawSchema {
			if _, err := db.ExecContext(ctx, ddl); err != nil {
				return nil, errors.Join(fmt.Errorf("raw schema: %w", err), db.Close())
			}
		}
	}
	return &raw{db: db, url: url}, nil
}

func (r *raw) close() error { return r.db.Close() }

func (r *raw) send(ctx context.Context, bodies [][]byte) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UnixMilli()
	if len(bodies) == 1 {
		_, err = tx.ExecContext(ctx, `INSERT INTO raw_messages (queue, body, enqueued_at) VALUES ($1, $2, $3)`, queueName, bodies[0], now)
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO raw_messages (queue, body, enqueued_at)
			SELECT $1, b, $3 FROM unnest($2::bytea[]) AS b`, queueName, bodies, now)
	}
	if err != nil {
		return err
	}
	return tx.Commit()
}

// claim claims up to max ready messages (one statement, its own
// transaction) for a lease of 30 s.
func (r *raw) claim(ctx context.Context, max int) (ids []int64, bodies [][]byte, err error) {
	rows, err := r.db.QueryContext(ctx, `UPDATE raw_messages SET state = 'locked', locked_until = $3
		WHERE id IN (SELECT id FROM raw_messages WHERE queue = $1 AND state = 'ready'
			ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING id, body`, queueName, max, time.Now().Add(30*time.Second).UnixMilli())
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return nil, nil, err
		}
		ids, bodies = append(ids, id), append(bodies, body)
	}
	return ids, bodies, rows.Err()
}

// complete deletes the claimed messages ids (a statement of its own, or of
// tx when tx is not nil).
func (r *raw) complete(ctx context.Context, tx *sql.Tx, ids []int64) error {
	var err error
	const del = `DELETE FROM raw_messages WHERE id = ANY($1) AND state = 'locked'`
	if tx != nil {
		_, err = tx.ExecContext(ctx, del, ids)
	} else {
		_, err = r.db.ExecContext(ctx, del, ids)
	}
	if err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	return nil
}

func (r *raw) drain(ctx context.Context, n, batch int) error {
	for done := 0; done < n; {
		ids, _, err := r.claim(ctx, batch)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("queue empty after %d of %d", done, n)
		}
		if err := r.complete(ctx, nil, ids); err != nil {
			return err
		}
		done += len(ids)
	}
	return nil
}

// work: workers goroutines, each claims one message, then writes the row
// and deletes the message in one transaction; until the queue is empty.
func (r *raw) work(ctx context.Context, n int) error {
	var done atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				ids, _, err := r.claim(ctx, 1)
				if err != nil {
					errc <- err
					return
				}
				if len(ids) == 0 {
					return
				}
				if err := r.inTx(ctx, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO done (n) VALUES ($1)`, ids[0]); err != nil {
						return err
					}
					return r.complete(ctx, tx, ids)
				}); err != nil {
					errc <- err
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	if d := done.Load(); d != int64(n) {
		return fmt.Errorf("raw worked %d of %d", d, n)
	}
	return nil
}

func (r *raw) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// consume: one connection LISTENs and wakes the workers goroutines, each of
// which claims one message at a time, hands it over and deletes it, and
// waits for a notification (or 1 s) when the queue has none.
func (r *raw) consume(ctx context.Context, n int, ready func(), got func([]byte)) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `LISTEN raw_claimable`); err != nil {
		return err
	}
	wake := make(chan struct{}, workers)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if _, err := conn.WaitForNotification(ctx); err != nil {
				return
			}
			for range workers {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}
	})
	arrived := make(chan struct{}, n)
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ids, bodies, err := r.claim(ctx, 1)
				if err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
				if len(ids) == 0 {
					select {
					case <-wake:
					case <-time.After(time.Second):
					case <-ctx.Done():
					}
					continue
				}
				got(bodies[0])
				if err := r.complete(ctx, nil, ids); err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
				arrived <- struct{}{}
			}
		})
	}
	ready()
	err = waitCount(ctx, arrived, n, "raw handled")
	stop()
	wg.Wait()
	close(errc)
	return errors.Join(err, <-errc)
}
