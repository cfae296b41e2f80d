package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
)

// startBatch runs LoopBatch on queue "q" in the background; stop cancels it
// and returns LoopBatch's result.
func (e *loopEnv) startBatch(h consumer.BatchHandler, opts consumer.BatchConfig) (stop func() error) {
	opts.LoopConfig = e.options(opts.LoopConfig)
	return e.launch(func(lctx context.Context) error { return consumer.LoopBatch(lctx, e.src, "q", h, opts) })
}

// byBody answers each message of a batch by its body.
func byBody(answers map[string]error) consumer.BatchHandler {
	return func(ctx context.Context, msgs []mqlite.Message) []error {
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			errs[i] = answers[string(m.Body)]
		}
		return errs
	}
}

func TestLoopBatchSettlesEachMessageByItsResult(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		seqs := e.send("ok", "fail", "dead", "later", "perm")
		stop := e.startBatch(byBody(map[string]error{
			"fail":  errors.New("down"),
			"dead":  consumer.DeadLetter("http 400", "bad request: field x"),
			"later": consumer.RetryAfter(errors.New("throttled"), 7*time.Second),
			"perm":  consumer.Permanent(errors.New("undecodable")),
		}), consumer.BatchConfig{LoopConfig: consumer.LoopConfig{Backoff: exact}})
		synctest.Wait()
		left := e.peek()
		if _, ok := left[seqs[0]]; ok {
			t.Fatalf("ok message not completed")
		}
		if m := left[seqs[1]]; m.State != mqlite.StateScheduled || !m.VisibleAt.Equal(time.Now().Add(time.Second)) {
			t.Fatalf("failed message: %s at %v, want scheduled after the backoff's 1s", m.State, m.VisibleAt)
		}
		if m := left[seqs[3]]; m.State != mqlite.StateScheduled || !m.VisibleAt.Equal(time.Now().Add(7*time.Second)) {
			t.Fatalf("retry-after message: %s at %v, want scheduled after 7s", m.State, m.VisibleAt)
		}
		dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
		must(t, err)
		got := map[int64][2]string{}
		for _, d := range dead {
			got[d.Seq] = [2]string{d.DeadLetterReason, d.DeadLetterDescription}
		}
		want := map[int64][2]string{seqs[2]: {"http 400", "bad request: field x"}, seqs[4]: {"undecodable", ""}}
		if len(got) != 2 || got[seqs[2]] != want[seqs[2]] || got[seqs[4]] != want[seqs[4]] {
			t.Fatalf("dead letters %v, want %v", got, want)
		}
		must(t, stop())
	})
}

// TestLoopBatchGathersWhatWaits: a handler call gets every claimed message
// that waits, up to MaxBatch. The first call is held until the loop has
// claimed all it may hold (Prefetch, MaxBatch by default) behind it, so
// the second finds a full batch waiting; how many the first call got is
// the scheduler's.
func TestLoopBatchGathersWhatWaits(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		bodies := make([]string, 25)
		for i := range bodies {
			bodies[i] = fmt.Sprint("m", i) // distinct: equal bodies are one message
		}
		e.send(bodies...)
		var sizes guarded[[]int]
		release := make(chan struct{})
		stop := e.startBatch(func(ctx context.Context, msgs []mqlite.Message) []error {
			first := false
			sizes.update(func(s []int) []int { first = len(s) == 0; return append(s, len(msgs)) })
			if first {
				<-release
			}
			return make([]error, len(msgs))
		}, consumer.BatchConfig{MaxBatch: 10})
		synctest.Wait() // the first call holds; the rest is claimed and waits
		close(release)
		synctest.Wait()
		got := sizes.get()
		total := 0
		for _, n := range got {
			if n > 10 {
				t.Fatalf("batch of %d, over MaxBatch", n)
			}
			total += n
		}
		if total != 25 || len(got) < 2 || got[1] != 10 {
			t.Fatalf("batch sizes %v, want 25 messages, the second batch full", got)
		}
		if left := e.peek(); len(left) != 0 {
			t.Fatalf("%d messages left", len(left))
		}
		must(t, stop())
	})
}

func TestLoopBatchRunsBatchesConcurrently(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		release := make(chan struct{})
		var running guarded[int]
		stop := e.startBatch(func(ctx context.Context, msgs []mqlite.Message) []error {
			running.update(func(n int) int { return n + 1 })
			<-release
			return make([]error, len(msgs))
		}, consumer.BatchConfig{LoopConfig: consumer.LoopConfig{Concurrency: 3}, MaxBatch: 1})
		e.send("a", "b", "c", "d")
		synctest.Wait()
		if n := running.get(); n != 3 {
			t.Fatalf("%d batches running, want Concurrency 3", n)
		}
		close(release)
		synctest.Wait()
		if n := running.get(); n != 4 {
			t.Fatalf("%d batches ran, want 4", n)
		}
		must(t, stop())
	})
}

func TestLoopBatchFailsTheWholeBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler consumer.BatchHandler
		cause   string
	}{
		{"panic", func(context.Context, []mqlite.Message) []error { panic("boom") }, "panicked: boom"},
		{"short", func(context.Context, []mqlite.Message) []error { return nil }, "wrong number of results"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
				e.send("a", "b")
				stop := e.startBatch(tc.handler, consumer.BatchConfig{LoopConfig: consumer.LoopConfig{Backoff: exact}})
				synctest.Wait()
				for _, m := range e.peek() {
					if m.State != mqlite.StateScheduled || m.DeliveryCount != 1 {
						t.Fatalf("message %d: %s after %d deliveries, want scheduled after 1", m.Seq, m.State, m.DeliveryCount)
					}
				}
				for i := range 2 {
					if c := e.obs.causeAt(i + 1); c == nil || !strings.Contains(c.Error(), tc.cause) {
						t.Fatalf("cause %v, want %q", c, tc.cause)
					}
				}
				must(t, stop())
			})
		})
	}
}

func TestLoopBatchLostLeaseIsNotSettled(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		seq := e.send("slow")[0]
		cancelled := make(chan error, 1)
		stop := e.startBatch(func(ctx context.Context, msgs []mqlite.Message) []error {
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			return make([]error, len(msgs))
		}, consumer.BatchConfig{LoopConfig: consumer.LoopConfig{}})
		// Another consumer takes the message over: purge the locked message
		// from under the batch, so the renewal finds its lock lost.
		_, err := e.st.Purge(ctx, "q", mqlite.PurgeOptions{State: mqlite.StateLocked})
		must(t, err)
		advance(lease)
		if err := <-cancelled; !errors.Is(err, mqlite.ErrLockLost) {
			t.Fatalf("batch ctx cause %v, want ErrLockLost", err)
		}
		synctest.Wait()
		if ev := e.obs.list(); !slices.Contains(ev, fmt.Sprintf("lock lost %d", seq)) || slices.ContainsFunc(ev, func(s string) bool { return strings.HasPrefix(s, "completed") }) {
			t.Fatalf("events %q", ev)
		}
		must(t, stop())
	})
}

func TestLoopRetryAfterOverridesTheBackoff(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		stop := e.start(func(ctx context.Context, m mqlite.Message) error {
			return consumer.RetryAfter(errors.New("429"), 42*time.Second)
		}, consumer.LoopConfig{Backoff: exact})
		e.send("x")
		synctest.Wait()
		if d := e.obs.delayList(); !slices.Equal(d, []time.Duration{42 * time.Second}) {
			t.Fatalf("delays %v, want [42s]", d)
		}
		must(t, stop())
	})
}

func TestLoopBatchBadArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    consumer.BatchHandler
		opts consumer.BatchConfig
	}{
		{"nil handler", nil, consumer.BatchConfig{}},
		{"negative MaxBatch", byBody(nil), consumer.BatchConfig{MaxBatch: -1}},
		{"huge MaxBatch", byBody(nil), consumer.BatchConfig{MaxBatch: mqlite.MaxReceiveBatch + 1}},
		{"negative Concurrency", byBody(nil), consumer.BatchConfig{LoopConfig: consumer.LoopConfig{Concurrency: -2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := consumer.LoopBatch(ctx, nopStore{}, "q", tc.h, tc.opts)
			if !errors.Is(err, mqlite.ErrInvalidArgument) {
				t.Fatalf("err %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// nopStore is a Store LoopBatch never reaches: its arguments are refused first.
type nopStore struct{ consumer.Store }

func TestDeadLetterIsCutToWhatTheStoreTakes(t *testing.T) {
	bubble(t, mqlite.QueueOptions{}, func(t *testing.T, e *loopEnv) {
		seq := e.send("refused")[0]
		long := consumer.DeadLetter(strings.Repeat("r", mqlite.MaxReasonLen+5), "bad \xff "+strings.Repeat("d", mqlite.MaxDescriptionLen))
		stop := e.startBatch(func(context.Context, []mqlite.Message) []error { return []error{long} }, consumer.BatchConfig{})
		synctest.Wait()
		dead, err := e.st.PeekDeadLetters(ctx, "q", mqlite.PeekParams{})
		must(t, err)
		if len(dead) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dead))
		}
		if dead[0].Seq != seq || len(dead[0].DeadLetterReason) != mqlite.MaxReasonLen ||
			len(dead[0].DeadLetterDescription) != mqlite.MaxDescriptionLen || !strings.HasPrefix(dead[0].DeadLetterDescription, "bad \uFFFD ") {
			t.Fatalf("reason %d bytes, description %d bytes", len(dead[0].DeadLetterReason), len(dead[0].DeadLetterDescription))
		}
		must(t, stop())
	})
}
