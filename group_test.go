package mqlite_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// groupOutcome is how one caller's step in a group commit ends.
type groupOutcome string

const (
	outCommit        groupOutcome = "commit"         // fn returns nil
	outError         groupOutcome = "error"          // fn returns an error
	outPanic         groupOutcome = "panic"          // fn panics
	outCancelWaiting groupOutcome = "cancel-waiting" // ctx ends before the caller's turn
	outCancelInFn    groupOutcome = "cancel-in-fn"   // ctx ends while fn runs; fn returns nil
	outSavepoints    groupOutcome = "savepoints"     // fn nests savepoints as GORM does, one rolled back
	outGoexit        groupOutcome = "goexit"         // fn ends its goroutine (runtime.Goexit)
)

var groupOutcomes = []groupOutcome{outCommit, outError, outPanic, outCancelWaiting, outCancelInFn, outSavepoints, outGoexit}

// committed reports whether the outcome's work is in the group's commit.
func (o groupOutcome) committed() bool { return o == outCommit || o == outSavepoints }

var errStep = errors.New("step failed")

type stepPanic struct{ name string }

// groupWrite inserts the business row name and sends the message name.
func groupWrite(tx *mqlite.Tx, name string) error {
	if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO biz (v) VALUES (?)`, name); err != nil {
		return err
	}
	_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte(name), MessageID: name})
	return err
}

// groupStep is the callback of a caller whose step ends with o.
func groupStep(o groupOutcome, name string, cancel context.CancelFunc) func(tx *mqlite.Tx) error {
	return func(tx *mqlite.Tx) error {
		if err := groupWrite(tx, name); err != nil {
			return err
		}
		switch o {
		case outError:
			return errStep
		case outPanic:
			panic(&stepPanic{name})
		case outCancelInFn:
			cancel()
		case outGoexit:
			runtime.Goexit()
		case outSavepoints:
			// GORM's nested Transaction: SAVEPOINT, ROLLBACK TO on the inner
			// error, RELEASE on success.
			for _, q := range []string{
				`SAVEPOINT sp1`, `INSERT INTO biz (v) VALUES ('` + name + `-lost')`, `ROLLBACK TO sp1`, `RELEASE sp1`,
				`SAVEPOINT sp2`, `INSERT INTO biz (v) VALUES ('` + name + `-inner')`, `RELEASE sp2`,
			} {
				if _, err := tx.SQL().ExecContext(tx.Context(), q); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

// waitUntil waits for cond, which another goroutine makes true, yielding
// the processor meanwhile; the minute is a hang detector, not a timing.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		runtime.Gosched()
	}
}

// groupResult is what one caller of Store.Tx got.
type groupResult struct {
	err      error
	panicked any
}

// groupRun is one group commit being assembled on st: caller 0 holds the
// transaction open until the other callers wait behind it, in order.
type groupRun struct {
	t       *testing.T
	st      *mqlite.Store
	release chan struct{}
	results []chan groupResult
}

// startGroup starts caller 0, whose step runs first(tx) and then waits
// for run.finish.
func startGroup(t *testing.T, st *mqlite.Store, first func(tx *mqlite.Tx) error) *groupRun {
	r := &groupRun{t: t, st: st, release: make(chan struct{})}
	holding := make(chan struct{})
	r.call(context.Background(), func(tx *mqlite.Tx) error {
		close(holding)
		<-r.release
		return first(tx)
	})
	<-holding
	return r
}

// call starts a caller of st.Tx and waits until it waits for its turn
// (caller 0 does not wait: it runs at once).
func (r *groupRun) call(ctx context.Context, fn func(tx *mqlite.Tx) error) int {
	i := len(r.results)
	ch := make(chan groupResult, 1)
	r.results = append(r.results, ch)
	go func() {
		var res groupResult
		defer func() { res.panicked = recover(); ch <- res }()
		res.err = r.st.Tx(ctx, fn)
	}()
	if i > 0 {
		waitUntil(r.t, fmt.Sprintf("caller %d to queue", i), func() bool { return mqlite.GroupWaiting(r.st) == i })
	}
	return i
}

// finish lets caller 0's step end and returns every caller's result.
func (r *groupRun) finish() []groupResult {
	close(r.release)
	out := make([]groupResult, len(r.results))
	for i, ch := range r.results {
		out[i] = <-ch
	}
	return out
}

func sentOf(t *testing.T, st *mqlite.Store, queue string) (sent, active int64) {
	t.Helper()
	ms, err := st.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Queue == queue {
			return m.Counters.Sent, m.Active
		}
	}
	t.Fatalf("no metrics for %q", queue)
	return 0, 0
}

// TestGroupCommitOutcomes runs groups of callers of Store.Tx whose steps
// end every way a step can end (the callbacks run on the store's driving
// goroutine: a Goexit there must not stop the group), every ordered pair of outcomes behind a
// committing caller and all of them in one group, and checks each caller's
// result, the rows and messages that exist, the metrics, and that each
// group committed once.
func TestGroupCommitOutcomes(t *testing.T) {
	t.Parallel()
	groups := [][]groupOutcome{groupOutcomes}
	for _, a := range groupOutcomes {
		for _, b := range groupOutcomes {
			groups = append(groups, []groupOutcome{a, b})
		}
	}
	b := txBundle(t)
	st, db := b.Store, b.Store.DB()
	for gi, outs := range groups {
		t.Run(fmt.Sprint(outs), func(t *testing.T) {
			name := func(i int) string { return fmt.Sprintf("g%d-c%d", gi, i) }
			commits := mqlite.GroupCommits(st)
			sent, _ := sentOf(t, st, "q")
			run := startGroup(t, st, func(tx *mqlite.Tx) error { return groupWrite(tx, name(0)) })
			cancels := map[int]context.CancelFunc{}
			for _, o := range outs {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				i := len(run.results)
				cancels[i] = cancel
				run.call(ctx, groupStep(o, name(i), cancel))
			}
			for i, o := range outs {
				if o == outCancelWaiting {
					cancels[i+1]()
					res := <-run.results[i+1]
					run.results[i+1] <- res // finish reads it again
				}
			}
			results := run.finish()

			want := []string{name(0)}
			if results[0] != (groupResult{}) {
				t.Errorf("caller 0: %+v, want committed", results[0])
			}
			for i, o := range outs {
				res, n := results[i+1], name(i+1)
				var ok bool
				switch o {
				case outCommit, outSavepoints:
					ok = res.err == nil && res.panicked == nil
				case outError:
					ok = errors.Is(res.err, errStep) && res.err.Error() == errStep.Error() && res.panicked == nil
				case outPanic:
					p, isStep := res.panicked.(*stepPanic)
					ok = isStep && p.name == n && res.err == nil
				case outCancelWaiting, outCancelInFn:
					ok = errors.Is(res.err, context.Canceled) && res.panicked == nil
				case outGoexit:
					ok = res.err != nil && strings.Contains(res.err.Error(), "Goexit") && res.panicked == nil
				}
				if !ok {
					t.Errorf("caller %d (%s): err %v, panic %v", i+1, o, res.err, res.panicked)
				}
				if o.committed() {
					want = append(want, n)
				}
				if o == outSavepoints {
					want = append(want, n+"-inner")
				}
			}
			rows := testdb.Strings(t, db, `SELECT v FROM biz WHERE v LIKE ? ORDER BY id`, fmt.Sprintf("g%d-%%", gi))
			if !slices.Equal(rows, want) {
				t.Errorf("business rows %q, want %q", rows, want)
			}
			wantMsgs := slices.DeleteFunc(slices.Clone(want), func(s string) bool { return len(s) > 6 && s[len(s)-6:] == "-inner" })
			msgs := testdb.Strings(t, db, `SELECT message_id FROM mqlite_messages WHERE message_id LIKE ? ORDER BY id`, fmt.Sprintf("g%d-%%", gi))
			if !slices.Equal(msgs, wantMsgs) {
				t.Errorf("messages %q, want %q", msgs, wantMsgs)
			}
			if got := mqlite.GroupCommits(st) - commits; got != 1 {
				t.Errorf("%d commits, want 1 for the group", got)
			}
			sentNow, active := sentOf(t, st, "q")
			if got := sentNow - sent; got != int64(len(wantMsgs)) {
				t.Errorf("metrics: %d sent, want %d", got, len(wantMsgs))
			}
			if table := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE queue = 'q' AND state = 'active'`); active != table {
				t.Errorf("metrics: %d active, the table %d", active, table)
			}
		})
	}
}

// TestGroupCommitBounds queues callers behind a caller holding a group
// open, more than one group takes (by callers, by bytes), and checks that
// they commit in as many groups as the bounds make, and all of them.
func TestGroupCommitBounds(t *testing.T) {
	t.Parallel()
	big := make([]byte, 256<<10)
	tests := []struct {
		name        string
		first       int // messages of 256 KiB caller 0 sends
		callers     int // callers queued behind caller 0
		wantCommits int64
	}{
		{"callers under the bound", 0, 63, 1},
		{"callers over the bound", 0, 64, 2},
		{"bytes over the bound", 16, 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := txBundle(t).Store
			commits := mqlite.GroupCommits(st)
			run := startGroup(t, st, func(tx *mqlite.Tx) error {
				for i := range tc.first {
					if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: big, MessageID: fmt.Sprint("big", i)}); err != nil {
						return err
					}
				}
				return groupWrite(tx, "c0")
			})
			for i := range tc.callers {
				run.call(context.Background(), func(tx *mqlite.Tx) error { return groupWrite(tx, fmt.Sprint("c", i+1)) })
			}
			for i, res := range run.finish() {
				if res != (groupResult{}) {
					t.Fatalf("caller %d: %+v", i, res)
				}
			}
			if got := mqlite.GroupCommits(st) - commits; got != tc.wantCommits {
				t.Errorf("%d commits, want %d", got, tc.wantCommits)
			}
			if got := testdb.Int(t, st.DB(), `SELECT count(*) FROM biz`); got != int64(tc.callers+1) {
				t.Errorf("%d rows, want %d", got, tc.callers+1)
			}
		})
	}
}

// TestGroupCommitFails closes the store inside a group: its commit is
// refused, and every caller whose step had joined it gets ErrClosed, while
// the caller whose step failed keeps its own error; nothing of the group
// is in the file.
func TestGroupCommitFails(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{BusyTimeout: 10 * time.Millisecond})
	b.Queue(t, "q", mqlite.QueueOptions{})
	st := b.Store
	if _, err := st.DB().Exec(`CREATE TABLE biz (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	commits := mqlite.GroupCommits(st)
	run := startGroup(t, st, func(tx *mqlite.Tx) error { return groupWrite(tx, "c0") })
	run.call(context.Background(), groupStep(outCommit, "c1", nil))
	run.call(context.Background(), groupStep(outError, "c2", nil))
	run.call(context.Background(), func(tx *mqlite.Tx) error {
		if err := groupWrite(tx, "c3"); err != nil {
			return err
		}
		_ = st.Close() // the connection is the group's: Close returns after BusyTimeout
		return nil
	})
	for i, res := range run.finish() {
		want := mqlite.ErrClosed
		if i == 2 {
			want = errStep
		}
		if !errors.Is(res.err, want) || res.panicked != nil {
			t.Errorf("caller %d: %+v, want %v", i, res, want)
		}
	}
	if got := mqlite.GroupCommits(st) - commits; got != 0 {
		t.Errorf("%d commits", got)
	}
	st2 := testdb.OpenPath(t, b.Path, mqlite.Config{}).Store
	if got := testdb.Int(t, st2.DB(), `SELECT count(*) FROM biz`); got != 0 {
		t.Errorf("%d business rows after the refused commit", got)
	}
	if got := testdb.Int(t, st2.DB(), `SELECT count(*) FROM mqlite_messages`); got != 0 {
		t.Errorf("%d messages after the refused commit", got)
	}
}

// TestGroupCommitSettlementsPerCaller completes two deliveries inside two
// callers of one group (consumer.CompleteTx): the caller that fails keeps
// its delivery held (in the file, in the registry of Receivers, in the
// metrics), the caller that commits has its delivery completed and
// forgotten, both on the group's one commit.
func TestGroupCommitSettlementsPerCaller(t *testing.T) {
	t.Parallel()
	b := txBundle(t)
	st, ctx := b.Store, context.Background()
	for _, id := range []string{"m1", "m2"} {
		if _, err := outbox.Send(ctx, st, "q", outbox.Message{Body: []byte(id), MessageID: id}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 2})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	if _, locks := mqlite.ReceiversKept(st); locks != 2 {
		t.Fatalf("registry holds %d locks before the group, want 2", locks)
	}
	complete := func(m mqlite.Message, fail bool) func(tx *mqlite.Tx) error {
		return func(tx *mqlite.Tx) error {
			if err := consumer.CompleteTx(tx.Context(), tx.SQL(), m.Lock()); err != nil {
				return err
			}
			if fail {
				return errStep
			}
			return nil
		}
	}
	run := startGroup(t, st, func(tx *mqlite.Tx) error { return nil })
	run.call(ctx, complete(msgs[0], true))
	run.call(ctx, complete(msgs[1], false))
	res := run.finish()
	if !errors.Is(res[1].err, errStep) || res[2].err != nil {
		t.Fatalf("results %+v", res)
	}
	states := testdb.Strings(t, st.DB(), `SELECT message_id || ':' || state FROM mqlite_messages WHERE queue = 'q' ORDER BY id`)
	if want := []string{msgs[0].MessageID + ":locked", msgs[1].MessageID + ":completed"}; !slices.Equal(states, want) &&
		!slices.Equal(states, want[:1]) { // a completed row may be deleted at once
		t.Errorf("rows %q, want %q", states, want)
	}
	if _, locks := mqlite.ReceiversKept(st); locks != 1 {
		t.Errorf("registry holds %d locks after the group, want 1 (the failed caller's)", locks)
	}
	ms, err := st.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Queue == "q" && (m.Counters.Completed != 1 || m.Locked != 1) {
			t.Errorf("metrics: %d completed, %d locked, want 1 and 1", m.Counters.Completed, m.Locked)
		}
	}
}

// TestGroupCommitFirstStepUndone: the first step whose work a group's
// transaction holds runs without a savepoint, so undoing it rolls the
// whole transaction back and the next step begins another. Caller 0's step
// ends every way a running step can; behind it a caller fails (again the
// first step of its transaction), then two commit (the first bare, the
// second in a savepoint). Each caller gets its own result, only the two
// committed callers' rows, messages and metrics exist, in one commit.
func TestGroupCommitFirstStepUndone(t *testing.T) {
	t.Parallel()
	b := txBundle(t)
	st, db := b.Store, b.Store.DB()
	for gi, first := range []groupOutcome{outError, outPanic, outCancelInFn, outGoexit, outCommit} {
		t.Run(string(first), func(t *testing.T) {
			name := func(i int) string { return fmt.Sprintf("f%d-c%d", gi, i) }
			commits := mqlite.GroupCommits(st)
			sent, _ := sentOf(t, st, "q")
			ctx0, cancel0 := context.WithCancel(context.Background())
			defer cancel0()
			run := &groupRun{t: t, st: st, release: make(chan struct{})}
			holding := make(chan struct{})
			step0 := groupStep(first, name(0), cancel0)
			run.call(ctx0, func(tx *mqlite.Tx) error {
				close(holding)
				<-run.release
				return step0(tx)
			})
			<-holding
			outs := []groupOutcome{outError, outCommit, outCommit}
			for i, o := range outs {
				run.call(context.Background(), groupStep(o, name(i+1), nil))
			}
			results := run.finish()

			var want []string
			if first.committed() {
				want = append(want, name(0))
			}
			want = append(want, name(2), name(3))
			res0 := results[0]
			var ok bool
			switch first {
			case outCommit:
				ok = res0 == (groupResult{})
			case outError:
				ok = errors.Is(res0.err, errStep) && res0.err.Error() == errStep.Error() && res0.panicked == nil
			case outPanic:
				p, isStep := res0.panicked.(*stepPanic)
				ok = isStep && p.name == name(0) && res0.err == nil
			case outCancelInFn:
				ok = errors.Is(res0.err, context.Canceled) && res0.panicked == nil
			case outGoexit:
				ok = res0.err != nil && strings.Contains(res0.err.Error(), "Goexit") && res0.panicked == nil
			}
			if !ok {
				t.Errorf("caller 0 (%s): err %v, panic %v", first, res0.err, res0.panicked)
			}
			if res := results[1]; !errors.Is(res.err, errStep) || res.err.Error() != errStep.Error() || res.panicked != nil {
				t.Errorf("caller 1 (error): %+v", res)
			}
			for _, i := range []int{2, 3} {
				if results[i] != (groupResult{}) {
					t.Errorf("caller %d (commit): %+v", i, results[i])
				}
			}
			rows := testdb.Strings(t, db, `SELECT v FROM biz WHERE v LIKE ? ORDER BY id`, fmt.Sprintf("f%d-%%", gi))
			if !slices.Equal(rows, want) {
				t.Errorf("business rows %q, want %q", rows, want)
			}
			msgs := testdb.Strings(t, db, `SELECT message_id FROM mqlite_messages WHERE message_id LIKE ? ORDER BY id`, fmt.Sprintf("f%d-%%", gi))
			if !slices.Equal(msgs, want) {
				t.Errorf("messages %q, want %q", msgs, want)
			}
			if got := mqlite.GroupCommits(st) - commits; got != 1 {
				t.Errorf("%d commits, want 1 for the group", got)
			}
			sentNow, active := sentOf(t, st, "q")
			if got := sentNow - sent; got != int64(len(want)) {
				t.Errorf("metrics: %d sent, want %d", got, len(want))
			}
			if table := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE queue = 'q' AND state = 'active'`); active != table {
				t.Errorf("metrics: %d active, the table %d", active, table)
			}
		})
	}
}

// TestGroupCommitClosedAfterBareRollback: caller 0's step, the first of its
// group and so without a savepoint, fails after closing the store; its
// rollback ends the transaction, and the caller behind it, whose step must
// begin another, gets ErrClosed like every caller of a closed store.
func TestGroupCommitClosedAfterBareRollback(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{BusyTimeout: 10 * time.Millisecond})
	b.Queue(t, "q", mqlite.QueueOptions{})
	st := b.Store
	if _, err := st.DB().Exec(`CREATE TABLE biz (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	run := startGroup(t, st, func(tx *mqlite.Tx) error {
		if err := groupWrite(tx, "c0"); err != nil {
			return err
		}
		_ = st.Close() // the connection is the group's: Close returns after BusyTimeout
		return errStep
	})
	run.call(context.Background(), groupStep(outCommit, "c1", nil))
	res := run.finish()
	if !errors.Is(res[0].err, errStep) || res[0].panicked != nil {
		t.Errorf("caller 0: %+v, want %v", res[0], errStep)
	}
	if !errors.Is(res[1].err, mqlite.ErrClosed) || res[1].panicked != nil {
		t.Errorf("caller 1: %v, want %v", res[1].err, mqlite.ErrClosed)
	}
	st2 := testdb.OpenPath(t, b.Path, mqlite.Config{}).Store
	if got := testdb.Int(t, st2.DB(), `SELECT count(*) FROM biz`); got != 0 {
		t.Errorf("%d business rows", got)
	}
}
