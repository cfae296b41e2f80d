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
// kind is dead-lettered there too. A unique job needs the store.
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
