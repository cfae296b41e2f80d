package jobs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/brokertest"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/jobs"
)

// Over the broker, a job is inserted with jobs.Message and the client's
// Send, and worked by Workers.Run on the client: the worker's step sends a
// follow-up job in the commit that completes the job; a job of an unknown
// kind is dead-lettered there too. jobs.Message refuses a unique job
// (InsertVia inserts it: TestUniqueOverBroker).
func TestOverBroker(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{})
	_, secret, err := keys.Create(ctx, st, keys.Scope{Role: keys.Worker, Queues: []string{"*"}})
	must(t, err)
	c, err := client.New(client.Config{URL: brokertest.Serve(t, broker.Config{Store: st, Logger: quiet}, nil), Key: secret, Clock: clock}) // the store's clock, for the Loop's lease arithmetic
	must(t, err)
	defer c.Close()

	for _, args := range []jobs.JobArgs{EmailArgs{To: "ada", UserID: 1}, ReportArgs{Day: "mon"}} {
		queue, msg, err := jobs.Message(args, &jobs.InsertOpts{Queue: "jobs"})
		must(t, err)
		if _, err := c.Send(ctx, queue, msg); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := jobs.Message(EmailArgs{}, &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByArgs: true}}); !errors.Is(err, jobs.ErrUniqueNeedsStore) {
		t.Fatalf("unique: %v", err)
	}

	var worked atomic.Int32
	w := jobs.NewWorkers()
	jobs.AddWorker(w, jobs.WorkFunc(func(_ context.Context, job *jobs.Job[EmailArgs]) error {
		if job.Attempt != 1 || job.Args.To != "ada" {
			return consumer.Permanent(errors.New("wrong job"))
		}
		job.CommitWith(func(ctx context.Context, tx consumer.Tx) error {
			if _, err := consumer.SQL(tx); !errors.Is(err, consumer.ErrNoSQL) {
				return errors.New("a step over the broker has SQL")
			}
			queue, msg, err := jobs.Message(ReportArgs{Day: "tue"}, nil)
			if err != nil {
				return err
			}
			return tx.Send(ctx, queue, msg)
		})
		worked.Add(1)
		return nil
	}))
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(lctx, c, "jobs", consumer.LoopConfig{Logger: quiet}) }()
	// Wait for the two outcomes: the worked job and the dead letter.
	deadline := time.After(30 * time.Second)
	for len(dead(t, st, "jobs")) == 0 || len(live(t, st, "jobs")) > 0 {
		select {
		case err := <-done:
			t.Fatalf("Run stopped: %v", err)
		case <-deadline:
			t.Fatal("the jobs were not worked in 30s")
		case <-time.After(2 * time.Millisecond):
		}
	}
	stop()
	must(t, <-done)
	if worked.Load() != 1 {
		t.Fatalf("worked %d, want 1", worked.Load())
	}
	if d := dead(t, st, "jobs"); len(d) != 1 || d[0].Properties[jobs.PropKind] != "report" {
		t.Fatalf("dead letters %+v", d)
	}
	r := live(t, st, "reports")
	if len(r) != 1 || r[0].Properties[jobs.PropKind] != "report" || string(r[0].Body) != `{"day":"tue"}` {
		t.Fatalf("follow-up %+v", r)
	}
}

// A unique job has one key on the store and over the broker: inserted on
// one, the same job inserted on the other is a duplicate of it, by all its
// arguments or by the named keys (field order and spacing aside, which the
// broker receives as JSON of its own).
func TestUniqueOverBroker(t *testing.T) {
	st, clock := setup(t, mqlite.QueueOptions{DedupWindow: time.Hour})
	_, secret, err := keys.Create(ctx, st, keys.Scope{Role: keys.Producer, Queues: []string{"jobs"}})
	must(t, err)
	c, err := client.New(client.Config{URL: brokertest.Serve(t, broker.Config{Store: st, Logger: quiet}, nil), Key: secret, Clock: clock})
	must(t, err)
	defer c.Close()

	byArgs := &jobs.InsertOpts{Unique: jobs.UniqueOpts{ByArgs: true}}
	onStore := insert(t, st, EmailArgs{To: "ada", UserID: 1}, byArgs)
	viaBroker, err := jobs.InsertVia(ctx, c, EmailArgs{To: "ada", UserID: 1}, byArgs)
	must(t, err)
	if !viaBroker.Duplicate || viaBroker.ID != onStore.ID {
		t.Fatalf("over the broker, the store's job: %+v, want job %d, a duplicate", viaBroker, onStore.ID)
	}

	byUser := &jobs.InsertOpts{Unique: jobs.UniqueOpts{ArgKeys: []string{"user_id"}}}
	first, err := jobs.InsertVia(ctx, c, EmailArgs{To: "bob", UserID: 2}, byUser)
	must(t, err)
	if first.Duplicate {
		t.Fatalf("a new job over the broker: %+v", first)
	}
	if again := insert(t, st, EmailArgs{To: "other", UserID: 2}, byUser); !again.Duplicate || again.ID != first.ID {
		t.Fatalf("on the store, the broker's job: %+v, want job %d, a duplicate", again, first.ID)
	}
	raw := jobs.RawJob{Kind: "email", Args: []byte(` { "user_id" : 2 , "to":"x"} `), Opts: jobs.InsertOpts{Queue: "jobs", Unique: byUser.Unique}}
	res, err := c.InsertJobs(ctx, []jobs.RawJob{raw})
	must(t, err)
	if len(res) != 1 || !res[0].Duplicate || res[0].ID != first.ID {
		t.Fatalf("the same job as raw JSON: %+v, want job %d, a duplicate", res, first.ID)
	}
}

// A raw job the job layer would not make is refused before anything is
// written, on the store (InsertRaw) and by the client before it sends.
func TestRawRefused(t *testing.T) {
	st, _ := setup(t, mqlite.QueueOptions{})
	for _, j := range []jobs.RawJob{
		{Kind: "", Args: []byte(`{}`), Opts: jobs.InsertOpts{Queue: "jobs"}},
		{Kind: "email", Args: []byte(`{`), Opts: jobs.InsertOpts{Queue: "jobs"}},
		{Kind: "email", Opts: jobs.InsertOpts{Queue: "jobs"}},
		{Kind: "email", Args: []byte(`{}`), Opts: jobs.InsertOpts{Queue: "jobs", Unique: jobs.UniqueOpts{ArgKeys: make([]string, jobs.MaxArgKeys+1)}}},
	} {
		_, err := jobs.InsertRaw(ctx, st.DB(), []jobs.RawJob{j})
		if !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", j, err)
		}
		var b client.Batch
		if err := b.InsertJobs(j); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("staged %+v: %v, want ErrInvalidArgument", j, err)
		}
	}
	if n := len(live(t, st, "jobs")); n != 0 {
		t.Fatalf("%d jobs, want none", n)
	}
}
