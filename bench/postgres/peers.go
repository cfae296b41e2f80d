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
	// short names the side in its ratio's column, "mqlite / " short.
	short string
	// open opens the side on the schema of url; setup creates its tables
	// (the first process on the schema), else they are there.
	open func(ctx context.Context, url string, setup bool) (side, error)
}

// peers are the sides compared, in table order.
func peers() []peer {
	return []peer{
		{name: "mqlite", short: "mqlite", open: openMQ},
		{name: "River v0.51.2 pgx", short: "River", open: openRiver},
		{name: "raw SQL", short: "raw", open: openRaw},
		{name: "raw SQL, peek-lock", short: "raw peek-lock", open: openRawLock},
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

// ---- raw SQL: the hand-written queues -------------------------------------

// raw is a hand-written queue on the same database and the same client
// (database/sql over pgx, a pool of workers connections): one table, a
// partial index on the rows a claim reads, a statement trigger that
// notifies the consumers of other processes (as mqlite's does), a claim by
// UPDATE of the lowest claimable ids chosen FOR UPDATE SKIP LOCKED. With
// lease nil it is the minimal queue: the claim takes ready rows only and
// completion is a DELETE by id; no tokens, receipts, dedup, delivery
// counts, groups or dead letters. With a lease it is the peek-lock queue
// (see lease).
type raw struct {
	db    *sql.DB
	url   string
	lease *lease
}

// lease is what makes the hand-written queue peek-lock, the work mqlite's
// per-message path does for the same rows and nothing more: a claim takes
// the ready rows and those whose lease lapsed, draws a token
// (gen_random_uuid()), sets the lease's end and counts one more delivery;
// a row claimed again past max deliveries goes to state 'dead' instead of
// being handed out. A completion is fenced by the token and an unexpired
// lease; a fence that matches nothing is answered from the receipt, else
// it is errLockLost.
//
// A completion deletes the row and records (id, token) in raw_receipts,
// in one statement. Marking the row completed instead (mqlite's form: the
// completed row is the receipt) is one UPDATE, but it leaves the completed
// rows in the message table, and the claim's scan in id order walked them
// all until a sweep removed them (4,999 completed rows read before the
// first ready one, 2.8 ms a claim, in EXPLAIN ANALYZE): the hand-written
// queue keeps its table to the live rows and its receipts aside. A sweep
// would delete the receipts once expired; the benchmark runs none (nor
// mqlite's).
type lease struct {
	now           func() time.Time
	duration      time.Duration
	maxDeliveries int
}

// errLockLost is a completion whose token no longer holds the message's
// lease and that no receipt answers.
var errLockLost = errors.New("lock lost")

// delivery is a claimed message: its id, token ("" on the minimal queue)
// and body.
type delivery struct {
	id    int64
	token string
	body  []byte
}

// rawTrigger notifies raw_claimable once a statement inserted messages.
var rawTrigger = []string{
	`CREATE FUNCTION raw_notify() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_notify('raw_claimable', 'bench');
		RETURN NULL;
	END
	$$`,
	`CREATE TRIGGER raw_notify AFTER INSERT ON raw_messages FOR EACH STATEMENT EXECUTE FUNCTION raw_notify()`,
	doneTable,
}

var rawSchema = append([]string{
	`CREATE TABLE raw_messages (
		id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		queue       text   NOT NULL,
		body        bytea  NOT NULL,
		state       text   NOT NULL DEFAULT 'ready',
		locked_until bigint NOT NULL DEFAULT 0,
		enqueued_at bigint NOT NULL
	)`,
	`CREATE INDEX raw_ready ON raw_messages (queue, id) WHERE state = 'ready'`,
}, rawTrigger...)

// rawLockSchema is the peek-lock queue's: states ready, locked and dead,
// and the receipts of the completions. Its partial index holds the ready
// and the locked rows, in id order, so that the claim reads the lowest ids
// of both at once and skips the leases that hold.
var rawLockSchema = append([]string{
	`CREATE TABLE raw_messages (
		id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		queue          text   NOT NULL,
		body           bytea  NOT NULL,
		state          text   NOT NULL DEFAULT 'ready',
		lock_token     uuid,
		locked_until   bigint NOT NULL DEFAULT 0,
		delivery_count int    NOT NULL DEFAULT 0,
		enqueued_at    bigint NOT NULL
	)`,
	`CREATE TABLE raw_receipts (
		id         bigint PRIMARY KEY,
		lock_token uuid   NOT NULL,
		settled_at bigint NOT NULL
	)`,
	`CREATE INDEX raw_claimable ON raw_messages (queue, id) WHERE state IN ('ready', 'locked')`,
}, rawTrigger...)

// rawLease is the peek-lock queue's lease and its most deliveries, as
// mqlite's defaults (mqlite.DefaultMaxDeliveryCount).
const (
	rawLease         = 30 * time.Second
	rawMaxDeliveries = 10
)

func openRaw(ctx context.Context, url string, setup bool) (side, error) {
	return openRawWith(ctx, url, setup, nil)
}

func openRawLock(ctx context.Context, url string, setup bool) (side, error) {
	return openRawWith(ctx, url, setup, &lease{now: time.Now, duration: rawLease, maxDeliveries: rawMaxDeliveries})
}

func openRawWith(ctx context.Context, url string, setup bool, l *lease) (*raw, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	if setup {
		schema := rawSchema
		if l != nil {
			schema = rawLockSchema
		}
		for _, ddl := range schema {
			if _, err := db.ExecContext(ctx, ddl); err != nil {
				return nil, errors.Join(fmt.Errorf("raw schema: %w", err), db.Close())
			}
		}
	}
	return &raw{db: db, url: url, lease: l}, nil
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

// rawLockClaim claims up to $2 messages of queue $1 at $3 (now, Unix ms):
// ready or with a lapsed lease, the lowest ids, FOR UPDATE SKIP LOCKED.
// Each gets a token, the lease's end $4 and one more delivery; one whose
// deliveries reached $5 already goes to 'dead' instead. It returns the
// claimed rows and one row of id 0 counting the rows dead-lettered.
const rawLockClaim = `WITH c AS (
		SELECT id FROM raw_messages
		WHERE queue = $1 AND state IN ('ready', 'locked') AND (state = 'ready' OR locked_until <= $3)
		ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
	u AS (
		UPDATE raw_messages m SET
			state = CASE WHEN m.delivery_count >= $5 THEN 'dead' ELSE 'locked' END,
			lock_token = gen_random_uuid(), locked_until = $4, delivery_count = m.delivery_count + 1
		FROM c WHERE m.id = c.id
		RETURNING m.id, m.state, m.lock_token, m.body)
	SELECT id, lock_token::text, body FROM u WHERE state = 'locked'
	UNION ALL
	SELECT 0, '', NULL FROM u WHERE state = 'dead' HAVING count(*) > 0`

// claim claims up to max messages (one statement, its own transaction).
// On the peek-lock queue a claim that only dead-lettered is run again.
func (r *raw) claim(ctx context.Context, max int) ([]delivery, error) {
	for {
		var rows *sql.Rows
		var err error
		if r.lease == nil {
			rows, err = r.db.QueryContext(ctx, `UPDATE raw_messages SET state = 'locked', locked_until = $3
				WHERE id IN (SELECT id FROM raw_messages WHERE queue = $1 AND state = 'ready'
					ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
				RETURNING id, '', body`, queueName, max, time.Now().Add(rawLease).UnixMilli())
		} else {
			now := r.lease.now()
			rows, err = r.db.QueryContext(ctx, rawLockClaim, queueName, max, now.UnixMilli(),
				now.Add(r.lease.duration).UnixMilli(), r.lease.maxDeliveries)
		}
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		ds, dead, err := scanDeliveries(rows)
		if err != nil || len(ds) > 0 || !dead {
			return ds, err
		}
	}
}

// scanDeliveries reads a claim's rows; dead is whether the id 0 row was
// among them (rows dead-lettered).
func scanDeliveries(rows *sql.Rows) (ds []delivery, dead bool, err error) {
	defer rows.Close()
	for rows.Next() {
		var d delivery
		if err := rows.Scan(&d.id, &d.token, &d.body); err != nil {
			return nil, false, err
		}
		if d.id == 0 {
			dead = true
			continue
		}
		ds = append(ds, d)
	}
	return ds, dead, rows.Err()
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// complete completes the claimed messages ds in one statement (of its own,
// or of tx when tx is not nil). On the minimal queue it deletes them. On
// the peek-lock queue it deletes those whose token still holds an
// unexpired lease and records their receipts; each of the others is
// answered from its receipt (the same id and token: a retried completion
// succeeds) or is errLockLost.
func (r *raw) complete(ctx context.Context, tx *sql.Tx, ds []delivery) error {
	var q execer = r.db
	if tx != nil {
		q = tx
	}
	ids, tokens := make([]int64, len(ds)), make([]string, len(ds))
	for i, d := range ds {
		ids[i], tokens[i] = d.id, d.token
	}
	if r.lease == nil {
		if _, err := q.ExecContext(ctx, `DELETE FROM raw_messages WHERE id = ANY($1) AND state = 'locked'`, ids); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		return nil
	}
	now := r.lease.now().UnixMilli()
	var n int64
	if len(ds) == 1 {
		res, err := q.ExecContext(ctx, `WITH d AS (DELETE FROM raw_messages
				WHERE id = $1 AND lock_token = $2 AND state = 'locked' AND locked_until > $3 RETURNING id, lock_token)
			INSERT INTO raw_receipts (id, lock_token, settled_at) SELECT id, lock_token, $3 FROM d`, ds[0].id, ds[0].token, now)
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
	} else {
		res, err := q.ExecContext(ctx, `WITH d AS (DELETE FROM raw_messages m
				USING unnest($1::bigint[], $2::uuid[]) AS t(id, token)
				WHERE m.id = t.id AND m.lock_token = t.token AND m.state = 'locked' AND m.locked_until > $3
				RETURNING m.id, m.lock_token)
			INSERT INTO raw_receipts (id, lock_token, settled_at) SELECT id, lock_token, $3 FROM d`, ids, tokens, now)
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
	}
	if n == int64(len(ds)) {
		return nil
	}
	// Some fence matched nothing: each delivery that has no receipt lost
	// its lock (the rare path, so one look for all).
	var lost int64
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM unnest($1::bigint[], $2::uuid[]) AS t(id, token)
		WHERE NOT EXISTS (SELECT 1 FROM raw_receipts r WHERE r.id = t.id AND r.lock_token = t.token)`,
		ids, tokens).Scan(&lost); err != nil {
		return fmt.Errorf("complete: receipt: %w", err)
	}
	if lost > 0 {
		return fmt.Errorf("complete: %d of %d: %w", lost, len(ds), errLockLost)
	}
	return nil
}

func (r *raw) drain(ctx context.Context, n, batch int) error {
	for done := 0; done < n; {
		ds, err := r.claim(ctx, batch)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			return fmt.Errorf("queue empty after %d of %d", done, n)
		}
		if err := r.complete(ctx, nil, ds); err != nil {
			return err
		}
		done += len(ds)
	}
	return nil
}

// work: workers goroutines, each claims one message, then writes the row
// and completes the message in one transaction; until the queue is empty.
func (r *raw) work(ctx context.Context, n int) error {
	var done atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				ds, err := r.claim(ctx, 1)
				if err != nil {
					errc <- err
					return
				}
				if len(ds) == 0 {
					return
				}
				if err := r.inTx(ctx, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO done (n) VALUES ($1)`, ds[0].id); err != nil {
						return err
					}
					return r.complete(ctx, tx, ds)
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
// which claims one message at a time, hands it over and completes it, and
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
				ds, err := r.claim(ctx, 1)
				if err != nil {
					if ctx.Err() == nil {
						errc <- err
					}
					return
				}
				if len(ds) == 0 {
					select {
					case <-wake:
					case <-time.After(time.Second):
					case <-ctx.Done():
					}
					continue
				}
				got(ds[0].body)
				if err := r.complete(ctx, nil, ds); err != nil {
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
