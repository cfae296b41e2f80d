package jobs_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/mqlitetest"
	"github.com/mqlite/mqlite/outbox"
)

var ctx = context.Background()

// EmailArgs is a kind of the tests.
type EmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	UserID  int64  `json:"user_id"`
}

func (EmailArgs) Kind() string { return "email" }

// ReportArgs is a kind whose defaults send it to queue "reports".
type ReportArgs struct {
	Day string `json:"day"`
}

func (ReportArgs) Kind() string { return "report" }

func (ReportArgs) InsertOpts() jobs.InsertOpts {
	return jobs.InsertOpts{Queue: "reports", MaxAttempts: 3}
}

// setup opens a store with the queues "jobs" and "reports" and a table
// sent(id, job) for the workers' rows.
func setup(t *testing.T, opts mqlite.QueueOptions) (*mqlite.Store, *mqlitetest.Clock) {
	t.Helper()
	t.Parallel()
	st, clock := mqlitetest.NewStore(t, mqlite.Config{})
	for _, q := range []string{jobs.DefaultQueue, "reports"} {
		must(t, st.CreateQueue(ctx, q, opts))
	}
	_, err := st.DB().ExecContext(ctx, `CREATE TABLE sent (id INTEGER PRIMARY KEY, job INTEGER NOT NULL UNIQUE)`)
	must(t, err)
	return st, clock
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// insert inserts one job in its own transaction.
func insert(t *testing.T, st *mqlite.Store, args jobs.JobArgs, opts *jobs.InsertOpts) jobs.InsertResult {
	t.Helper()
	var res jobs.InsertResult
	must(t, st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		res, err = jobs.Insert(tx.Context(), tx.SQL(), args, opts)
		return err
	}))
	return res
}

func count(t *testing.T, st *mqlite.Store, query string, args ...any) int {
	t.Helper()
	var n int
	must(t, st.DB().QueryRowContext(ctx, query, args...).Scan(&n))
	return n
}

func live(t *testing.T, st *mqlite.Store, queue string) []mqlite.Message {
	t.Helper()
	msgs, err := st.Peek(ctx, queue, mqlite.PeekParams{Max: 100})
	must(t, err)
	return msgs
}

func dead(t *testing.T, st *mqlite.Store, queue string) []mqlite.Message {
	t.Helper()
	msgs, err := st.PeekDeadLetters(ctx, queue, mqlite.PeekParams{Max: 100})
	must(t, err)
	return msgs
}

var cfg = consumer.LoopConfig{Concurrency: 2}

// quiet drops the logs of the Loops a test runs itself.
var quiet = slog.New(slog.DiscardHandler)

// A job inserted in the caller's transaction reaches its worker with its
// arguments, attempt and metadata; its step's row commits with the
// completion, once.
func TestInsertAndWork(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{})
	want := EmailArgs{To: "ada@example.com", Subject: "hi", UserID: 1 << 60}
	var res jobs.InsertResult
	must(t, st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		res, err = jobs.Insert(tx.Context(), tx.SQL(), want, nil)
		if err != nil {
			return err
		}
		mqlitetest.RequireInserted(t, tx.SQL(), want, nil) // visible inside the transaction
		return nil
	}))
	if res.ID == 0 || res.ID != res.Seq || res.Queue != jobs.DefaultQueue || res.Kind != "email" || res.Duplicate {
		t.Fatalf("result %+v", res)
	}
	m := mqlitetest.RequireInserted(t, st.DB(), want, nil)
	if m.Properties[jobs.PropKind] != "email" {
		t.Fatalf("properties %v", m.Properties)
	}

	var got []jobs.Job[EmailArgs]
	var mu sync.Mutex
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(ctx context.Context, job *jobs.Job[EmailArgs]) error {
		mu.Lock()
		got = append(got, *job)
		mu.Unlock()
		job.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
			sqlTx, err := consumer.SQL(tx)
			if err != nil {
				return err
			}
			_, err = sqlTx.ExecContext(ctx, `INSERT INTO sent (job) VALUES (?)`, job.ID)
			return err
		})
		return nil
	}))
	mqlitetest.WorkUntilIdle(t, st, w, cfg)
	if len(got) != 1 {
		t.Fatalf("%d calls, want 1", len(got))
	}
	j := got[0]
	if j.Args != want || j.ID != res.ID || j.Seq != res.Seq || j.Attempt != 1 || j.Kind != "email" ||
		j.Queue != jobs.DefaultQueue || !j.EnqueuedAt.Equal(clock.Now()) || j.MaxAttempts != 0 {
		t.Fatalf("job %+v", j)
	}
	if n := count(t, st, `SELECT count(*) FROM sent WHERE job = ?`, res.ID); n != 1 {
		t.Fatalf("%d rows of the step, want 1", n)
	}
	if n := len(live(t, st, jobs.DefaultQueue)) + len(dead(t, st, jobs.DefaultQueue)); n != 0 {
		t.Fatalf("%d messages left, want 0", n)
	}
}

// InsertMany keeps the order, sends runs of one queue together and takes
// each kind's defaults.
func TestInsertMany(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	var res []jobs.InsertResult
	must(t, st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		res, err = jobs.InsertMany(tx.Context(), tx.SQL(), []jobs.InsertManyParams{
			{Args: EmailArgs{To: "a"}},
			{Args: EmailArgs{To: "b"}},
			{Args: ReportArgs{Day: "mon"}},
			{Args: EmailArgs{To: "c"}, InsertOpts: &jobs.InsertOpts{Queue: "reports", MaxAttempts: 7}},
		})
		return err
	}))
	wantQ := []string{"jobs", "jobs", "reports", "reports"}
	for i, r := range res {
		if r.Queue != wantQ[i] || (i > 0 && r.Seq <= res[i-1].Seq) {
			t.Fatalf("results %+v", res)
		}
	}
	reports := live(t, st, "reports")
	if len(reports) != 2 || reports[0].Properties[jobs.PropMaxAttempts] != "3" || reports[1].Properties[jobs.PropMaxAttempts] != "7" {
		t.Fatalf("reports %+v", reports)
	}
	// A job that cannot be encoded fails the call before anything is written.
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := jobs.InsertMany(tx.Context(), tx.SQL(), []jobs.InsertManyParams{{Args: EmailArgs{To: "d"}}, {Args: badArgs{}}})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "job 1") {
		t.Fatalf("err %v, want job 1's encoding error", err)
	}
	if _, err := jobs.Insert(ctx, st.DB(), noKind{}, nil); !errors.Is(err, jobs.ErrInvalidKind) || !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("empty kind: %v", err)
	}
	if _, err := jobs.Insert(ctx, st.DB(), EmailArgs{}, &jobs.InsertOpts{Queue: "nope"}); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("unknown queue: %v", err)
	}
	must(t, st.CreateQueue(ctx, "bybody", mqlite.QueueOptions{DedupByBody: true}))
	b1 := insert(t, st, EmailArgs{To: "same"}, &jobs.InsertOpts{Queue: "bybody"})
	b2 := insert(t, st, EmailArgs{To: "same"}, &jobs.InsertOpts{Queue: "bybody"})
	if b1.Duplicate || !b2.Duplicate || b2.ID != b1.ID {
		t.Fatalf("a queue that de-duplicates by body: %+v, %+v", b1, b2)
	}
	if _, err := jobs.Insert(ctx, (*sql.Tx)(nil), EmailArgs{}, &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByArgs: true}}); !errors.Is(err, mqlite.ErrNilTx) {
		t.Fatalf("nil tx: %v", err)
	}
	other, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "other.db"))
	must(t, err)
	defer other.Close()
	for _, o := range []*jobs.InsertOpts{nil, {Unique: jobs.UniqueOpts{ByArgs: true}}, {Unique: jobs.UniqueOpts{ByPeriod: time.Hour}}} {
		if _, err := jobs.Insert(ctx, other, EmailArgs{}, o); !errors.Is(err, mqlite.ErrNotAStore) {
			t.Fatalf("another database, %+v: %v", o, err)
		}
	}
}

type badArgs struct{ C chan int }

func (badArgs) Kind() string { return "bad" }

type noKind struct{}

func (noKind) Kind() string { return "" }

// A job of a kind with no worker, one with no kind and one whose arguments
// do not decode are dead-lettered on their first delivery, with the reason.
func TestCannotRun(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	insert(t, st, ReportArgs{Day: "x"}, &jobs.InsertOpts{Queue: "jobs"}) // no worker for "report"
	_, err := outbox.Send(ctx, st, "jobs",
		outbox.Message{Body: []byte(`{}`)},
		outbox.Message{Body: []byte(`{"to": 5}`), Properties: map[string]string{jobs.PropKind: "email"}})
	must(t, err)
	w := jobs.NewWorkers()
	var calls atomic.Int32
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[EmailArgs]) error { calls.Add(1); return nil }))
	var mu sync.Mutex
	var errs []error
	c := cfg
	c.Observer = observer{rejected: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }}
	mqlitetest.WorkUntilIdle(t, st, w, c)
	d := dead(t, st, "jobs")
	if len(d) != 3 || calls.Load() != 0 {
		t.Fatalf("%d dead letters, %d calls; want 3, 0", len(d), calls.Load())
	}
	want := []string{`jobs: unknown kind "report"`, "jobs: unknown kind: the message has no", "jobs: invalid arguments: kind \"email\""}
	for i, m := range d {
		if m.DeliveryCount != 1 || !strings.HasPrefix(m.DeadLetterReason, want[i]) {
			t.Errorf("dead letter %d: count %d, reason %q, want 1, %q", i, m.DeliveryCount, m.DeadLetterReason, want[i])
		}
	}
	var unknown, invalid int // in any order: two workers reject at once
	for _, err := range errs {
		switch {
		case errors.Is(err, jobs.ErrUnknownKind):
			unknown++
		case errors.Is(err, jobs.ErrInvalidArgs):
			invalid++
		}
	}
	if len(errs) != 3 || unknown != 2 || invalid != 1 {
		t.Fatalf("observed errors %v", errs)
	}
}

// observer reports Loop's rejections.
type observer struct {
	consumer.NopObserver
	rejected func(error)
}

func (o observer) Rejected(_ mqlite.Message, _ time.Duration, err error) { o.rejected(err) }

// A failing job is retried after its kind's backoff until its MaxAttempts,
// then dead-lettered; a panic counts as a failure.
func TestAttemptsAndBackoff(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{})
	res := insert(t, st, EmailArgs{To: "x"}, &jobs.InsertOpts{MaxAttempts: 3})
	w := jobs.NewWorkers()
	var attempts []int
	var mu sync.Mutex
	jobs.AddWorkerWithOpts(w, jobs.WorkFunc(func(_ context.Context, job *jobs.Job[EmailArgs]) error {
		mu.Lock()
		attempts = append(attempts, job.Attempt)
		mu.Unlock()
		if job.Attempt == 2 {
			panic("boom")
		}
		return errors.New("smtp down")
	}), jobs.WorkerOpts{Backoff: func(attempt int) time.Duration { return time.Duration(attempt) * time.Hour }, MaxAttempts: 10})
	for i, wait := range []time.Duration{time.Hour, 2 * time.Hour} {
		mqlitetest.WorkUntilIdle(t, st, w, cfg)
		m := live(t, st, "jobs")
		if len(m) != 1 || m[0].State != mqlite.StateScheduled || !m[0].VisibleAt.Equal(clock.Now().Add(wait)) {
			t.Fatalf("after attempt %d: %+v, want scheduled in %v", i+1, m, wait)
		}
		clock.Advance(wait)
	}
	mqlitetest.WorkUntilIdle(t, st, w, cfg)
	d := dead(t, st, "jobs")
	if len(d) != 1 || d[0].Seq != res.Seq || d[0].DeadLetterReason != "jobs: attempt 3 of 3 failed" || d[0].DeadLetterDescription != "smtp down" {
		t.Fatalf("dead letters %+v", d)
	}
	if len(attempts) != 3 || attempts[0] != 1 || attempts[2] != 3 {
		t.Fatalf("attempts %v", attempts)
	}
	if !strings.Contains(d[0].LastError, "boom") {
		t.Fatalf("last error %q, want the panic's", d[0].LastError)
	}
}

// WorkerOpts.Timeout ends the attempt's ctx; the attempt is retried.
func TestTimeout(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	insert(t, st, EmailArgs{To: "x"}, nil)
	w := jobs.NewWorkers()
	jobs.AddWorkerWithOpts(w, jobs.WorkFunc(func(ctx context.Context, job *jobs.Job[EmailArgs]) error {
		<-ctx.Done()
		return ctx.Err()
	}), jobs.WorkerOpts{Timeout: 10 * time.Millisecond})
	mqlitetest.WorkUntilIdle(t, st, w, cfg)
	m := live(t, st, "jobs")
	if len(m) != 1 || m[0].State != mqlite.StateScheduled || !strings.Contains(m[0].LastError, "deadline exceeded") {
		t.Fatalf("%+v, want a retry after a deadline", m)
	}
}

// A unique job is unique while it is not finished: a second insert returns
// the first, also by named keys with other arguments; once it is done an
// insert adds a new one.
func TestUniqueWhileUnfinished(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	u := &jobs.InsertOpts{Unique: jobs.UniqueOpts{ArgKeys: []string{"user_id"}}}
	first := insert(t, st, EmailArgs{To: "a", UserID: 7}, u)
	again := insert(t, st, EmailArgs{To: "b", UserID: 7}, u) // other arguments, the same key
	other := insert(t, st, EmailArgs{To: "a", UserID: 8}, u)
	if first.Duplicate || !again.Duplicate || again.ID != first.ID || other.Duplicate || other.ID == first.ID {
		t.Fatalf("first %+v, again %+v, other %+v", first, again, other)
	}
	all := &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByArgs: true}}
	a1 := insert(t, st, EmailArgs{To: "z", UserID: 1 << 62}, all)
	a2 := insert(t, st, EmailArgs{To: "z", UserID: 1<<62 + 1}, all) // exact in JSON: another job
	a3 := insert(t, st, EmailArgs{To: "z", UserID: 1 << 62}, all)
	if a1.Duplicate || a2.Duplicate || !a3.Duplicate || a3.ID != a1.ID {
		t.Fatalf("by args: %+v %+v %+v", a1, a2, a3)
	}
	if n := len(live(t, st, "jobs")); n != 4 {
		t.Fatalf("%d jobs, want 4", n)
	}
	// In one batch, the second of two equal unique jobs is the first's duplicate.
	var many []jobs.InsertResult
	must(t, st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		many, err = jobs.InsertMany(tx.Context(), tx.SQL(), []jobs.InsertManyParams{
			{Args: EmailArgs{UserID: 99}, InsertOpts: u}, {Args: EmailArgs{To: "plain"}}, {Args: EmailArgs{UserID: 99}, InsertOpts: u}})
		return err
	}))
	if many[0].Duplicate || many[1].Duplicate || !many[2].Duplicate || many[2].ID != many[0].ID {
		t.Fatalf("batch %+v", many)
	}

	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[EmailArgs]) error { return nil }))
	mqlitetest.WorkUntilIdle(t, st, w, cfg)
	after := insert(t, st, EmailArgs{To: "c", UserID: 7}, u)
	if after.Duplicate || after.ID <= first.ID {
		t.Fatalf("after the first finished: %+v, want a new job", after)
	}
}

// With ByPeriod a job is unique within its period of the store's clock,
// finished or not; the period must fit the queue's dedup window.
func TestUniqueByPeriod(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{DedupWindow: 2 * time.Hour})
	clock.Set(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	p := &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByPeriod: time.Hour}}
	first := insert(t, st, ReportArgs{Day: "mon"}, p) // the kind's queue: reports
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[ReportArgs]) error { return nil }))
	mqlitetest.WorkUntilIdle(t, st, w, cfg, "reports")
	clock.Advance(59 * time.Minute)
	again := insert(t, st, ReportArgs{Day: "tue"}, p) // unique by kind alone, finished
	if first.Queue != "reports" || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	clock.Advance(time.Minute)
	next := insert(t, st, ReportArgs{Day: "tue"}, p)
	if next.Duplicate {
		t.Fatalf("next period: %+v, want a new job", next)
	}
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := jobs.Insert(tx.Context(), tx.SQL(), ReportArgs{}, &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByPeriod: 3 * time.Hour}})
		return err
	})
	if !errors.Is(err, jobs.ErrUniqueWindow) || !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("period past the window: %v", err)
	}
	if _, err := jobs.Insert(ctx, st.DB(), ReportArgs{}, &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByPeriod: time.Microsecond}}); !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Fatalf("a period under 1ms: %v", err)
	}
	must(t, st.CreateQueue(ctx, "nodedup", mqlite.QueueOptions{DedupWindow: -1}))
	_, err = jobs.Insert(ctx, st.DB(), ReportArgs{}, &jobs.InsertOpts{Queue: "nodedup", Unique: jobs.UniqueOpts{ByArgs: true}})
	if !errors.Is(err, jobs.ErrUniqueWindow) {
		t.Fatalf("dedup off: %v", err)
	}
}

// A snoozed job runs again after the delay with the same id and attempt
// number, and stays unique meanwhile; its worker's step commits with the
// snooze.
func TestSnooze(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{})
	u := &jobs.InsertOpts{MaxAttempts: 1, Unique: jobs.UniqueOpts{ByArgs: true}}
	res := insert(t, st, EmailArgs{To: "s"}, u)
	w := jobs.NewWorkers()
	var seen []jobs.Job[EmailArgs]
	jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, job *jobs.Job[EmailArgs]) error {
		seen = append(seen, *job)
		if len(seen) <= 2 {
			job.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
				sqlTx, err := consumer.SQL(tx)
				if err != nil {
					return err
				}
				_, err = sqlTx.ExecContext(ctx, `INSERT INTO sent (job) VALUES (?)`, len(seen))
				return err
			})
			return jobs.Snooze(time.Minute)
		}
		return nil
	}))
	for range 2 {
		mqlitetest.WorkUntilIdle(t, st, w, consumer.LoopConfig{})
		m := live(t, st, "jobs")
		if len(m) != 1 || m[0].State != mqlite.StateScheduled || !m[0].VisibleAt.Equal(clock.Now().Add(time.Minute)) {
			t.Fatalf("after the snooze: %+v", m)
		}
		dup := insert(t, st, EmailArgs{To: "s"}, u)
		if !dup.Duplicate || dup.ID != res.ID || dup.Seq != m[0].Seq {
			t.Fatalf("insert while snoozed: %+v, want the job %d at seq %d", dup, res.ID, m[0].Seq)
		}
		clock.Advance(time.Minute)
	}
	mqlitetest.WorkUntilIdle(t, st, w, consumer.LoopConfig{})
	if len(seen) != 3 {
		t.Fatalf("%d calls, want 3", len(seen))
	}
	for i, j := range seen {
		if j.ID != res.ID || j.Attempt != 1 || (i > 0 && j.Seq <= seen[i-1].Seq) {
			t.Fatalf("call %d: %+v, want id %d, attempt 1, a new seq", i, j, res.ID)
		}
	}
	if n := count(t, st, `SELECT count(*) FROM sent`); n != 2 {
		t.Fatalf("%d step rows, want 2", n)
	}
	if n := len(live(t, st, "jobs")) + len(dead(t, st, "jobs")); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// Cancel removes a waiting job (a snoozed one by its id too); it is not
// dead-lettered, frees its unique key, and a second Cancel finds nothing.
func TestCancelWaiting(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{})
	u := &jobs.InsertOpts{ScheduledAt: clock.Now().Add(time.Hour), Unique: jobs.UniqueOpts{ByArgs: true}}
	res := insert(t, st, EmailArgs{To: "c"}, u)
	must(t, jobs.Cancel(ctx, st, "jobs", res.ID))
	if n := len(live(t, st, "jobs")) + len(dead(t, st, "jobs")); n != 0 {
		t.Fatalf("%d messages after the cancel, want 0", n)
	}
	if err := jobs.Cancel(ctx, st, "jobs", res.ID); !errors.Is(err, jobs.ErrJobNotFound) {
		t.Fatalf("second cancel: %v", err)
	}
	if again := insert(t, st, EmailArgs{To: "c"}, u); again.Duplicate {
		t.Fatalf("the key stayed taken: %+v", again)
	}

	// A snoozed job is cancelled by its first id.
	snoozed := insert(t, st, EmailArgs{To: "z"}, nil)
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[EmailArgs]) error { return jobs.Snooze(time.Hour) }))
	mqlitetest.WorkUntilIdle(t, st, w, cfg)
	must(t, jobs.Cancel(ctx, st, "jobs", snoozed.ID))
	for _, m := range live(t, st, "jobs") {
		if m.Properties[jobs.PropID] != "" {
			t.Fatalf("the snoozed job is still there: %+v", m)
		}
	}
}

// Cancel of a running job cancels its ctx with ErrCancelled and refuses
// its completion: the step's rows roll back, the job is gone, not dead.
func TestCancelRunning(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	res := insert(t, st, EmailArgs{To: "r"}, nil)
	started := make(chan struct{})
	cause := make(chan error, 1)
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(ctx context.Context, job *jobs.Job[EmailArgs]) error {
		job.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
			sqlTx, err := consumer.SQL(tx)
			if err != nil {
				return err
			}
			_, err = sqlTx.ExecContext(ctx, `INSERT INTO sent (job) VALUES (?)`, job.ID)
			return err
		})
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil // even a worker that claims success is refused
	}))
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(lctx, st, "jobs", consumer.LoopConfig{Logger: quiet}) }()
	<-started
	must(t, jobs.Cancel(ctx, st, "jobs", res.ID))
	select {
	case err := <-cause:
		if !errors.Is(err, jobs.ErrCancelled) {
			t.Fatalf("cause %v, want ErrCancelled", err)
		}
	case <-time.After(30 * time.Second): // the lease ends on the fake clock only: no renewal would end it
		t.Fatal("the worker's ctx was not cancelled")
	}
	stop()
	must(t, <-done)
	if n := count(t, st, `SELECT count(*) FROM sent`); n != 0 {
		t.Fatalf("%d step rows committed, want 0", n)
	}
	if n := len(live(t, st, "jobs")) + len(dead(t, st, "jobs")); n != 0 {
		t.Fatalf("%d messages left, want 0", n)
	}
}

// A worker that ignores its ctx and succeeds after its job was cancelled
// (as one in another process, whose ctx ends only at its next renewal)
// has its completion refused: its step's rows roll back.
func TestCancelRunningRefused(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	res := insert(t, st, EmailArgs{To: "r"}, nil)
	started, release := make(chan struct{}), make(chan struct{})
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, job *jobs.Job[EmailArgs]) error {
		job.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
			sqlTx, err := consumer.SQL(tx)
			if err != nil {
				return err
			}
			_, err = sqlTx.ExecContext(ctx, `INSERT INTO sent (job) VALUES (?)`, job.ID)
			return err
		})
		close(started)
		<-release
		return nil
	}))
	lost := make(chan error, 1)
	c := consumer.LoopConfig{Observer: lockLost{lost: lost}, Logger: quiet}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(lctx, st, "jobs", c) }()
	<-started
	must(t, jobs.Cancel(ctx, st, "jobs", res.ID))
	close(release)
	if err := <-lost; !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("completion: %v, want ErrLockLost", err)
	}
	stop()
	must(t, <-done)
	if n := count(t, st, `SELECT count(*) FROM sent`); n != 0 {
		t.Fatalf("%d step rows committed, want 0", n)
	}
}

// lockLost reports the Loop's lost leases.
type lockLost struct {
	consumer.NopObserver
	lost chan error
}

func (o lockLost) LockLost(_ mqlite.Message, err error) {
	select {
	case o.lost <- err:
	default: // the first one is what the test reads
	}
}

// A worker that returns JobCancel finishes its job without its step.
func TestJobCancel(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	insert(t, st, EmailArgs{To: "x"}, nil)
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, job *jobs.Job[EmailArgs]) error {
		job.CommitWith(func(context.Context, consumer.Tx) error { return errors.New("must not run") })
		return jobs.JobCancel(errors.New("user gone"))
	}))
	mqlitetest.WorkUntilIdle(t, st, w, cfg)
	if n := len(live(t, st, "jobs")) + len(dead(t, st, "jobs")); n != 0 {
		t.Fatalf("%d messages left, want 0", n)
	}
}

// AddWorker refuses a second worker for a kind.
func TestAddWorkerTwice(t *testing.T) {
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[EmailArgs]) error { return nil }))
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"email" already`) {
			t.Fatalf("panic %v", r)
		}
	}()
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[EmailArgs]) error { return nil }))
}

// WorkerOpts.MaxAttempts bounds the jobs inserted without their own; the
// insert's GroupID and ScheduledAt reach the message.
func TestKindDefaults(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{})
	at := clock.Now().Add(time.Minute)
	insert(t, st, EmailArgs{To: "g"}, &jobs.InsertOpts{GroupID: "user-7", ScheduledAt: at})
	m := live(t, st, "jobs")
	if len(m) != 1 || m[0].GroupID != "user-7" || m[0].State != mqlite.StateScheduled || !m[0].VisibleAt.Equal(at) {
		t.Fatalf("%+v", m)
	}
	clock.Advance(time.Minute)
	w := jobs.NewWorkers()
	var got jobs.Job[EmailArgs]
	jobs.AddWorkerWithOpts(w, jobs.WorkFunc(func(_ context.Context, job *jobs.Job[EmailArgs]) error {
		got = *job
		return errors.New("no")
	}), jobs.WorkerOpts{MaxAttempts: 1})
	mqlitetest.WorkUntilIdle(t, st, w, cfg)
	if d := dead(t, st, "jobs"); len(d) != 1 || d[0].DeadLetterReason != "jobs: attempt 1 of 1 failed" || got.MaxAttempts != 1 {
		t.Fatalf("dead letters %+v, job %+v", d, got)
	}
}

// TestInsertOptsPriority: InsertOpts.Priority becomes the message's
// priority, over the kind's defaults (which it leaves when 0); out of range
// is refused by the send, as any message's field is.
func TestInsertOptsPriority(t *testing.T) {
	t.Parallel()
	if _, msg, err := jobs.Message(ReportArgs{Day: "mon"}, &jobs.InsertOpts{Priority: 4}); err != nil || msg.Priority != 4 {
		t.Fatalf("priority %d (%v), want 4", msg.Priority, err)
	}
	if _, msg, err := jobs.Message(ReportArgs{Day: "mon"}, nil); err != nil || msg.Priority != 0 {
		t.Fatalf("priority %d (%v), want the default 0", msg.Priority, err)
	}
	_, msg, err := jobs.Message(ReportArgs{Day: "mon"}, &jobs.InsertOpts{Priority: mqlite.MaxPriority + 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := msg.Validate(); !errors.Is(err, mqlite.ErrInvalidMessage) {
		t.Fatalf("priority out of range: %v, want ErrInvalidMessage when sent", err)
	}
}
