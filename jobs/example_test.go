package jobs_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/mqlitetest"
)

// SendWelcome is a job kind: its arguments, encoded as JSON, and its name.
type SendWelcome struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

// Kind names the kind.
func (SendWelcome) Kind() string { return "send_welcome" }

// openJobs opens a store in a temporary folder with the queue "jobs" and a
// table users; the returned func closes and removes it.
func openJobs(ctx context.Context) (*mqlite.Store, func()) {
	return openJobsWith(ctx, mqlite.Config{}, mqlite.QueueOptions{})
}

// openJobsWith is openJobs with the store's cfg and the queue's opts.
func openJobsWith(ctx context.Context, cfg mqlite.Config, opts mqlite.QueueOptions) (*mqlite.Store, func()) {
	dir, err := os.MkdirTemp("", "mqlite-jobs")
	if err != nil {
		log.Fatal(err)
	}
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.CreateQueue(ctx, jobs.DefaultQueue, opts); err != nil {
		log.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL, welcomed INTEGER NOT NULL DEFAULT 0)`); err != nil {
		log.Fatal(err)
	}
	return st, func() {
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

// The user's row and the job that welcomes them commit together, or
// neither does.
func ExampleInsert() {
	ctx := context.Background()
	st, done := openJobs(ctx)
	defer done()

	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		res, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO users (email) VALUES (?)`, "ada@example.com")
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		job, err := jobs.Insert(tx.Context(), tx.SQL(), SendWelcome{UserID: id, Email: "ada@example.com"}, nil)
		if err != nil {
			return err
		}
		fmt.Println("job", job.ID, "of kind", job.Kind, "in queue", job.Queue)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: job 1 of kind send_welcome in queue jobs
}

// Several jobs in one transaction, of any kinds and queues.
func ExampleInsertMany() {
	ctx := context.Background()
	st, done := openJobs(ctx)
	defer done()

	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		res, err := jobs.InsertMany(tx.Context(), tx.SQL(), []jobs.InsertManyParams{
			{Args: SendWelcome{UserID: 1, Email: "ada@example.com"}},
			{Args: SendWelcome{UserID: 2, Email: "bob@example.com"}, InsertOpts: &jobs.InsertOpts{MaxAttempts: 5}},
		})
		for _, r := range res {
			fmt.Println("job", r.ID)
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// job 1
	// job 2
}

// A job unique by one of its arguments while it is not finished: the
// second insert returns the first job.
func ExampleUniqueOpts() {
	ctx := context.Background()
	st, done := openJobs(ctx)
	defer done()

	opts := &jobs.InsertOpts{Unique: jobs.UniqueOpts{ArgKeys: []string{"user_id"}}}
	for _, email := range []string{"ada@example.com", "ada@example.org"} {
		res, err := jobs.Insert(ctx, st.DB(), SendWelcome{UserID: 7, Email: email}, opts)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("job", res.ID, "duplicate:", res.Duplicate)
	}
	// Output:
	// job 1 duplicate: false
	// job 1 duplicate: true
}

// A worker per kind; its step marks the user welcomed in the transaction
// that completes the job, so the mark is written exactly once.
func ExampleAddWorker() {
	ctx := context.Background()
	st, done := openJobs(ctx)
	defer done()
	if _, err := st.DB().ExecContext(ctx, `INSERT INTO users (id, email) VALUES (7, 'ada@example.com')`); err != nil {
		log.Fatal(err)
	}
	if _, err := jobs.Insert(ctx, st.DB(), SendWelcome{UserID: 7, Email: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}

	worked := make(chan struct{})
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(ctx context.Context, job *jobs.Job[SendWelcome]) error {
		fmt.Println("welcoming", job.Args.Email, "attempt", job.Attempt)
		// ... call the mail service here, outside any transaction ...
		job.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
			sqlTx, err := consumer.SQL(tx)
			if err != nil {
				return err
			}
			_, err = sqlTx.ExecContext(ctx, `UPDATE users SET welcomed = 1 WHERE id = ?`, job.Args.UserID)
			return err
		})
		return nil
	}))

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() {
		ran <- w.Run(runCtx, st, jobs.DefaultQueue, consumer.LoopConfig{Concurrency: 4, Observer: onComplete(worked)})
	}()
	<-worked
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	var welcomed int
	if err := st.DB().QueryRowContext(ctx, `SELECT welcomed FROM users WHERE id = 7`).Scan(&welcomed); err != nil {
		log.Fatal(err)
	}
	fmt.Println("welcomed:", welcomed)
	// Output:
	// welcoming ada@example.com attempt 1
	// welcomed: 1
}

// onComplete closes done when the Loop completed a message.
type onComplete chan struct{}

func (o onComplete) Received(string, int)                                          {}
func (o onComplete) Completed(mqlite.Message, time.Duration)                       { close(o) }
func (o onComplete) Abandoned(mqlite.Message, time.Duration, time.Duration, error) {}
func (o onComplete) Rejected(mqlite.Message, time.Duration, error)                 {}
func (o onComplete) LockLost(mqlite.Message, error)                                {}
func (o onComplete) SettleFailed(mqlite.Message, error)                            {}

// A worker snoozes its job: it runs again after the delay, and the snooze
// does not count as an attempt.
func ExampleSnooze() {
	ctx := context.Background()
	st, done := openJobs(ctx)
	defer done()
	if _, err := jobs.Insert(ctx, st.DB(), SendWelcome{UserID: 7, Email: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}

	finished := make(chan struct{})
	var runs atomic.Int32
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(ctx context.Context, job *jobs.Job[SendWelcome]) error {
		if runs.Add(1) == 1 {
			fmt.Println("attempt", job.Attempt, "snoozed")
			return jobs.Snooze(10 * time.Millisecond) // e.g. quiet hours: later
		}
		fmt.Println("attempt", job.Attempt, "done")
		close(finished)
		return nil
	}))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx, st, jobs.DefaultQueue, consumer.LoopConfig{}) }()
	<-finished
	stop()
	if err := <-ran; err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 snoozed
	// attempt 1 done
}

// A job unique by its arguments within a period: a second insert in the
// same hour returns the first job, finished or not; the next hour adds a
// new one. The store reads a fake clock here (mqlitetest.NewClock), so
// that the hour passes at once; the queue's dedup window holds the hour.
func ExampleInsertOpts() {
	ctx := context.Background()
	clock := mqlitetest.NewClock()
	st, done := openJobsWith(ctx, mqlite.Config{Clock: clock}, mqlite.QueueOptions{DedupWindow: 2 * time.Hour})
	defer done()

	opts := &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
	insert := func() {
		res, err := jobs.Insert(ctx, st.DB(), SendWelcome{UserID: 7, Email: "ada@example.com"}, opts)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("job", res.ID, "duplicate:", res.Duplicate)
	}
	insert()
	insert()
	clock.Advance(time.Hour)
	insert()
	// Output:
	// job 1 duplicate: false
	// job 1 duplicate: true
	// job 2 duplicate: false
}

// Cancel a job that waits: it is removed, not dead-lettered.
func ExampleCancel() {
	ctx := context.Background()
	st, done := openJobs(ctx)
	defer done()

	job, err := jobs.Insert(ctx, st.DB(), SendWelcome{UserID: 7}, &jobs.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(jobs.Cancel(ctx, st, jobs.DefaultQueue, job.ID))
	fmt.Println(jobs.Cancel(ctx, st, jobs.DefaultQueue, job.ID))
	// Output:
	// <nil>
	// jobs: job not found: job 1 of queue "jobs"
}
