package client_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/jobs"
)

// mailArgs is the kind of these tests.
type mailArgs struct {
	To string `json:"to"`
}

func (mailArgs) Kind() string { return "mail" }

// uniqueMail are the options of a job unique by its arguments, on "jobs".
var uniqueMail = &jobs.InsertOpts{Queue: "jobs", Unique: jobs.UniqueOpts{ByArgs: true}}

// jobsIn counts the jobs of "jobs" not completed.
func jobsIn(t *testing.T, tb *testdb.Bundle) int64 {
	t.Helper()
	return testdb.Int(t, tb.Store.DB(), `SELECT count(*) FROM mqlite_messages WHERE queue = 'jobs' AND state <> 'completed'`)
}

// TestInsertJobsAtOnce: clients insert the same unique job at the same
// moment, round after round: each round inserts one job, every other
// client gets it back as a duplicate with its id, because the broker looks
// the key up and inserts in one transaction. The control inserts the same
// jobs without uniqueness at once and gets one job per client: the race
// was there to lose.
func TestInsertJobsAtOnce(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "jobs", mqlite.QueueOptions{DedupWindow: time.Hour})
	url, key := serve(t, tb, broker.Config{})
	const clients, rounds = 4, 10
	cs := make([]*client.Client, clients)
	for i := range cs {
		cs[i] = newClient(t, url, key, tb.Clock)
	}
	atOnce := func(args jobs.JobArgs, opts *jobs.InsertOpts) []jobs.InsertResult {
		out := make([]jobs.InsertResult, clients)
		errs := make([]error, clients)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() {
				<-start
				out[i], errs[i] = jobs.InsertVia(ctx, c, args, opts)
			})
		}
		close(start)
		wg.Wait()
		must(t, errors.Join(errs...))
		return out
	}
	for r := range rounds {
		res := atOnce(mailArgs{To: "ada" + string(rune('a'+r))}, uniqueMail)
		inserted := 0
		for _, x := range res {
			if !x.Duplicate {
				inserted++
			}
			if x.ID != res[0].ID || x.Kind != "mail" || x.Queue != "jobs" {
				t.Fatalf("round %d: results %+v, want one job", r, res)
			}
		}
		if inserted != 1 {
			t.Fatalf("round %d: %d clients inserted the job, want one (%+v)", r, inserted, res)
		}
	}
	if n := jobsIn(t, tb); n != rounds {
		t.Fatalf("%d jobs, want %d", n, rounds)
	}
	// The control: not unique, every client inserts.
	res := atOnce(mailArgs{To: "bob"}, &jobs.InsertOpts{Queue: "jobs"})
	ids := map[int64]bool{}
	for _, x := range res {
		ids[x.ID] = true
	}
	t.Logf("%d rounds of %d clients at once: one job a round; not unique, %d jobs from %d clients", rounds, clients, len(ids), clients)
	if len(ids) != clients {
		t.Fatalf("the control inserted %d jobs from %d clients, want one each", len(ids), clients)
	}
}

// TestInsertJobsLostAnswer: the broker inserts a unique job and its answer
// is lost; the client's retry carries the same idempotency key and gets
// the first answer again (the job inserted, not a duplicate), and one job
// is there. With every answer lost the insert is ErrOutcomeUnknown, and
// the same insert again returns the job that went through, a duplicate:
// still one job. The control: the same job inserted again (a new request)
// is a duplicate, which the replay was not.
func TestInsertJobsLostAnswer(t *testing.T) {
	t.Parallel()
	var l *lossy
	e := newCommitEnv(t, broker.Config{}, func(h *lossy) { l = h; h.lose["/v1/commit"] = 1 })
	e.tb.Queue(t, "jobs", mqlite.QueueOptions{DedupWindow: time.Hour})

	first, err := jobs.InsertVia(ctx, e.c, mailArgs{To: "ada"}, uniqueMail)
	must(t, err)
	l.mu.Lock()
	tries := l.seen["/v1/commit"]
	l.mu.Unlock()
	if len(tries) != 2 || tries[0] != tries[1] {
		t.Fatalf("%d tries (%q), want the lost one and its retry, the same request", len(tries), tries)
	}
	if first.Duplicate || first.ID == 0 {
		t.Fatalf("the insert whose first answer was lost: %+v, want the job inserted (the record's answer)", first)
	}
	again, err := jobs.InsertVia(ctx, e.c, mailArgs{To: "ada"}, uniqueMail)
	must(t, err)
	if !again.Duplicate || again.ID != first.ID {
		t.Fatalf("the control, the same job again: %+v, want job %d, a duplicate", again, first.ID)
	}

	l.mu.Lock()
	l.lose["/v1/commit"] = 1 << 20
	l.mu.Unlock()
	_, err = jobs.InsertVia(ctx, e.c, mailArgs{To: "bob"}, uniqueMail)
	l.mu.Lock()
	l.lose["/v1/commit"] = 0
	l.mu.Unlock()
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("an insert with every answer lost: %v, want ErrOutcomeUnknown", err)
	}
	bob, err := jobs.InsertVia(ctx, e.c, mailArgs{To: "bob"}, uniqueMail)
	must(t, err)
	if !bob.Duplicate {
		t.Fatalf("the insert again after ErrOutcomeUnknown: %+v, want the job that went through", bob)
	}
	if n := jobsIn(t, e.tb); n != 2 {
		t.Fatalf("%d jobs, want 2: ada's and bob's, once each", n)
	}
}

// TestInsertJobsRefused: bad jobs are refused with the job layer's typed
// errors, over the wire as on the store, and nothing is inserted: a queue
// whose dedup window cannot hold the uniqueness (jobs.ErrUniqueWindow), a
// missing queue (mqlite.ErrQueueNotFound); a batch that fails fails whole.
func TestInsertJobsRefused(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "jobs", mqlite.QueueOptions{DedupWindow: time.Hour})
	tb.Queue(t, "nodedup", mqlite.QueueOptions{DedupWindow: -1})
	url, key := serve(t, tb, broker.Config{})
	c := newClient(t, url, key, tb.Clock)
	for _, tc := range []struct {
		opts *jobs.InsertOpts
		want error
	}{
		{&jobs.InsertOpts{Queue: "nodedup", Unique: jobs.UniqueOpts{ByArgs: true}}, jobs.ErrUniqueWindow},
		{&jobs.InsertOpts{Queue: "jobs", Unique: jobs.UniqueOpts{ByPeriod: 2 * time.Hour}}, jobs.ErrUniqueWindow},
		{&jobs.InsertOpts{Queue: "nowhere"}, mqlite.ErrQueueNotFound},
	} {
		_, err := jobs.InsertManyVia(ctx, c, []jobs.InsertManyParams{
			{Args: mailArgs{To: "first"}, InsertOpts: &jobs.InsertOpts{Queue: "jobs"}},
			{Args: mailArgs{To: "ada"}, InsertOpts: tc.opts},
		})
		if !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.opts, err, tc.want)
		}
	}
	if n := jobsIn(t, tb); n != 0 {
		t.Fatalf("%d jobs, want none: each batch failed whole", n)
	}
}
