//go:build crash_injection

package crashtest_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver, to look at the file before recovery

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The crash test: a worker process (this test binary, re-executed with
// TestCrashWorker) opens the store and runs business+outbox transactions
// and receive/handle/settle cycles as fast as it can, reporting each
// committed send on stdout only after its commit returned. The harness
// SIGKILLs it at a random moment, or has it SIGKILL itself at a chosen
// point (inside a transaction, between a commit and its acknowledgement),
// looks at the file as the dead process left it, reopens it (recovery) and
// checks it, then starts the next worker.
//
// This tests process death, not power loss: the OS keeps what a killed
// process wrote, so every acknowledged commit must survive even with
// synchronous=NORMAL.

const (
	envWorker    = "MQLITE_CRASH_WORKER" // the store's path; set only in the worker
	envSeed      = "MQLITE_CRASH_SEED"
	envPoint     = "MQLITE_CRASH_POINT" // where the worker kills itself; "" = the harness kills it
	envKills     = "MQLITE_CRASH_KILLS" // how many kills the harness makes (make soak); wantKills by default
	crashQueue   = "crash"
	crashMax     = 3
	crashLease   = 300 * time.Millisecond
	wantKills    = 50
	minKills     = 30
	crashBudget  = 4 * time.Minute
	linePrefix   = "CRASH "
	rolledPrefix = "rb:"
)

func openStore(path string) (*mqlite.Store, error) {
	return mqlite.Open(context.Background(), path, mqlite.Config{
		ReaperInterval: 50 * time.Millisecond, SchedulerInterval: 50 * time.Millisecond,
		TTLInterval: -1, JanitorInterval: 200 * time.Millisecond, RetentionInterval: -1,
	})
}

// TestCrashWorker is the worker process; it does nothing unless the
// harness started it.
func TestCrashWorker(t *testing.T) {
	st, rng, seed := startWorker(t, 30)
	defer st.Close()
	ctx := context.Background()
	err := st.CreateQueue(ctx, crashQueue, mqlite.QueueOptions{MaxDeliveryCount: crashMax, LockDuration: crashLease})
	if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		t.Fatalf("worker queue: %v", err)
	}
	if _, err := st.DB().Exec(ordersDDLOf(workerTarget)); err != nil {
		t.Fatalf("worker table: %v", err)
	}
	say := func(format string, args ...any) {
		// One write per line, unbuffered: what the harness reads was said.
		fmt.Fprintf(os.Stdout, linePrefix+format+"\n", args...)
	}
	say("ready")
	stop := time.Now().Add(time.Minute) // a safety net; the harness kills long before
	for n := 0; time.Now().Before(stop); n++ {
		if rng.IntN(2) == 0 {
			workerSend(t, st, rng, seed, n, say)
		} else {
			workerConsume(t, st, rng, say)
		}
	}
}

// crashPoint makes the worker SIGKILL itself the after-th time it passes
// the named point, so that some deaths land exactly inside a transaction
// (or between a commit and its acknowledgement) instead of wherever a
// random moment falls.
type crashPoint struct {
	name  string
	after int
}

var crashAt crashPoint

// workerTarget is the store a worker opened: a SQLite file's path or a
// PostgreSQL URL (envWorker).
var workerTarget string

// crashPasses counts the passes of every point (crashMu): a worker whose
// armed point stays unreached while the others are passed this many
// times, unreachedAfter, says so and exits, so that the harness fails at
// once with the point's name instead of waiting for a timeout.
var crashPasses struct {
	total  int
	armed  int // of the armed point
	budget int // unreachedAfter for the armed point's after
}

// unreachedAfter is how many passes of all points a worker makes before
// it gives up on its armed point: far more than the armed point needs
// (after, 40 at most) at the rarest point's share of the passes.
func unreachedAfter(after int) int { return 2000 + 50*after }

// unreachedLine starts the line a worker says when it gives up.
const unreachedLine = "unreached"

// Crash points.
const (
	inSendTx     = "in-send-tx"    // outbox rows and business rows written, not committed
	beforeAck    = "before-ack"    // committed, not yet acknowledged
	inHandleTx   = "in-handle-tx"  // the handler's business write, not committed
	beforeSettle = "before-settle" // handled and committed, not yet completed
	randomMoment = ""              // the harness kills at a random moment
)

var crashPoints = []string{inSendTx, beforeAck, inHandleTx, beforeSettle}

// crashPause makes the armed point pause the worker instead of killing
// it (envPause): it says "paused <point>" and waits for a line on stdin.
var crashPause bool

// envPause set to 1 makes the worker pause at its armed point.
const envPause = "MQLITE_CRASH_PAUSE"

// pauseAt says the worker paused at point and waits for the harness's go.
func pauseAt(point string) {
	fmt.Fprintf(os.Stdout, "%spaused %s\n", linePrefix, point)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// crashMu guards crashAt.after: LoopTx's workers pass points from
// several handlers at once.
var crashMu sync.Mutex

// maybeCrash kills the process at the configured point. A worker whose
// armed point is never reached (a path that no longer passes it) gives up
// after unreachedAfter passes of the others.
func maybeCrash(point string) {
	if crashAt.name == randomMoment {
		return
	}
	crashMu.Lock()
	defer crashMu.Unlock()
	crashPasses.total++
	if crashAt.name != point {
		if crashPasses.total >= crashPasses.budget {
			fmt.Fprintf(os.Stdout, "%s%s %s: passed %d times in %d passes of the crash points\n",
				linePrefix, unreachedLine, crashAt.name, crashPasses.armed, crashPasses.total)
			os.Exit(3)
		}
		return
	}
	crashPasses.armed++
	if crashAt.after--; crashAt.after == 0 {
		if crashPause {
			// The harness does the harm here (it kills the server), and
			// the worker goes on; no point is armed after it.
			pauseAt(point)
			crashAt.after, crashPasses.budget = -1, math.MaxInt
			return
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// pointOf is the kill point of the harness's kill-th kill (from 0) among
// points: every other kill at a random moment, the others at each of
// points in turn, so that every run kills at every point (with at least
// 2*len(points) kills) and no kill point is left to chance.
func pointOf(kill int, points []string) string {
	if kill%2 == 0 {
		return randomMoment
	}
	return points[(kill/2)%len(points)]
}

// checkPoints fails t unless every point pointOf chose for the run's kills
// fired (all of points once the run made 2*len(points) kills), by the
// kills counted per point.
func checkPoints(t *testing.T, fired map[string]int, points []string) {
	t.Helper()
	kills := 0
	for _, n := range fired {
		kills += n
	}
	chosen := append([]string{randomMoment}, points[:min(len(points), kills/2)]...)
	for _, p := range chosen {
		if fired[p] == 0 {
			name := p
			if p == randomMoment {
				name = "a random moment"
			}
			t.Errorf("no kill at %s in this run (kills per point %v)", name, fired)
		}
	}
}

func workerSend(t *testing.T, st *mqlite.Store, rng *rand.Rand, seed uint64, n int, say func(string, ...any)) {
	ctx := context.Background()
	k := 1 + rng.IntN(8)
	rollback := rng.IntN(8) == 0
	nonces := make([]string, k)
	msgs := make([]outbox.Message, k)
	for i := range msgs {
		nonces[i] = fmt.Sprintf("w%d-%d-%d", seed, n, i)
		if rollback {
			nonces[i] = rolledPrefix + nonces[i]
		}
		msgs[i] = outbox.Message{Body: []byte(nonces[i] + strings.Repeat("x", rng.IntN(200)))}
	}
	var seqs []int64
	errRollback := errors.New("rolled back on purpose")
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		var err error
		if seqs, err = sendOrders(tx, msgs, nonces); err != nil {
			return err
		}
		if rollback {
			return errRollback
		}
		maybeCrash(inSendTx)
		return nil
	})
	if rollback && errors.Is(err, errRollback) {
		return
	}
	if err != nil {
		t.Fatalf("worker send: %v", err)
	}
	maybeCrash(beforeAck)
	for i, seq := range seqs {
		say("ack %d %s", seq, nonces[i]) // after the commit returned
	}
}

func workerConsume(t *testing.T, st *mqlite.Store, rng *rand.Rand, say func(string, ...any)) {
	ctx := context.Background()
	msgs, err := st.Receive(ctx, crashQueue, mqlite.ReceiveOptions{Max: 1 + rng.IntN(10)})
	if err != nil {
		t.Fatalf("worker receive: %v", err)
	}
	for _, m := range msgs {
		say("recv %d %d", m.Seq, m.DeliveryCount)
		var err error
		switch p := rng.IntN(100); {
		case p < 70:
			// Handle in a business transaction, then complete: at-least-once,
			// so a crash in between hands it out again.
			err = st.Tx(ctx, func(tx *mqlite.Tx) error {
				_, err := tx.SQL().ExecContext(tx.Context(), bind(workerTarget, `UPDATE orders SET handled = handled + 1 WHERE seq = ?`), m.Seq)
				if err == nil {
					maybeCrash(inHandleTx)
				}
				return err
			})
			if err == nil {
				maybeCrash(beforeSettle)
				err = st.Complete(ctx, m.Lock())
			}
		case p < 82:
			err = st.Abandon(ctx, m.Lock(), time.Duration(rng.IntN(50))*time.Millisecond)
		case p < 86:
			err = st.Reject(ctx, m.Lock(), "crash-reject", "")
		default:
			// Hold it: the lease lapses, or the kill orphans it.
		}
		if err != nil && !errors.Is(err, mqlite.ErrLockLost) { // a slow worker can outlive its lease
			t.Fatalf("worker settle %d: %v", m.Seq, err)
		}
	}
}

// TestCrashInjection is the harness.
func TestCrashInjection(t *testing.T) {
	want, least, budget := wantKills, minKills, crashBudget
	if v := os.Getenv(envKills); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of kills", envKills, v)
		}
		// A soak makes every kill it asks for, with time enough for each.
		want, least, budget = n, n, time.Duration(n)*5*time.Second
	}
	crashInjection(t, filepath.Join(t.TempDir(), "mq.db"), want, least, budget)
}

// crashInjection kills send-and-consume workers on the store at path (a
// SQLite file or a PostgreSQL URL) want times (at least least, within
// budget), checking the store after each kill.
func crashInjection(t *testing.T, path string, want, least int, budget time.Duration) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("seed %d", seed)
	acked := map[string]int64{} // nonce -> seq, acknowledged by a worker
	deadline := time.Now().Add(budget)
	kills, orphans, deliveries := 0, 0, 0
	points := map[string]int{}
	for kills < want && time.Now().Before(deadline) {
		point := pointOf(kills, crashPoints)
		lines := runAndKill(t, "TestCrashWorker", path, seed+uint64(kills), point, time.Duration(5+rng.IntN(300))*time.Millisecond)
		kills++
		points[point]++
		for _, l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "ack":
				seq, _ := strconv.ParseInt(f[1], 10, 64)
				acked[f[2]] = seq
			case len(f) == 3 && f[0] == "recv":
				deliveries++
				if dc, _ := strconv.Atoi(f[2]); dc < 1 || dc > crashMax {
					t.Fatalf("kill %d: seq %s delivered with count %d, max %d", kills, f[1], dc, crashMax)
				}
			}
		}
		orphans += checkAfterCrash(t, path, acked, kills)
	}
	if onPostgres(path) {
		waitLeasesReclaimed(t, path)
	}
	t.Logf("survived %d SIGKILLs (%d at random moments, %d in a send transaction, %d between commit and ack, %d in a handler transaction, %d between handling and settling): %d acknowledged commits all present, %d orphaned leases reclaimed (by recovery; on PostgreSQL lapsed and reaped), %d deliveries, none past %d",
		kills, points[randomMoment], points[inSendTx], points[beforeAck], points[inHandleTx], points[beforeSettle],
		len(acked), orphans, deliveries, crashMax)
	if kills < least {
		t.Fatalf("only %d kills in %v, want at least %d", kills, budget, least)
	}
	checkPoints(t, points, crashPoints)
}

// runAndKill starts the worker test named worker and returns the complete lines it wrote once
// it died of SIGKILL: sent by the worker itself at point, or, for
// randomMoment, by the harness delay after the worker is ready.
func runAndKill(t *testing.T, worker, path string, seed uint64, point string, delay time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+worker+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), envWorker+"="+path, fmt.Sprintf("%s=%d", envSeed, seed), envPoint+"="+point)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{}, 1)
	done := make(chan []string, 1)
	go func() {
		var lines []string
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				// A last line without its newline was cut by the kill: the
				// worker had not finished saying it.
				if !errors.Is(err, io.EOF) {
					t.Errorf("read worker: %v", err)
				}
				select {
				case ready <- struct{}{}: // it died before it was ready
				default:
				}
				done <- lines
				return
			}
			if rest, ok := strings.CutPrefix(line, linePrefix); ok {
				rest = strings.TrimSuffix(rest, "\n")
				if rest == "ready" {
					ready <- struct{}{}
					continue
				}
				lines = append(lines, rest)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("worker never got ready")
	}
	var lines []string
	if point == randomMoment {
		time.Sleep(delay) // a random moment of the worker's life: a real-time kill is the point
		if err := cmd.Process.Signal(os.Kill); err != nil {
			t.Fatalf("kill worker: %v", err)
		}
		lines = <-done
	} else {
		select {
		case lines = <-done:
		case <-time.After(time.Minute): // a worker that hangs: unreached points end it long before
			_ = cmd.Process.Kill()
			t.Fatalf("worker never reached crash point %s, and hangs", point)
		}
		for _, l := range lines {
			if strings.HasPrefix(l, unreachedLine+" ") {
				_ = cmd.Wait()
				t.Fatalf("worker never reached crash point %s: %s", point, l)
			}
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("worker exited cleanly, want SIGKILL; lines: %q", tail(lines))
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("worker ended with %v, want SIGKILL (point %q); lines: %q", err, point, tail(lines))
	}
	return lines
}

func tail(lines []string) []string { return lines[max(0, len(lines)-5):] }

// checkAfterCrash looks at the file the killed worker left, reopens it as a
// store (recovery) and checks it. It returns how many orphaned leases
// recovery reclaimed.
func checkAfterCrash(t *testing.T, path string, acked map[string]int64, kill int) int {
	t.Helper()
	ctx := context.Background()
	// The leases the dead worker held, as it left them.
	raw, err := rawOpen(path)
	if err != nil {
		t.Fatal(err)
	}
	orphans := map[int64]int{}
	rows, err := raw.QueryContext(ctx, `SELECT id, delivery_count FROM mqlite_messages WHERE state = 'locked'`)
	if err != nil {
		_ = raw.Close()
		if strings.Contains(err.Error(), "no such table") || strings.Contains(err.Error(), "does not exist") {
			return 0 // killed before the schema was in place
		}
		t.Fatalf("kill %d: read orphans: %v", kill, err)
	}
	for rows.Next() {
		var id int64
		var dc int
		if err := rows.Scan(&id, &dc); err != nil {
			t.Fatal(err)
		}
		orphans[id] = dc
	}
	if err := errors.Join(rows.Err(), rows.Close(), raw.Close()); err != nil {
		t.Fatal(err)
	}

	st, err := mqlite.Open(ctx, path, mqlite.Config{
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		t.Fatalf("kill %d: reopen: %v", kill, err)
	}
	defer st.Close()
	db := st.DB()
	count := func(q string) int {
		var n int
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("kill %d: %s: %v", kill, q, err)
		}
		return n
	}
	ordersTable := `SELECT count(*) FROM sqlite_schema WHERE name = 'orders'`
	if onPostgres(path) {
		ordersTable = `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'orders'`
	}
	if count(ordersTable) == 0 {
		if len(acked) > 0 {
			t.Fatalf("kill %d: orders table gone with %d acknowledged commits", kill, len(acked))
		}
		return 0
	}

	// Recovery: no lease survives Open; each orphan is back to active, or
	// dead-lettered at the delivery limit. On PostgreSQL Open releases
	// nothing (another process may hold the leases): the orphans lapse, and
	// a claim or the reaper takes them back (the harness checks that at
	// the end).
	held := len(orphans)
	if onPostgres(path) {
		orphans = nil
	} else if n := count(`SELECT count(*) FROM mqlite_messages WHERE state = 'locked'`); n != 0 {
		t.Fatalf("kill %d: %d leases survived recovery", kill, n)
	}
	for id, dc := range orphans {
		var state, reason string
		var got int
		err := db.QueryRowContext(ctx, `SELECT state, coalesce(dead_letter_reason, ''), delivery_count FROM mqlite_messages WHERE id = ?`, id).
			Scan(&state, &reason, &got)
		if err != nil {
			t.Fatalf("kill %d: orphan %d: %v", kill, id, err)
		}
		want := mqlite.StateActive
		if dc >= crashMax {
			want = mqlite.StateDeadLettered
		}
		if mqlite.State(state) != want || got != dc || (want == mqlite.StateDeadLettered && reason != mqlite.ReasonMaxDelivery) {
			t.Fatalf("kill %d: orphan %d on delivery %d recovered as %s (%q, count %d), want %s", kill, id, dc, state, reason, got, want)
		}
	}
	if n := count(`SELECT coalesce(max(delivery_count), 0) FROM mqlite_messages`); n > crashMax {
		t.Fatalf("kill %d: a message was delivered %d times, max %d", kill, n, crashMax)
	}

	// Business rows and messages agree one for one: a message has its
	// order, and an order without its message was handled (completed).
	if n := count(`SELECT count(*) FROM mqlite_messages m WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.seq = m.id)`); n != 0 {
		t.Fatalf("kill %d: %d messages without their business row", kill, n)
	}
	if n := count(`SELECT count(*) FROM orders o WHERE o.handled = 0 AND NOT EXISTS (SELECT 1 FROM mqlite_messages m WHERE m.id = o.seq)`); n != 0 {
		t.Fatalf("kill %d: %d business rows lost their unhandled message", kill, n)
	}
	if n := count(`SELECT count(*) FROM orders WHERE nonce LIKE '` + rolledPrefix + `%'`); n != 0 {
		t.Fatalf("kill %d: %d rolled-back business rows exist", kill, n)
	}
	rows, err = db.QueryContext(ctx, `SELECT o.nonce, o.seq, o.body_hash, m.body FROM orders o LEFT JOIN mqlite_messages m ON m.id = o.seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	present := map[string]int64{}
	for rows.Next() {
		var nonce string
		var seq int64
		var hash, body []byte
		if err := rows.Scan(&nonce, &seq, &hash, &body); err != nil {
			t.Fatal(err)
		}
		present[nonce] = seq
		if body != nil {
			if sum := sha256.Sum256(body); string(sum[:]) != string(hash) || !strings.HasPrefix(string(body), nonce) {
				t.Fatalf("kill %d: seq %d body changed", kill, seq)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every commit a worker acknowledged is there, with its seq.
	for nonce, seq := range acked {
		if got, ok := present[nonce]; !ok || got != seq {
			t.Fatalf("kill %d: acknowledged commit %s (seq %d) is missing (found seq %d, %v)", kill, nonce, seq, got, ok)
		}
	}
	return held
}

// startWorker is the start of every worker process: it skips unless the
// harness started it, reads its random seed, arms the crash point named by the
// harness to fire after 1 to maxAfter passes, and opens the store.
func startWorker(t *testing.T, maxAfter int) (*mqlite.Store, *rand.Rand, uint64) {
	path := os.Getenv(envWorker)
	if path == "" {
		t.Skip("runs only as a crash harness's worker process")
	}
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	workerTarget = path
	crashPause = os.Getenv(envPause) == "1"
	crashAt = crashPoint{name: os.Getenv(envPoint), after: 1 + rng.IntN(maxAfter)}
	crashPasses.budget = unreachedAfter(crashAt.after)
	st, err := openStore(path)
	if err != nil {
		t.Fatalf("worker open: %v", err)
	}
	return st, rng, seed
}

// sendOrders sends msgs in tx and writes one orders row per message (its
// nonce, seq and body hash) beside it; it returns the messages' seqs.
func sendOrders(tx *mqlite.Tx, msgs []outbox.Message, nonces []string) ([]int64, error) {
	res, err := outbox.SendBatch(tx.Context(), tx.SQL(), crashQueue, msgs)
	if err != nil {
		return nil, err
	}
	seqs := make([]int64, 0, len(res))
	for i, r := range res {
		if r.Err != nil {
			return nil, r.Err
		}
		sum := sha256.Sum256(msgs[i].Body)
		if _, err := tx.SQL().ExecContext(tx.Context(),
			bind(workerTarget, `INSERT INTO orders (nonce, seq, body_hash) VALUES (?, ?, ?)`), nonces[i], r.Seq, sum[:]); err != nil {
			return nil, err
		}
		seqs = append(seqs, r.Seq)
	}
	return seqs, nil
}
