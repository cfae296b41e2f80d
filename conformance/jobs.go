package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/outbox"
)

// jobQueue is the queue of the Jobs area's jobs; "out" takes what their
// workers' steps send.
const jobQueue = "kit-jobs"

// kitEmail and kitReport are the Jobs area's two kinds.
type kitEmail struct {
	To string `json:"to"`
}

func (kitEmail) Kind() string { return "kit_email" }

type kitReport struct {
	Day string `json:"day"`
}

func (kitReport) Kind() string { return "kit_report" }

// uniqueStore is what jobs.Insert needs: a database to open the caller's
// transaction on (a unique insert looks the job's key up in it).
type uniqueStore interface{ DB() *sql.DB }

// jobTests: package jobs on the implementation. A worker per kind gets its
// job's decoded arguments and attempt; a job that cannot run is
// dead-lettered at once with the reason; a unique job is unique by its
// arguments while unfinished or within its period; a job is cancelled
// while it waits or while it runs (finished, not dead); a snoozed job runs
// again after its delay without counting an attempt; a worker's step
// commits exactly once, with the job's completion.
var jobTests = []subtest{
	// Each kind's worker gets its own jobs, decoded, with their attempt
	// (a failed attempt counts; the id stays the insert's).
	{"Kinds", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		email := k.insertJob(kitEmail{To: "ada"}, nil)
		report := k.insertJob(kitReport{Day: "mon"}, nil)
		type got struct {
			id      int64
			arg     string
			attempt int
		}
		var mu sync.Mutex
		var emails, reports []got
		w := jobs.NewWorkers()
		jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, j *jobs.Job[kitEmail]) error {
			mu.Lock()
			defer mu.Unlock()
			emails = append(emails, got{j.ID, j.Args.To, j.Attempt})
			return nil
		}))
		jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, j *jobs.Job[kitReport]) error {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, got{j.ID, j.Args.Day, j.Attempt})
			if j.Attempt == 1 {
				return errGatewayDown
			}
			return nil
		}))
		ev, stop := k.runWorkers(w)
		ev.wait(k, "completed", email.ID, report.ID)
		stop()
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(emails) != fmt.Sprint([]got{{email.ID, "ada", 1}}) {
			t.Fatalf("the email worker got %v, want job %d once, to ada, attempt 1", emails, email.ID)
		}
		if fmt.Sprint(reports) != fmt.Sprint([]got{{report.ID, "mon", 1}, {report.ID, "mon", 2}}) {
			t.Fatalf("the report worker got %v, want job %d for mon, attempts 1 and 2", reports, report.ID)
		}
		if n := len(k.peek(jobQueue)); n != 0 {
			t.Fatalf("%d jobs left, want none", n)
		}
	}},
	// A job of a kind without a worker, a message without a kind and
	// arguments that do not decode are dead-lettered on their first
	// delivery, with the reason; never retried, though the queue would.
	{"CannotRunDeadLettered", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		unknown := k.insertJob(kitReport{Day: "mon"}, nil)
		noKind := k.send(jobQueue, outbox.Message{Body: []byte(`{}`)})[0]
		badArgs := k.send(jobQueue, outbox.Message{Body: []byte(`not json`), Properties: map[string]string{jobs.PropKind: "kit_email"}})[0]
		var called atomic.Int32
		w := jobs.NewWorkers()
		jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[kitEmail]) error { called.Add(1); return nil }))
		ev, stop := k.runWorkers(w)
		ev.wait(k, "rejected", unknown.ID, noKind, badArgs)
		stop()
		if n := called.Load(); n != 0 {
			t.Fatalf("the worker was called %d times, want never", n)
		}
		want := map[int64]string{unknown.ID: "unknown kind", noKind: "unknown kind", badArgs: "invalid arguments"}
		dead := k.deadLetters(jobQueue)
		if len(dead) != len(want) {
			t.Fatalf("%d dead letters, want %d", len(dead), len(want))
		}
		for _, m := range dead {
			why := m.DeadLetterReason + " " + m.DeadLetterDescription
			if !strings.Contains(why, want[m.Seq]) {
				t.Fatalf("dead letter %d: reason %q, want it to say %q", m.Seq, why, want[m.Seq])
			}
			if m.DeliveryCount != 1 {
				t.Fatalf("dead letter %d was delivered %d times, want once: never retried", m.Seq, m.DeliveryCount)
			}
		}
	}},
	// Unique by its arguments while unfinished: a second insert returns
	// the first job while it waits; other arguments are another job; once
	// the job is completed, an insert adds a new one.
	{"UniqueWhileUnfinished", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		opts := &jobs.InsertOpts{Queue: jobQueue, Unique: jobs.UniqueOpts{ByArgs: true}}
		first := k.insertJob(kitEmail{To: "ada"}, opts)
		k.wantJob(k.insertJob(kitEmail{To: "ada"}, opts), first.ID, true, "the same arguments while waiting")
		bob := k.insertJob(kitEmail{To: "bob"}, opts)
		if bob.Duplicate || bob.ID == first.ID {
			t.Fatalf("other arguments: %+v, want a new job", bob)
		}
		k.workAll(first.ID, bob.ID)
		again := k.insertJob(kitEmail{To: "ada"}, opts)
		if again.Duplicate || again.ID == first.ID {
			t.Fatalf("the same arguments once the job is completed: %+v, want a new job", again)
		}
	}},
	// A snoozed unique job stays unique: an insert while it is snoozed
	// returns it (its id, not its copy's seq); once it has run, an insert
	// adds a new job.
	{"UniqueWhileSnoozed", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		opts := &jobs.InsertOpts{Queue: jobQueue, Unique: jobs.UniqueOpts{ByArgs: true}}
		first := k.insertJob(kitEmail{To: "ada"}, opts)
		var runs atomic.Int32
		w := jobs.NewWorkers()
		jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[kitEmail]) error {
			if runs.Add(1) == 1 {
				return jobs.Snooze(time.Hour)
			}
			return nil
		}))
		ev, stop := k.runWorkers(w)
		ev.wait(k, "completed", first.ID) // the snooze completes the first message
		stop()
		k.wantJob(k.insertJob(kitEmail{To: "ada"}, opts), first.ID, true, "the same arguments while the job is snoozed")
		k.advance(time.Hour)
		ev, stop = k.runWorkers(w)
		ev.wait(k, "completed", first.ID)
		stop()
		if n := runs.Load(); n != 2 {
			t.Fatalf("the worker ran %d times, want twice", n)
		}
		again := k.insertJob(kitEmail{To: "ada"}, opts)
		if again.Duplicate || again.ID == first.ID {
			t.Fatalf("the same arguments once the job has run: %+v, want a new job", again)
		}
	}},
	// Unique by its arguments within a period: a second insert returns
	// the first job, finished or not, until the period ends.
	{"UniqueByPeriod", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		opts := &jobs.InsertOpts{Queue: jobQueue, Unique: jobs.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
		first := k.insertJob(kitEmail{To: "ada"}, opts)
		k.wantJob(k.insertJob(kitEmail{To: "ada"}, opts), first.ID, true, "the same arguments while waiting")
		k.workAll(first.ID)
		k.wantJob(k.insertJob(kitEmail{To: "ada"}, opts), first.ID, true, "the same arguments in the period, the job completed")
		k.advance(time.Hour)
		next := k.insertJob(kitEmail{To: "ada"}, opts)
		if next.Duplicate || next.ID == first.ID {
			t.Fatalf("the same arguments in the next period: %+v, want a new job", next)
		}
	}},
	// A job cancelled while it waits (due or scheduled) is removed, not
	// dead-lettered; cancelling it again is ErrJobNotFound.
	{"CancelWaiting", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		cs := optional[jobs.CancelStore](k, "jobs.CancelStore (Find and Purge)")
		due := k.insertJob(kitEmail{To: "ada"}, nil)
		later := k.insertJob(kitEmail{To: "bob"}, &jobs.InsertOpts{Queue: jobQueue, ScheduledAt: k.clock.Now().Add(time.Hour)})
		for _, id := range []int64{due.ID, later.ID} {
			k.must(jobs.Cancel(k.ctx, cs, jobQueue, id), "cancel a waiting job")
			k.wantErr(jobs.Cancel(k.ctx, cs, jobQueue, id), jobs.ErrJobNotFound, "cancel it again")
		}
		k.advance(time.Hour)
		k.none(jobQueue)
		if n := len(k.deadLetters(jobQueue)); n != 0 {
			t.Fatalf("%d dead letters, want none: a cancelled job is finished", n)
		}
	}},
	// A job cancelled while it runs: its worker's ctx is cancelled (the
	// cause ErrCancelled), its completion is refused (ErrLockLost) with
	// its step's send, and it is finished, not dead; it never comes back.
	{"CancelRunning", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		cs := optional[jobs.CancelStore](k, "jobs.CancelStore (Find and Purge)")
		job := k.insertJob(kitEmail{To: "ada"}, nil)
		started := make(chan struct{})
		cause := make(chan error, 1)
		w := jobs.NewWorkers()
		jobs.AddWorker(w, jobs.WorkFunc(func(ctx context.Context, j *jobs.Job[kitEmail]) error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			j.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
				return tx.Send(ctx, "out", outbox.Message{Body: []byte("effect")})
			})
			return nil // completes, but for the cancel
		}))
		ev, stop := k.runWorkers(w)
		k.within(started, loopBound, func() string { return "the worker did not start" })
		k.must(jobs.Cancel(k.ctx, cs, jobQueue, job.ID), "cancel the running job")
		if err := <-cause; !errors.Is(err, jobs.ErrCancelled) {
			t.Fatalf("the worker's ctx ended with %v, want jobs.ErrCancelled", err)
		}
		e := ev.next(k)
		if e.what != "locklost" || !errors.Is(e.err, mqlite.ErrLockLost) {
			t.Fatalf("after the cancel the Loop %s the job (%v), want its completion refused with ErrLockLost", e.what, e.err)
		}
		stop()
		if n := len(k.peek("out")); n != 0 {
			t.Fatalf("out holds %d messages, want none: the cancelled job's step committed", n)
		}
		if n := len(k.deadLetters(jobQueue)); n != 0 {
			t.Fatalf("%d dead letters, want none: a cancelled job is finished", n)
		}
		k.advance(2 * lease)
		k.none(jobQueue)
		k.wantErr(jobs.Cancel(k.ctx, cs, jobQueue, job.ID), jobs.ErrJobNotFound, "cancel it again")
	}},
	// A snoozed job runs again after its delay, by the implementation's
	// clock, with the same id and without counting an attempt; the step it
	// set with the snooze commits with it.
	{"Snooze", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		job := k.insertJob(kitEmail{To: "ada"}, nil)
		var mu sync.Mutex
		var attempts []int
		w := jobs.NewWorkers()
		jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, j *jobs.Job[kitEmail]) error {
			mu.Lock()
			defer mu.Unlock()
			if j.ID != job.ID {
				return consumer.Permanent(fmt.Errorf("job id %d, want %d", j.ID, job.ID))
			}
			attempts = append(attempts, j.Attempt)
			if len(attempts) == 1 {
				j.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
					return tx.Send(ctx, "out", outbox.Message{Body: []byte("snoozed")})
				})
				return jobs.Snooze(time.Hour)
			}
			return nil
		}))
		ev, stop := k.runWorkers(w)
		ev.wait(k, "completed", job.ID)
		stop()
		if n := len(k.peek("out")); n != 1 {
			t.Fatalf("out holds %d messages, want the snooze's step once", n)
		}
		k.advance(time.Hour - time.Millisecond)
		k.none(jobQueue)
		k.advance(time.Millisecond)
		ev, stop = k.runWorkers(w)
		e := ev.next(k)
		if e.what != "completed" {
			t.Fatalf("the snoozed job was %s (%v), want completed", e.what, e.err)
		}
		stop()
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(attempts) != "[1 1]" {
			t.Fatalf("attempts %v, want [1 1]: a snooze does not count", attempts)
		}
		if n := len(k.peek(jobQueue)); n != 0 {
			t.Fatalf("%d jobs left, want none", n)
		}
	}},
	// A worker's step commits exactly once, with the job's completion: a
	// failed attempt and a step that fails roll its send back, and the
	// job's success commits it once.
	{"EffectsOnceThroughStep", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		job := k.insertJob(kitEmail{To: "ada"}, nil)
		w := jobs.NewWorkers()
		jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, j *jobs.Job[kitEmail]) error {
			attempt := j.Attempt
			j.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
				if err := tx.Send(ctx, "out", outbox.Message{Body: []byte(j.Args.To)}); err != nil {
					return err
				}
				if attempt == 2 {
					return errors.New("the step fails after its send")
				}
				return nil
			})
			if attempt == 1 {
				return errGatewayDown
			}
			return nil
		}))
		ev, stop := k.runWorkers(w)
		ev.wait(k, "completed", job.ID)
		stop()
		out := k.peek("out")
		if len(out) != 1 || string(out[0].Body) != "ada" {
			t.Fatalf("out holds %d messages, want the third attempt's once", len(out))
		}
		k.advance(2 * lease)
		k.none(jobQueue)
	}},
	// History bounds: each failed delivery keeps its error, time and
	// worker, the last mqlite.DefaultAttemptHistory of them (the oldest
	// go first), shown by Peek and the next delivery and kept into the
	// dead letters; a job's worker sees its job's failed attempts.
	{"HistoryBounds", func(t *testing.T, h Harness) {
		k := jobsKit(t, h)
		const failures = mqlite.DefaultAttemptHistory + 2
		k.queue("h", mqlite.QueueOptions{MaxDeliveryCount: failures})
		seq := k.sendN("h", 1)[0]
		var ats []time.Time
		for i := range failures {
			m := k.one("h", seq)
			if i > 0 && len(m.Attempts) != min(i, mqlite.DefaultAttemptHistory) {
				t.Fatalf("delivery %d shows %d failed attempts, want %d", i+1, len(m.Attempts), min(i, mqlite.DefaultAttemptHistory))
			}
			ats = append(ats, k.clock.Now())
			k.must(k.st.AbandonWithReason(k.ctx, m.Lock(), 0, fmt.Sprint("failure ", i)), "abandon with a reason")
			k.advance(time.Second)
			if i == 0 {
				if p := k.peek("h"); len(p) != 1 || len(p[0].Attempts) != 1 || p[0].Attempts[0].Error != "failure 0" {
					t.Fatalf("peek after one failure: %+v", p)
				}
			}
		}
		dead := k.deadLetters("h")
		if len(dead) != 1 || len(dead[0].Attempts) != mqlite.DefaultAttemptHistory {
			t.Fatalf("dead letters %+v, want one with the last %d attempts", dead, mqlite.DefaultAttemptHistory)
		}
		for i, a := range dead[0].Attempts {
			j := i + failures - mqlite.DefaultAttemptHistory
			if a.Error != fmt.Sprint("failure ", j) || !a.At.Equal(ats[j]) || a.Worker == "" {
				t.Fatalf("dead letter's attempt %d: %+v, want failure %d at %v by a named worker", i, a, j, ats[j])
			}
		}
		// A job: its third attempt sees the two before, oldest first.
		job := k.insertJob(kitEmail{To: "ada"}, nil)
		var seen []string
		w := jobs.NewWorkers()
		jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, j *jobs.Job[kitEmail]) error {
			if j.Attempt < 3 {
				return fmt.Errorf("attempt %d failed", j.Attempt)
			}
			for _, e := range j.Errors {
				seen = append(seen, e.Error)
			}
			return nil
		}))
		ev, stop := k.runWorkers(w)
		ev.wait(k, "completed", job.ID)
		stop()
		if want := []string{"attempt 1 failed", "attempt 2 failed"}; fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("the third attempt saw errors %q, want %q", seen, want)
		}
	}},
}

// jobsKit opens an implementation with the queue of the jobs (retrying up
// to ten deliveries) and the queue "out".
func jobsKit(t *testing.T, h Harness) *kit {
	k := open(t, h)
	k.queue(jobQueue, mqlite.QueueOptions{MaxDeliveryCount: 10, DedupWindow: 2 * time.Hour})
	k.queue("out", mqlite.QueueOptions{})
	return k
}

// insertJob inserts a job into jobQueue (unless opts names another): with
// jobs.Insert on the implementation's database when it has one, else with
// jobs.InsertVia on its jobs.Inserter (the broker's client), else with
// jobs.Message sent through the store (skipping a unique job, which that
// cannot insert).
func (k *kit) insertJob(args jobs.JobArgs, opts *jobs.InsertOpts) jobs.InsertResult {
	k.t.Helper()
	if opts == nil {
		opts = &jobs.InsertOpts{Queue: jobQueue}
	}
	if db, ok := k.st.(uniqueStore); ok {
		res, err := jobs.Insert(k.ctx, db.DB(), args, opts)
		k.must(err, "insert a job")
		return res
	}
	if ins, ok := k.st.(jobs.Inserter); ok {
		res, err := jobs.InsertVia(k.ctx, ins, args, opts)
		k.must(err, "insert a job")
		return res
	}
	queue, msg, err := jobs.Message(args, opts)
	if errors.Is(err, jobs.ErrUniqueNeedsStore) {
		k.t.Skip("the store has no database handle (jobs.Insert) and is not a jobs.Inserter (jobs.InsertVia): a unique job cannot be inserted")
	}
	k.must(err, "a job's message")
	seq := k.send(queue, msg)[0]
	return jobs.InsertResult{ID: seq, Seq: seq, Queue: queue, Kind: args.Kind()}
}

// wantJob fails unless res is the job id, a duplicate or not as dup says.
func (k *kit) wantJob(res jobs.InsertResult, id int64, dup bool, what string) {
	k.t.Helper()
	if res.ID != id || res.Duplicate != dup {
		k.t.Fatalf("%s: job %d (duplicate %v), want job %d (duplicate %v)", what, res.ID, res.Duplicate, id, dup)
	}
}

// workAll completes the jobs ids of kind kitEmail with a worker that does
// nothing.
func (k *kit) workAll(ids ...int64) {
	k.t.Helper()
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(context.Context, *jobs.Job[kitEmail]) error { return nil }))
	ev, stop := k.runWorkers(w)
	ev.wait(k, "completed", ids...)
	stop()
}

// runWorkers runs w on jobQueue with Workers.Run until stop, which waits
// for Run to return; the Loop's outcomes come on the returned events.
func (k *kit) runWorkers(w *jobs.Workers) (*jobEvents, func()) {
	ev := &jobEvents{ch: make(chan jobEvent, 1000)}
	ctx, cancel := context.WithCancel(k.ctx)
	done := make(chan error, 1)
	cfg := consumer.LoopConfig{Concurrency: 1, Prefetch: -1, Backoff: consumer.Backoff{Initial: -1},
		Logger: slog.New(slog.DiscardHandler), Observer: ev}
	go func() { done <- w.Run(ctx, k.st, jobQueue, cfg) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				k.t.Errorf("Workers.Run: %v", err)
			}
		})
	}
	k.t.Cleanup(stop)
	return ev, stop
}

// jobEvent is one outcome the Loop reported: completed, abandoned,
// rejected, locklost or settlefailed.
type jobEvent struct {
	what string
	m    mqlite.Message
	err  error
}

// jobEvents is the consumer.Observer of runWorkers.
type jobEvents struct {
	consumer.NopObserver
	ch chan jobEvent
}

func (e *jobEvents) Completed(m mqlite.Message, _ time.Duration) {
	e.ch <- jobEvent{what: "completed", m: m}
}

func (e *jobEvents) Abandoned(m mqlite.Message, _, _ time.Duration, cause error) {
	e.ch <- jobEvent{what: "abandoned", m: m, err: cause}
}

func (e *jobEvents) Rejected(m mqlite.Message, _ time.Duration, cause error) {
	e.ch <- jobEvent{what: "rejected", m: m, err: cause}
}

func (e *jobEvents) LockLost(m mqlite.Message, err error) {
	e.ch <- jobEvent{what: "locklost", m: m, err: err}
}

func (e *jobEvents) SettleFailed(m mqlite.Message, err error) {
	e.ch <- jobEvent{what: "settlefailed", m: m, err: err}
}

// next returns the next outcome, within loopBound.
func (e *jobEvents) next(k *kit) jobEvent {
	k.t.Helper()
	t := time.NewTimer(loopBound)
	defer t.Stop()
	select {
	case ev := <-e.ch:
		return ev
	case <-t.C:
		k.t.Fatalf("the Loop reported no outcome in %v", loopBound)
	}
	return jobEvent{}
}

// wait skips outcomes until what of each job of ids (the seq of its first
// message or, for a snoozed job, of the message carrying it); it fails on
// a settlement failure.
func (e *jobEvents) wait(k *kit, what string, ids ...int64) {
	k.t.Helper()
	pending := map[string]bool{}
	for _, id := range ids {
		pending[fmt.Sprint(id)] = true
	}
	for len(pending) > 0 {
		ev := e.next(k)
		if ev.what == "settlefailed" {
			k.t.Fatalf("a settlement of message %d failed: %v", ev.m.Seq, ev.err)
		}
		if ev.what != what {
			continue
		}
		id := fmt.Sprint(ev.m.Seq)
		if p, ok := ev.m.Properties[jobs.PropID]; ok {
			id = p
		}
		delete(pending, id)
	}
}
