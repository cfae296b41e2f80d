package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/bench/internal/mqside"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/jobs"
)

// jobWorkers is how many workers work at once in the "work" rows, on
// both sides.
const jobWorkers = 8

// BenchmarkJobs sets mqlite's typed jobs beside River's on a fresh SQLite
// file each: insert one job per transaction, insert 100 per transaction,
// and work jobs whose worker writes a row that commits with the job's
// completion (jobs.Job.CommitWith; River's JobCompleteTx in the worker's
// own transaction). Each op is one job. Both files have the same settings:
// mqlite's store its defaults (WAL, synchronous NORMAL, one connection),
// River's file the peer table's Settings (WAL, synchronous NORMAL,
// busy_timeout, BEGIN IMMEDIATE, one connection). Both sides work with
// jobWorkers workers; River fetches as fast as it allows (FetchCooldown
// and FetchPollInterval 1 ms). Each side learns of a finished job the
// moment its commit returns (mqlite's Observer.Completed, River's worker
// after its transaction), and the timer stops at the last one, before
// the workers shut down. Besides ns/op it reports jobs/s and cpu-µs/job:
// the process's CPU (user + system, getrusage) over the timed part,
// background goroutines included.
//
//	go test -C bench -run '^$' -bench BenchmarkJobs -benchtime 5000x -count 3 .
func BenchmarkJobs(b *testing.B) {
	for _, side := range []struct {
		name string
		open func(b *testing.B) jobSide
	}{{"mqlite", openJobsMQ}, {"river", openJobsRiver}} {
		b.Run("insert_1/"+side.name, func(b *testing.B) {
			s := side.open(b)
			m := startJobMeter(b)
			for i := range b.N {
				if err := s.insert(1, i); err != nil {
					b.Fatal(err)
				}
			}
			m.stop()
		})
		b.Run("insert_100/"+side.name, func(b *testing.B) {
			s := side.open(b)
			m := startJobMeter(b)
			for i := 0; i < b.N; i += 100 {
				if err := s.insert(min(100, b.N-i), i); err != nil {
					b.Fatal(err)
				}
			}
			m.stop()
		})
		b.Run("work_with_row/"+side.name, func(b *testing.B) {
			s := side.open(b)
			for i := 0; i < b.N; i += 100 {
				if err := s.insert(min(100, b.N-i), i); err != nil {
					b.Fatal(err)
				}
			}
			m := startJobMeter(b)
			if err := s.work(b.N, m.stop); err != nil {
				b.Fatal(err)
			}
			var rows int
			if err := s.db().QueryRow(`SELECT count(*) FROM done`).Scan(&rows); err != nil || rows != b.N {
				b.Fatalf("%d rows (%v), want %d", rows, err, b.N)
			}
		})
	}
}

// jobMeter times one sub-benchmark's jobs and reads the process's CPU
// over the same span.
type jobMeter struct {
	b   *testing.B
	cpu time.Duration
}

// startJobMeter resets b's timer and notes the CPU used so far.
func startJobMeter(b *testing.B) *jobMeter {
	b.ResetTimer()
	return &jobMeter{b: b, cpu: processCPU()}
}

// stop stops the timer and reports jobs/s and cpu-µs/job; a second call
// does nothing.
func (m *jobMeter) stop() {
	if m.b == nil {
		return
	}
	b := m.b
	m.b = nil
	b.StopTimer()
	cpu := processCPU() - m.cpu
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
}

// processCPU is the user plus system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// jobSide is one side of BenchmarkJobs.
type jobSide interface {
	db() *sql.DB
	// insert inserts n jobs in one transaction; first numbers them.
	insert(n, first int) error
	// work works the jobs until n of them have committed their row in
	// table done with their completion, calls finished, then stops the
	// workers.
	work(n int, finished func()) error
}

// benchJob is the job kind of both sides (River's args are the same
// shape: a kind and a JSON body).
type benchJob struct {
	N int `json:"n"`
}

// Kind names the kind.
func (benchJob) Kind() string { return "bench_job" }

const doneTable = `CREATE TABLE done (n INTEGER PRIMARY KEY)`

type jobsMQ struct{ st *mqlite.Store }

func openJobsMQ(b *testing.B) jobSide {
	st, err := mqlite.Open(context.Background(), filepath.Join(b.TempDir(), "jobs.db"), mqlite.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.CreateQueue(context.Background(), jobs.DefaultQueue, mqlite.QueueOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.DB().Exec(doneTable); err != nil {
		b.Fatal(err)
	}
	return &jobsMQ{st: st}
}

func (m *jobsMQ) db() *sql.DB { return m.st.DB() }

func (m *jobsMQ) insert(n, first int) error {
	ctx := context.Background()
	return m.st.Tx(ctx, func(tx *mqlite.Tx) error {
		if n == 1 {
			_, err := jobs.Insert(tx.Context(), tx.SQL(), benchJob{N: first}, nil)
			return err
		}
		params := make([]jobs.InsertManyParams, n)
		for i := range params {
			params[i] = jobs.InsertManyParams{Args: benchJob{N: first + i}}
		}
		_, err := jobs.InsertMany(tx.Context(), tx.SQL(), params)
		return err
	})
}

func (m *jobsMQ) work(n int, finished func()) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, job *jobs.Job[benchJob]) error {
		job.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
			sqlTx, err := consumer.SQL(tx)
			if err != nil {
				return err
			}
			_, err = sqlTx.ExecContext(ctx, `INSERT INTO done (n) VALUES (?)`, job.Args.N)
			return err
		})
		return nil
	}))
	completed := make(chan struct{}, n)
	ran := make(chan error, 1)
	go func() {
		ran <- w.Run(ctx, m.st, jobs.DefaultQueue, consumer.LoopConfig{Concurrency: jobWorkers,
			Logger: slog.New(slog.DiscardHandler), Observer: mqside.Counter(completed)})
	}()
	deadline := time.After(5 * time.Minute)
	for range n {
		select {
		case <-completed:
		case err := <-ran:
			return fmt.Errorf("workers stopped: %v", err)
		case <-deadline:
			return errors.New("the jobs were not worked in 5 minutes")
		}
	}
	finished()
	stop()
	return <-ran
}

type jobsRiver struct {
	sqlDB  *sql.DB
	client *river.Client[*sql.Tx]
}

func openJobsRiver(b *testing.B) jobSide {
	in, err := openRiver(context.Background(), filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = in.Close() })
	r := in.(*rv)
	if _, err := r.db.Exec(doneTable); err != nil {
		b.Fatal(err)
	}
	return &jobsRiver{sqlDB: r.db, client: r.insert}
}

func (r *jobsRiver) db() *sql.DB { return r.sqlDB }

// Kind of River's side: the same name.
type riverBenchJob benchJob

// Kind names the kind.
func (riverBenchJob) Kind() string { return "bench_job" }

func (r *jobsRiver) insert(n, first int) error {
	ctx := context.Background()
	return inTx(ctx, r.sqlDB, func(tx *sql.Tx) error {
		if n == 1 {
			_, err := r.client.InsertTx(ctx, tx, riverBenchJob{N: first}, nil)
			return err
		}
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: riverBenchJob{N: first + i}}
		}
		_, err := r.client.InsertManyTx(ctx, tx, params)
		return err
	})
}

// riverRowWorker writes the row and completes the job in one transaction
// of its own (JobCompleteTx), River's way to make an effect exactly once;
// after the commit it signals completed.
type riverRowWorker struct {
	river.WorkerDefaults[riverBenchJob]
	db        *sql.DB
	completed chan struct{}
}

// Work inserts the row and completes the job together.
func (w *riverRowWorker) Work(ctx context.Context, job *river.Job[riverBenchJob]) error {
	err := inTx(ctx, w.db, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO done (n) VALUES (?)`, job.Args.N); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riversqlite.Driver](ctx, tx, job)
		return err
	})
	if err == nil {
		w.completed <- struct{}{}
	}
	return err
}

func (r *jobsRiver) work(n int, finished func()) error {
	ctx := context.Background()
	completed := make(chan struct{}, n)
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverRowWorker{db: r.sqlDB, completed: completed})
	c, err := river.NewClient(riversqlite.New(r.sqlDB), &river.Config{
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: jobWorkers}},
		Workers:           workers,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: time.Millisecond,
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	deadline := time.NewTimer(5 * time.Minute)
	defer deadline.Stop()
	var waitErr error
	for done := 0; done < n && waitErr == nil; done++ {
		select {
		case <-completed:
		case <-deadline.C:
			waitErr = fmt.Errorf("river worked %d of %d", done, n)
		}
	}
	finished()
	return errors.Join(waitErr, c.Stop(ctx))
}
