//go:build crash_injection

package crashtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/outbox"
)

// The effects crash test: a worker drains a queue with consumer.LoopTx,
// whose step inserts one row per message into an application table and
// sends one message onward, and the completion commits with them. The
// harness SIGKILLs it at a random moment or at a chosen point (in the
// handler, before the transaction, inside it after the row, after the
// send, after the completion, between the commit and LoopTx's return),
// reopens the file and checks every message: its row exists exactly when
// it is completed, never twice, and its onward message exists exactly
// when its row does, once. The control worker does the same with the
// completion after the commit, in a second transaction (plain Loop): a
// kill between the two leaves a row without its completion.
//
// Leases lapse while the workers run and die: the lease is short
// (effectsLease), and before some commits (stallPercent) the worker
// stalls past it after LoopTx stopped renewing, so that the reaper gives
// the message back, another handler may take it and commit its effect,
// and the stalled commit must find its lease lost and commit nothing. The
// worker says each lease Loop reports lost; the harness also counts the
// leases a kill left held, which lapse before the next worker can take
// their messages. Both counts are printed.

const (
	effectsIn      = "effects-in"
	effectsOut     = "effects-out"
	effectsMax     = 1000 // deliveries: far more than the kills can use up
	effectsLease   = 300 * time.Millisecond
	stallPercent   = 10                            // of commits: the worker stalls before it past the lease
	stallFor       = effectsLease + effectsLease/4 // a real sleep past the lease: it lapses on any machine
	effectsLow     = 200                           // fewer inputs left than this: the harness sends more
	effectsRefill  = 400
	onwardPrefix   = "onward "
	controlKills   = 3
	loopTxWorker   = "TestCrashLoopTxWorker"
	twoTxWorker    = "TestCrashTwoTxWorker"
	effectsDDL     = `CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, delivery INTEGER NOT NULL) STRICT`
	effectsBackoff = time.Millisecond
)

// Crash points of the effects workers.
const (
	inHandler    = "in-handler"    // the handler ran, no transaction yet
	beforeTx     = "before-tx"     // the step is handed to the transaction
	afterRow     = "after-row"     // the effect row written, not committed
	afterSend    = "after-send"    // the onward message staged, not committed
	beforeCommit = "before-commit" // completed in the transaction, not committed
	afterCommit  = "after-commit"  // committed; LoopTx has not seen it yet
)

var effectPoints = []string{inHandler, beforeTx, afterRow, afterSend, beforeCommit, afterCommit}

// crashStore is the store as LoopTx's TxStore, with the crash points
// around the transaction LoopTx runs: the test's hook into LoopTx, through
// its own interface, with nothing added to the library. stall, before a
// transaction, lets some leases lapse.
type crashStore struct {
	*mqlite.Store
	stall func()
}

// Tx runs fn in the store's transaction between the crash points.
func (s crashStore) Tx(ctx context.Context, fn func(tx *mqlite.Tx) error) error {
	s.stall()
	maybeCrash(beforeTx)
	err := s.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		maybeCrash(beforeCommit) // the step and the completion ran
		return nil
	})
	if err == nil {
		maybeCrash(afterCommit)
	}
	return err
}

// TxAndReceive is Tx's crash points around the store's TxAndReceive,
// which LoopTx commits with to claim the next message in the same commit.
func (s crashStore) TxAndReceive(ctx context.Context, queue string, opts mqlite.ReceiveOptions, fn func(tx *mqlite.Tx) error) ([]mqlite.Message, error) {
	s.stall()
	maybeCrash(beforeTx)
	msgs, err := s.Store.TxAndReceive(ctx, queue, opts, func(tx *mqlite.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		maybeCrash(beforeCommit) // the step and the completion ran; the claim follows
		return nil
	})
	if err == nil {
		maybeCrash(afterCommit)
	}
	return msgs, err
}

// doneObserver says each completion and each lost lease the Loop reports.
type doneObserver struct {
	consumer.NopObserver
	say func(string, ...any)
}

// Completed says the message's seq.
func (o doneObserver) Completed(m mqlite.Message, _ time.Duration) { o.say("done %d", m.Seq) }

// LockLost says the message's seq: its lease lapsed under the worker.
func (o doneObserver) LockLost(m mqlite.Message, _ error) { o.say("lapsed %d", m.Seq) }

// TestCrashLoopTxWorker is the LoopTx worker process.
func TestCrashLoopTxWorker(t *testing.T) { effectsWorker(t, true) }

// TestCrashTwoTxWorker is the control's worker process: the effect in one
// transaction, the completion after it.
func TestCrashTwoTxWorker(t *testing.T) { effectsWorker(t, false) }

func effectsWorker(t *testing.T, atomic bool) {
	st, rng, seed := startWorker(t, 20)
	defer st.Close()
	ctx := context.Background()
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stdout, linePrefix+format+"\n", args...)
	}
	// The handler's outcomes are drawn under a lock: handlers run at once.
	var drawMu sync.Mutex
	draw := func() int {
		drawMu.Lock()
		defer drawMu.Unlock()
		return rng.IntN(100)
	}
	effect := func(ctx context.Context, tx *sql.Tx, m mqlite.Message) error {
		if _, err := tx.ExecContext(ctx, bind(workerTarget, `INSERT INTO effects (seq, delivery) VALUES (?, ?)`), m.Seq, m.DeliveryCount); err != nil {
			return err
		}
		maybeCrash(afterRow)
		if _, err := outbox.SendOne(ctx, tx, effectsOut, outbox.Message{Body: []byte(onwardPrefix + strconv.FormatInt(m.Seq, 10))}); err != nil {
			return err
		}
		maybeCrash(afterSend)
		return nil
	}
	cfg := consumer.LoopConfig{
		Concurrency: 1 + int(seed%4),
		Backoff:     consumer.Backoff{Initial: effectsBackoff, Max: effectsBackoff},
		Observer:    doneObserver{say: say},
	}
	say("ready")
	var err error
	if atomic {
		stall := func() {
			if draw() < stallPercent {
				say("stalled")
				time.Sleep(stallFor) // LoopTx no longer renews the lease: it lapses
			}
		}
		err = consumer.LoopTx(ctx, crashStore{Store: st, stall: stall}, effectsIn, func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
			maybeCrash(inHandler)
			if draw() < 5 {
				return nil, errors.New("handler failed on purpose")
			}
			return func(ctx context.Context, tx consumer.Tx) error {
				sqlTx, err := consumer.SQL(tx)
				if err != nil {
					return err
				}
				if err := effect(ctx, sqlTx, m); err != nil {
					return err
				}
				switch p := draw(); {
				case p < 5:
					return errors.New("step failed on purpose") // rolls the row and the send back
				case p < 7:
					return consumer.Permanent(errors.New("step refused on purpose"))
				}
				return nil
			}, nil
		}, cfg)
	} else {
		err = consumer.Loop(ctx, st, effectsIn, func(ctx context.Context, m mqlite.Message) error {
			maybeCrash(inHandler)
			maybeCrash(beforeTx)
			if err := st.Tx(ctx, func(tx *mqlite.Tx) error { return effect(tx.Context(), tx.SQL(), m) }); err != nil {
				return err
			}
			maybeCrash(afterCommit) // the effect committed, the completion not yet
			return nil
		}, cfg)
	}
	t.Fatalf("worker loop returned: %v", err)
}

// effectsTally is what one check found, summed over the kills.
type effectsTally struct {
	inputs, completed, rows, onward, dead int
	withoutCompletion, withoutRow, twice  int // the violations
	onwardWrong, doneLost                 int // the violations
}

func (a *effectsTally) violations() int {
	return a.withoutCompletion + a.withoutRow + a.twice + a.onwardWrong + a.doneLost
}

// effectsRun is a harness's state across its kills.
type effectsRun struct {
	target string         // the store: a SQLite file's path or a PostgreSQL URL
	inputs []int64        // the seqs of every input sent
	done   map[int64]bool // completions a worker's Loop reported
	kills  int
	points map[string]int
	// lapsed counts the leases a worker's Loop reported lost; held, the
	// leases a kill left held (found at the check), which lapse too.
	lapsed, held int
	stalled      int // commits a worker stalled past their lease
}

// setupEffects creates the queues and the effect table in a new SQLite
// file and sends the first inputs.
func setupEffects(t *testing.T) *effectsRun {
	t.Helper()
	return setupEffectsOn(t, filepath.Join(t.TempDir(), "mq.db"))
}

// setupEffectsOn is setupEffects on target: a SQLite file's path or a
// PostgreSQL URL.
func setupEffectsOn(t *testing.T, target string) *effectsRun {
	t.Helper()
	ctx := context.Background()
	r := &effectsRun{target: target, done: map[int64]bool{}, points: map[string]int{}}
	st, err := openStore(r.target)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, q := range []string{effectsIn, effectsOut} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{MaxDeliveryCount: effectsMax, LockDuration: effectsLease}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DB().ExecContext(ctx, effectsDDLOf(r.target)); err != nil {
		t.Fatal(err)
	}
	r.refill(t, st)
	return r
}

// refill sends effectsRefill more inputs.
func (r *effectsRun) refill(t *testing.T, st *mqlite.Store) {
	t.Helper()
	msgs := make([]outbox.Message, effectsRefill)
	for i := range msgs {
		msgs[i] = outbox.Message{Body: fmt.Appendf(nil, "input %d", len(r.inputs)+i)}
	}
	err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
		res, err := outbox.SendBatch(tx.Context(), tx.SQL(), effectsIn, msgs)
		if err != nil {
			return err
		}
		for _, x := range res {
			if x.Err != nil {
				return x.Err
			}
			r.inputs = append(r.inputs, x.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("refill: %v", err)
	}
}

// kill runs worker until it dies at point and records what it said.
func (r *effectsRun) kill(t *testing.T, worker string, seed uint64, point string, delay time.Duration) {
	t.Helper()
	for _, l := range runAndKill(t, worker, r.target, seed, point, delay) {
		r.read(l)
	}
	r.kills++
	r.points[point]++
}

// read records what a LoopTx worker's line says: a completion, a lease
// lost, a stall.
func (r *effectsRun) read(l string) {
	if f := strings.Fields(l); len(f) == 2 && f[0] == "done" {
		seq, _ := strconv.ParseInt(f[1], 10, 64)
		r.done[seq] = true
	} else if len(f) == 2 && f[0] == "lapsed" {
		r.lapsed++
	} else if len(f) == 1 && f[0] == "stalled" {
		r.stalled++
	}
}

// check reopens the file (recovery), checks every input and refills the
// queue when it runs low. The tally counts this check alone.
func (r *effectsRun) check(t *testing.T) effectsTally {
	t.Helper()
	ctx := context.Background()
	r.held += r.leftHeld(t)
	st, err := mqlite.Open(ctx, r.target, mqlite.Config{
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		t.Fatalf("kill %d: reopen: %v", r.kills, err)
	}
	defer st.Close()
	db := st.DB()
	perSeq := func(q string) map[int64]int {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("kill %d: %s: %v", r.kills, q, err)
		}
		defer rows.Close()
		m := map[int64]int{}
		for rows.Next() {
			var seq int64
			var n int
			if err := rows.Scan(&seq, &n); err != nil {
				t.Fatal(err)
			}
			m[seq] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return m
	}
	rows := perSeq(`SELECT seq, count(*) FROM effects GROUP BY seq`)
	onward := perSeq(`SELECT ` + onwardSeqOf(r.target) + `, count(*)
		FROM mqlite_messages WHERE queue = '` + effectsOut + `' AND body IS NOT NULL GROUP BY 1`)
	// An input that is gone or completed is completed; dead letters and
	// the rest are not.
	states := map[int64]string{}
	q, err := db.QueryContext(ctx, bind(r.target, `SELECT id, state FROM mqlite_messages WHERE queue = ?`), effectsIn)
	if err != nil {
		t.Fatal(err)
	}
	for q.Next() {
		var seq int64
		var state string
		if err := q.Scan(&seq, &state); err != nil {
			t.Fatal(err)
		}
		states[seq] = state
	}
	if err := errors.Join(q.Err(), q.Close()); err != nil {
		t.Fatal(err)
	}
	var a effectsTally
	pending := 0
	for _, seq := range r.inputs {
		state, present := states[seq]
		completed := !present || state == "completed" // deleted, or kept for a receipt
		n := rows[seq]
		a.inputs++
		a.rows += n
		a.onward += onward[seq]
		switch {
		case completed:
			a.completed++
		case state == string(mqlite.StateDeadLettered):
			a.dead++
		default:
			pending++
		}
		if n > 1 {
			a.twice++
			t.Logf("kill %d: input %d has %d effect rows", r.kills, seq, n)
		}
		if n > 0 && !completed {
			a.withoutCompletion++
			t.Logf("kill %d: input %d has its effect row but is %s", r.kills, seq, state)
		}
		if n == 0 && completed {
			a.withoutRow++
			t.Logf("kill %d: input %d is completed without its effect row", r.kills, seq)
		}
		if onward[seq] != n {
			a.onwardWrong++
			t.Logf("kill %d: input %d has %d onward messages and %d effect rows", r.kills, seq, onward[seq], n)
		}
		if r.done[seq] && !completed {
			a.doneLost++
			t.Logf("kill %d: input %d reported completed is %s", r.kills, seq, state)
		}
	}
	if len(onward) > 0 || len(rows) > 0 {
		known := map[int64]bool{}
		for _, seq := range r.inputs {
			known[seq] = true
		}
		for seq := range rows {
			if !known[seq] {
				t.Fatalf("kill %d: an effect row of unknown input %d", r.kills, seq)
			}
		}
		for seq := range onward {
			if !known[seq] {
				t.Fatalf("kill %d: an onward message of unknown input %d", r.kills, seq)
			}
		}
	}
	if pending < effectsLow {
		r.refill(t, st)
	}
	return a
}

// leftHeld counts the inputs the dead worker left locked, as it left the
// file (before recovery): leases that lapse before another worker takes
// their messages.
func (r *effectsRun) leftHeld(t *testing.T) int {
	t.Helper()
	raw, err := rawOpen(r.target)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(bind(r.target, `SELECT count(*) FROM mqlite_messages WHERE queue = ? AND state = 'locked'`), effectsIn).Scan(&n); err != nil {
		t.Fatalf("kill %d: leases left held: %v", r.kills, err)
	}
	return n
}

// TestCrashLoopTx is the harness: every effect commits with its
// completion, whatever moment the process dies at.
func TestCrashLoopTx(t *testing.T) {
	want, least, budget := wantKills, minKills, crashBudget
	if v := os.Getenv(envKills); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of kills", envKills, v)
		}
		want, least, budget = n, n, time.Duration(n)*5*time.Second
	}
	crashLoopTx(t, setupEffects(t), want, least, budget)
}

// crashLoopTx kills LoopTx workers on r's store want times (at least
// least, within budget) and checks the effects after each kill.
func crashLoopTx(t *testing.T, r *effectsRun, want, least int, budget time.Duration) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	deadline := time.Now().Add(budget)
	var last effectsTally
	violations := 0
	for r.kills < want && time.Now().Before(deadline) {
		point := pointOf(r.kills, effectPoints)
		r.kill(t, loopTxWorker, seed+uint64(r.kills), point, time.Duration(5+rng.IntN(300))*time.Millisecond)
		last = r.check(t)
		violations += last.violations()
		if violations > 0 {
			t.Fatalf("kill %d (point %q): %d effects without completion, %d completions without effect, %d twice, %d onward messages wrong, %d reported completions lost",
				r.kills, point, last.withoutCompletion, last.withoutRow, last.twice, last.onwardWrong, last.doneLost)
		}
	}
	t.Logf("survived %d SIGKILLs (%d at random moments, %d in the handler, %d before the transaction, %d after the effect row, %d after the onward send, %d after the completion, %d between commit and return): %d inputs, %d completed (%d reported by the Loop), %d dead-lettered on purpose, %d effect rows, %d onward messages; %d effects without completion, %d completed without effect, %d twice",
		r.kills, r.points[randomMoment], r.points[inHandler], r.points[beforeTx], r.points[afterRow], r.points[afterSend], r.points[beforeCommit], r.points[afterCommit],
		last.inputs, last.completed, len(r.done), last.dead, last.rows, last.onward, last.withoutCompletion, last.withoutRow, last.twice)
	t.Logf("lapsed leases: %d under a running worker (reported lost by its Loop; %d commits stalled past their lease on purpose), %d held by a killed worker", r.lapsed, r.stalled, r.held)
	if r.kills < least {
		t.Fatalf("only %d kills in %v, want at least %d", r.kills, budget, least)
	}
	checkPoints(t, r.points, effectPoints)
	if r.lapsed == 0 && r.kills >= minKills { // a few kills may see none
		t.Fatalf("no lease lapsed under a running worker in %d kills: the stalls never outlived a lease", r.kills)
	}
}

// TestCrashLoopTxControl shows the check can fail: with the completion
// after the effect's commit, in a second transaction, a kill between the
// two leaves an effect without its completion, and the redelivery writes
// it twice.
func TestCrashLoopTxControl(t *testing.T) { loopTxControl(t, setupEffects(t)) }

// loopTxControl is the control on r's store.
func loopTxControl(t *testing.T, r *effectsRun) {
	var withoutCompletion, twice int
	for i := range controlKills {
		r.kill(t, twoTxWorker, uint64(i), afterCommit, 0)
		a := r.check(t)
		withoutCompletion, twice = max(withoutCompletion, a.withoutCompletion), max(twice, a.twice)
	}
	t.Logf("control, completion after the commit: %d kills, %d effects without completion, %d twice at most after one", r.kills, withoutCompletion, twice)
	if withoutCompletion == 0 {
		t.Fatalf("%d kills between the effect's commit and the completion left no effect without its completion", r.kills)
	}
}
