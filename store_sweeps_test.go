package mqlite_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// sweepBundle is a store on the fake clock with its loops off; tests run
// the sweeps by hand with sweepNow.
type sweepBundle struct {
	*testdb.Bundle
	t *testing.T
}

func sweepSetup(t *testing.T) *sweepBundle {
	t.Helper()
	t.Parallel()
	return &sweepBundle{Bundle: testdb.Open(t, mqlite.Config{}), t: t}
}

// send commits msgs on queue in one transaction and returns their seqs.
func (b *sweepBundle) send(queue string, msgs ...outbox.Message) []int64 {
	b.t.Helper()
	var seqs []int64
	err := b.Store.Tx(context.Background(), func(tx *mqlite.Tx) error {
		for _, m := range msgs {
			seq, err := outbox.SendOne(tx.Context(), tx.SQL(), queue, m)
			if err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		return nil
	})
	if err != nil {
		b.t.Fatalf("send on %s: %v", queue, err)
	}
	return seqs
}

// receive claims up to max messages of queue.
func (b *sweepBundle) receive(queue string, max int) []mqlite.Message {
	b.t.Helper()
	msgs, err := b.Store.Receive(context.Background(), queue, mqlite.ReceiveOptions{Max: max})
	if err != nil {
		b.t.Fatalf("receive %s: %v", queue, err)
	}
	return msgs
}

// sweepNow runs every sweep once and returns the rows each changed.
func (b *sweepBundle) sweepNow() map[string]int64 {
	b.t.Helper()
	n, err := mqlite.RunSweeps(context.Background(), b.Store)
	if err != nil {
		b.t.Fatalf("sweeps: %v", err)
	}
	return n
}

// state returns the state of seq on queue as Peek or PeekDeadLetters shows
// it, or "" when the message is gone.
func (b *sweepBundle) state(queue string, seq int64) mqlite.Message {
	b.t.Helper()
	return peekSeq(b.t, b.Store, queue, seq)
}

func peekSeq(t *testing.T, st *mqlite.Store, queue string, seq int64) mqlite.Message {
	t.Helper()
	for _, peek := range []func(context.Context, string, mqlite.PeekParams) ([]mqlite.Message, error){
		st.Peek, st.PeekDeadLetters,
	} {
		msgs, err := peek(context.Background(), queue, mqlite.PeekParams{FromSeq: seq, Max: 1})
		if err != nil {
			t.Fatalf("peek %s/%d: %v", queue, seq, err)
		}
		if len(msgs) == 1 && msgs[0].Seq == seq {
			return msgs[0]
		}
	}
	return mqlite.Message{}
}

func (b *sweepBundle) wantState(queue string, seq int64, want mqlite.State) mqlite.Message {
	b.t.Helper()
	m := b.state(queue, seq)
	if m.State != want {
		b.t.Fatalf("%s/%d: state %q, want %q", queue, seq, m.State, want)
	}
	return m
}

// atDeadline advances the clock to a millisecond before d from now and
// checks that sweep changes nothing, then to d exactly (a deadline is
// inclusive) and checks that it changes want rows.
func (b *sweepBundle) atDeadline(d time.Duration, sweep string, want int64) {
	b.t.Helper()
	b.Clock.Advance(d - time.Millisecond)
	if n := b.sweepNow(); n[sweep] != 0 {
		b.t.Fatalf("%s changed %d rows a millisecond early", sweep, n[sweep])
	}
	b.Clock.Advance(time.Millisecond)
	if n := b.sweepNow(); n[sweep] != want {
		b.t.Fatalf("%s changed %d rows at the deadline, want %d", sweep, n[sweep], want)
	}
}

func body(s string) outbox.Message { return outbox.Message{Body: []byte(s)} }

// TestSweepReaperAllQueues: the reaper releases expired leases of every
// queue (none of them received from), at the exact deadline and not a
// millisecond before, and dead-letters the last allowed delivery.
func TestSweepReaperAllQueues(t *testing.T) {
	b := sweepSetup(t)
	opts := mqlite.QueueOptions{MaxDeliveryCount: 2, LockDuration: 30 * time.Second}
	b.Queue(t, "a", opts)
	b.Queue(t, "b", opts)
	sa := b.send("a", body("a1"))[0]
	sb := b.send("b", body("b1"))[0]
	b.receive("a", 1)
	b.receive("b", 1)

	b.atDeadline(30*time.Second, "reaper", 2)
	for q, seq := range map[string]int64{"a": sa, "b": sb} {
		m := b.wantState(q, seq, mqlite.StateActive)
		if m.DeliveryCount != 1 || !m.LockedUntil.IsZero() {
			t.Fatalf("%s/%d after reap: count %d, lease %v", q, seq, m.DeliveryCount, m.LockedUntil)
		}
	}

	// The second and last delivery expires: dead letter.
	b.receive("a", 1)
	b.Clock.Advance(30 * time.Second)
	if n := b.sweepNow(); n["reaper"] != 1 {
		t.Fatalf("reaped %d, want 1", n["reaper"])
	}
	m := b.wantState("a", sa, mqlite.StateDeadLettered)
	if m.DeadLetterReason != mqlite.ReasonMaxDelivery || m.DeliveryCount != 2 ||
		!m.DeadLetteredAt.Equal(b.Clock.Now()) || m.DeadLetterDescription == "" {
		t.Fatalf("dead letter: %+v", m)
	}
}

// TestSweepScheduler: scheduled messages and delayed abandons become active
// when due, on a queue nobody receives from.
func TestSweepScheduler(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{})
	later := b.send("q", outbox.Message{Body: []byte("x"), DeliverAt: b.Clock.Now().Add(10 * time.Second)})[0]
	now := b.send("q", body("y"))[0]
	msgs := b.receive("q", 1)
	if len(msgs) != 1 || msgs[0].Seq != now {
		t.Fatalf("received %v, want only %d", msgs, now)
	}
	if err := b.Store.Abandon(context.Background(), msgs[0].Lock(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	b.wantState("q", now, mqlite.StateScheduled)

	b.atDeadline(5*time.Second, "scheduler", 1)
	b.wantState("q", now, mqlite.StateActive)
	b.wantState("q", later, mqlite.StateScheduled)
	b.Clock.Advance(5 * time.Second)
	b.sweepNow()
	b.wantState("q", later, mqlite.StateActive)
}

// TestSweepTTL: expired messages nobody holds are removed, or dead-lettered
// on a queue with DeadLetterOnExpire; a locked one waits for its lease.
func TestSweepTTL(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "drop", mqlite.QueueOptions{LockDuration: time.Minute})
	b.Queue(t, "keep", mqlite.QueueOptions{LockDuration: time.Minute, DeadLetterOnExpire: true})
	ttl := 5 * time.Second
	seqs := map[string]map[string]int64{}
	for _, q := range []string{"drop", "keep"} {
		seqs[q] = map[string]int64{}
		// Oldest first: the deferred and the locked ones are received.
		s := b.send(q,
			outbox.Message{Body: []byte("deferred"), TTL: ttl},
			outbox.Message{Body: []byte("locked"), TTL: ttl},
			outbox.Message{Body: []byte("active"), TTL: ttl},
			outbox.Message{Body: []byte("scheduled"), TTL: ttl, DeliverAt: b.Clock.Now().Add(time.Hour)},
			outbox.Message{Body: []byte("forever")})
		seqs[q]["deferred"], seqs[q]["locked"], seqs[q]["active"] = s[0], s[1], s[2]
		seqs[q]["scheduled"], seqs[q]["forever"] = s[3], s[4]
		got := b.receive(q, 2)
		if err := b.Store.Defer(context.Background(), got[0].Lock()); err != nil {
			t.Fatal(err)
		}
	}
	b.atDeadline(ttl, "ttl", 6)
	for _, name := range []string{"deferred", "active", "scheduled"} {
		b.wantState("drop", seqs["drop"][name], "")
		m := b.wantState("keep", seqs["keep"][name], mqlite.StateDeadLettered)
		if m.DeadLetterReason != mqlite.ReasonTTL || string(m.Body) != name {
			t.Fatalf("keep/%s: %+v", name, m)
		}
	}
	for _, q := range []string{"drop", "keep"} {
		b.wantState(q, seqs[q]["locked"], mqlite.StateLocked)
		b.wantState(q, seqs[q]["forever"], mqlite.StateActive)
	}
	// The lease ends: the reaper hands it back and the TTL sweep of the same
	// round takes it.
	b.Clock.Advance(time.Minute)
	if n := b.sweepNow(); n["reaper"] != 2 || n["ttl"] != 2 {
		t.Fatalf("sweeps %v, want 2 reaped and 2 expired", n)
	}
	b.wantState("drop", seqs["drop"]["locked"], "")
	b.wantState("keep", seqs["keep"]["locked"], mqlite.StateDeadLettered)
}

// TestSweepJanitor: a completion's completed row becomes a receipt at the
// janitor's next pass, which replays as the completed row did; receipts,
// attempts and dedup keys go when their window has passed, not before.
func TestSweepJanitor(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{DedupWindow: time.Hour, DedupByBody: true})
	db := b.Store.DB()
	ctx := context.Background()
	count := func(table string) int64 { return testdb.Int(t, db, `SELECT count(*) FROM mqlite_`+table) }
	completedRows := func() int64 {
		return testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages WHERE state = 'completed'`)
	}
	b.send("q", body("1"), body("2"))
	msgs, err := b.Store.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 1, AttemptID: "att"})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	if err := b.Store.Complete(ctx, msgs[0].Lock()); err != nil {
		t.Fatal(err)
	}
	if completedRows() != 1 || count("settlement_receipts") != 0 || count("receive_attempts") != 1 || count("dedup") != 2 {
		t.Fatalf("setup: %d completed rows, %d receipts, %d attempts, %d dedup", completedRows(),
			count("settlement_receipts"), count("receive_attempts"), count("dedup"))
	}
	if n := b.sweepNow(); n["janitor"] != 1 || completedRows() != 0 || count("messages") != 1 || count("settlement_receipts") != 1 {
		t.Fatalf("janitor changed %d rows: %d completed rows, %d messages, %d receipts; want the completed row turned into a receipt",
			n["janitor"], completedRows(), count("messages"), count("settlement_receipts"))
	}
	if err := b.Store.Complete(ctx, msgs[0].Lock()); err != nil {
		t.Fatalf("replay from the receipt the completed row became: %v", err)
	}
	b.atDeadline(30*time.Minute, "janitor", 2)
	if count("settlement_receipts") != 0 || count("receive_attempts") != 0 || count("dedup") != 2 {
		t.Fatal("janitor took the wrong rows")
	}
	b.Clock.Advance(30 * time.Minute)
	if n := b.sweepNow(); n["janitor"] != 2 || count("dedup") != 0 {
		t.Fatalf("janitor removed %d, want the 2 dedup keys", n["janitor"])
	}
}

// TestSweepJanitorKeepsTheWALShort: a janitor pass of some 80 statements
// (40,000 expired dedup keys) waits for the checkpointer as it goes, so
// the WAL starts over again and again and never nears the backstop
// checkpoint's 4,096 frames, which would run inside one of its commits.
// Without the waits the WAL file grew to 1,489 frames.
func TestSweepJanitorKeepsTheWALShort(t *testing.T) {
	const keys = 40_000
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{})
	db := b.Store.DB()
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO mqlite_dedup (queue, key, seq, expires_at) SELECT 'q', randomblob(16), i, 1 FROM n`, keys); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	if n := b.sweepNow(); n["janitor"] != keys {
		t.Fatalf("janitor removed %d keys, want %d", n["janitor"], keys)
	}
	fi, err := os.Stat(b.Path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if frames := fi.Size() / (engine.PageSize + 24); frames > 800 {
		t.Fatalf("the WAL reached %d frames during the janitor's pass; want it to start over well before 4,096", frames)
	}
}

// TestSweepJanitorCompletedRowPastItsWindow: a completed row the janitor first
// meets after its replay window goes without a receipt.
func TestSweepJanitorCompletedRowPastItsWindow(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{})
	ctx := context.Background()
	b.send("q", body("1"))
	m := b.receive("q", 1)[0]
	if err := b.Store.Complete(ctx, m.Lock()); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(30 * time.Minute)
	if n := b.sweepNow(); n["janitor"] != 1 {
		t.Fatalf("janitor changed %d rows, want the completed row", n["janitor"])
	}
	db := b.Store.DB()
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_messages`) + testdb.Int(t, db, `SELECT count(*) FROM mqlite_settlement_receipts`); n != 0 {
		t.Fatalf("%d rows left, want none", n)
	}
	if err := b.Store.Complete(ctx, m.Lock()); !errors.Is(err, mqlite.ErrLockLost) {
		t.Fatalf("a completion replayed after its window: %v, want ErrLockLost", err)
	}
}

// deadLetter sends msgs on queue and rejects each, oldest first.
func (b *sweepBundle) deadLetter(queue string, msgs ...outbox.Message) []int64 {
	b.t.Helper()
	seqs := b.send(queue, msgs...)
	got := b.receive(queue, len(msgs))
	if len(got) != len(msgs) {
		b.t.Fatalf("received %d of %d", len(got), len(msgs))
	}
	for _, m := range got {
		if err := b.Store.Reject(context.Background(), m.Lock(), "test", "dead on purpose"); err != nil {
			b.t.Fatal(err)
		}
	}
	return seqs
}

func (b *sweepBundle) deadSeqs(queue string) []int64 {
	b.t.Helper()
	msgs, err := b.Store.PeekDeadLetters(context.Background(), queue, mqlite.PeekParams{Max: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Seq)
	}
	return out
}

func equalSeqs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSweepRetention: dead letters beyond the age, count and byte bounds go,
// oldest first; unbounded queues keep everything.
func TestSweepRetention(t *testing.T) {
	b := sweepSetup(t)
	none := mqlite.DLQRetention{MaxAge: -1, MaxCount: -1, MaxBytes: -1}
	age, count, size := none, none, none
	age.MaxAge, count.MaxCount, size.MaxBytes = time.Hour, 3, 10
	b.Queue(t, "age", mqlite.QueueOptions{DLQ: age})
	b.Queue(t, "count", mqlite.QueueOptions{DLQ: count})
	b.Queue(t, "bytes", mqlite.QueueOptions{DLQ: size})
	b.Queue(t, "all", mqlite.QueueOptions{DLQ: none})

	old := b.deadLetter("age", body("o1"), body("o2"))
	b.Clock.Advance(30 * time.Minute)
	young := b.deadLetter("age", body("y1"))
	c := b.deadLetter("count", body("c1"), body("c2"), body("c3"), body("c4"), body("c5"))
	s := b.deadLetter("bytes", body("b001"), body("b002"), body("b003"), body("b004"))
	a := b.deadLetter("all", body("a1"), body("a2"))

	if n := b.sweepNow(); n["retention"] != 2+2 {
		t.Fatalf("retention removed %d, want 4", n["retention"])
	}
	b.atDeadline(30*time.Minute, "retention", 2)
	for _, tc := range []struct {
		queue string
		want  []int64
	}{
		{"age", young},
		{"count", c[2:]},
		{"bytes", s[2:]}, // 4 bytes each, 10 allowed: the newest two
		{"all", a},
	} {
		if got := b.deadSeqs(tc.queue); !equalSeqs(got, tc.want) {
			t.Errorf("%s keeps %v, want %v (old: %v)", tc.queue, got, tc.want, old)
		}
	}
}

// walState is the size and hash of the store's WAL file.
func walState(t *testing.T, path string) (int64, [sha256.Size]byte) {
	t.Helper()
	raw, err := os.ReadFile(path + "-wal")
	if err != nil {
		t.Fatalf("read wal: %v", err)
	}
	return int64(len(raw)), sha256.Sum256(raw)
}

// TestSweepIdleStoreWritesNothing: with messages in every state but nothing
// due, rounds of every sweep leave the WAL byte for byte as it was.
func TestSweepIdleStoreWritesNothing(t *testing.T) {
	b := sweepSetup(t)
	b.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Hour, DedupWindow: time.Hour})
	b.Queue(t, "ttl", mqlite.QueueOptions{DefaultTTL: time.Hour, DeadLetterOnExpire: true})
	b.deadLetter("q", body("dead"))
	b.send("q", body("locked"), body("deferred"), body("active"),
		outbox.Message{Body: []byte("scheduled"), DeliverAt: b.Clock.Now().Add(time.Hour)})
	got := b.receive("q", 2)
	if err := b.Store.Defer(context.Background(), got[1].Lock()); err != nil {
		t.Fatal(err)
	}
	b.send("ttl", body("t"))
	b.sweepNow()

	size, sum := walState(t, b.Path)
	if size == 0 {
		t.Fatal("empty WAL: the test would prove nothing")
	}
	for range 5 {
		b.Clock.Advance(time.Minute)
		if n := b.sweepNow(); n["reaper"]+n["scheduler"]+n["ttl"]+n["janitor"]+n["retention"] != 0 {
			t.Fatalf("idle sweeps changed rows: %v", n)
		}
	}
	if s2, sum2 := walState(t, b.Path); s2 != size || sum2 != sum {
		t.Fatalf("idle sweeps wrote to the WAL: %d bytes before, %d after", size, s2)
	}
}

// TestLoopsRunOnTheirOwn runs a store with its loops on inside a synctest
// bubble, where the system clock is fake: the loops alone promote a
// scheduled message and reap a lease, and Close stops them (synctest fails
// the test if any goroutine of the bubble is left).
func TestLoopsRunOnTheirOwn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, err := mqlite.Open(ctx, filepath.Join(dir, "mq.db"), mqlite.Config{
			ReaperInterval: time.Second, SchedulerInterval: time.Second,
			TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{LockDuration: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		err = st.Tx(ctx, func(tx *mqlite.Tx) error {
			for _, m := range []outbox.Message{
				{Body: []byte("now")},
				{Body: []byte("later"), DeliverAt: time.Now().Add(3 * time.Second)},
			} {
				seq, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", m)
				if err != nil {
					return err
				}
				seqs = append(seqs, seq)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3500 * time.Millisecond) // fake time: three ticks of each loop
		synctest.Wait()
		for _, seq := range seqs {
			if m := peekSeq(t, st, "q", seq); m.State != mqlite.StateActive {
				t.Errorf("seq %d: state %q, want active by the loops", seq, m.State)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// lockedBuffer is a concurrency-safe log sink.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	n   chan struct{}
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.n <- struct{}{}:
	default:
	}
	return l.buf.Write(p)
}

// TestLoopErrorsAreLoggedAndLoopsGoOn: a sweep that fails reports to
// Config.Logger and runs again at its next tick.
func TestLoopErrorsAreLoggedAndLoopsGoOn(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{n: make(chan struct{}, 1)}
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{
		Logger:         slog.New(slog.NewTextHandler(logs, nil)),
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, RetentionInterval: -1,
		JanitorInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Break the janitor's statement: its table is gone.
	if _, err := st.DB().Exec(`DROP TABLE mqlite_receive_attempts`); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for errorsLogged := 0; errorsLogged < 2; {
		select {
		case <-logs.n:
		case <-deadline:
			t.Fatal("no second error logged: the loop stopped")
		}
		logs.mu.Lock()
		errorsLogged = bytes.Count(logs.buf.Bytes(), []byte("sweep failed"))
		logs.mu.Unlock()
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if !bytes.Contains(logs.buf.Bytes(), []byte("sweep=janitor")) {
		t.Fatalf("log lacks the sweep's name:\n%s", logs.buf.String())
	}
}

// TestLoopsStartStopStress opens and closes stores whose loops tick every
// millisecond, so Close often meets a sweep in flight. TestMain's goleak
// check proves every loop goroutine ended.
func TestLoopsStartStopStress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "mq.db")
	ms := time.Millisecond
	for i := range 30 {
		st, err := mqlite.Open(context.Background(), path, mqlite.Config{
			ReaperInterval: ms, SchedulerInterval: ms, TTLInterval: ms, JanitorInterval: ms, RetentionInterval: ms,
		})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if i == 0 {
			if err := st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(i%4) * ms) // vary where Close lands; not a synchronisation
		if err := st.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("second close %d: %v", i, err)
		}
	}
}

// TestLoopIntervalOptions: -1 is off, other negatives are refused.
func TestLoopIntervalOptions(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mq.db")
	for _, o := range []mqlite.Config{
		{ReaperInterval: -2}, {SchedulerInterval: -time.Second}, {TTLInterval: -5},
		{JanitorInterval: -time.Minute}, {RetentionInterval: -2},
	} {
		if _, err := mqlite.Open(context.Background(), path, o); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Errorf("Open(%+v): %v, want ErrInvalidArgument", o, err)
		}
	}
	st, err := mqlite.Open(context.Background(), path, mqlite.Config{
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseInsideTxWithLoopsWaiting: Close called while the caller holds
// the connection (here, from inside a Tx callback) must not wait for a
// sweep that is itself waiting for that connection; it waits for the
// transaction only up to the busy timeout, and the transaction cannot
// commit.
func TestCloseInsideTxWithLoopsWaiting(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{
		ReaperInterval: ms, SchedulerInterval: ms, TTLInterval: ms, JanitorInterval: ms, RetentionInterval: ms,
		BusyTimeout: 50 * ms,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed, txErr := make(chan error, 1), make(chan error, 1)
	go func() {
		txErr <- st.Tx(context.Background(), func(tx *mqlite.Tx) error {
			time.Sleep(20 * ms) // let every loop tick and queue up behind this transaction
			closed <- st.Close()
			return nil
		})
	}()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close inside a transaction deadlocked with the loops")
	}
	if err := <-txErr; !errors.Is(err, mqlite.ErrClosed) {
		t.Fatalf("the transaction that called Close: %v, want ErrClosed", err)
	}
}

// countingClock is a fake clock that signals each time it is read.
type countingClock struct {
	*testdb.Clock
	reads chan struct{}
}

func (c countingClock) Now() time.Time {
	select {
	case c.reads <- struct{}{}:
	default:
	}
	return c.Clock.Now()
}

// TestLoopsReadTheInjectedClock: the loops take "now" from Config.Clock.
// The fake clock stands months before the wall clock, so a loop reading the
// wall clock would reap the lease at once.
func TestLoopsReadTheInjectedClock(t *testing.T) {
	t.Parallel()
	clock := countingClock{Clock: testdb.NewClock(), reads: make(chan struct{})}
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{
		Clock: clock, ReaperInterval: time.Millisecond,
		SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{LockDuration: time.Second}); err != nil {
		t.Fatal(err)
	}
	_, err = outbox.Send(context.Background(), st, "q", body("x"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Receive(context.Background(), "q", mqlite.ReceiveOptions{})
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	timeout := time.After(10 * time.Second)
	waitReads := func(n int) {
		for range n {
			select {
			case <-clock.reads:
			case <-timeout:
				t.Fatal("the reaper loop does not read the clock")
			}
		}
	}
	waitReads(20) // twenty ticks of the reaper
	if m := peekSeq(t, st, "q", got[0].Seq); m.State != mqlite.StateLocked {
		t.Fatalf("state %q before the fake lease ended, want locked", m.State)
	}
	clock.Advance(time.Second)
	for peekSeq(t, st, "q", got[0].Seq).State != mqlite.StateActive {
		waitReads(1)
	}
}

// TestClaimSkipsTheProbeOnlyWhenNothingIsDue: a claim skips the due probe
// while its queue has nothing due, and still sees every due moment that
// arose since, however it arose: a row made scheduled by the application's
// own SQL, a rolled-back transaction, a lease that lapsed. The loops are
// off, so only the claim's probe can promote or reap.
func TestClaimSkipsTheProbeOnlyWhenNothingIsDue(t *testing.T) {
	b := sweepSetup(t)
	ctx := context.Background()
	b.Queue(t, "q", mqlite.QueueOptions{LockDuration: time.Hour})
	seqs := b.send("q", body("a"), body("b"), body("c"))
	if got := b.receive("q", 1); len(got) != 1 || got[0].Seq != seqs[0] {
		t.Fatalf("first receive: %+v", got)
	}
	// b, made scheduled and due by the application's SQL after the probe
	// of the first receive, is promoted by the next one.
	now := b.Clock.Now().UnixMilli()
	if err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := tx.SQL().ExecContext(tx.Context(),
			`UPDATE mqlite_messages SET state = 'scheduled', visible_at = ? WHERE id = ?`, now, seqs[1])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := b.receive("q", 1); len(got) != 1 || got[0].Seq != seqs[1] {
		t.Fatalf("receive after the application scheduled b: %+v, want seq %d", got, seqs[1])
	}
	// A rolled-back transaction that took c out leaves it claimable.
	rollback := errors.New("roll back")
	if err := b.Store.Tx(ctx, func(tx *mqlite.Tx) error {
		if _, err := tx.SQL().ExecContext(tx.Context(), `DELETE FROM mqlite_messages WHERE id = ?`, seqs[2]); err != nil {
			return err
		}
		return rollback
	}); !errors.Is(err, rollback) {
		t.Fatalf("tx: %v", err)
	}
	if got := b.receive("q", 1); len(got) != 1 || got[0].Seq != seqs[2] {
		t.Fatalf("receive after the rollback: %+v, want seq %d", got, seqs[2])
	}
	if got := b.receive("q", 1); len(got) != 0 {
		t.Fatalf("receive with every lease running: %+v", got)
	}
	// The leases lapse: the next claims reap them, in order.
	b.Clock.Advance(time.Hour)
	for i, seq := range seqs {
		got := b.receive("q", 1)
		if len(got) != 1 || got[0].Seq != seq || got[0].DeliveryCount != 2 {
			t.Fatalf("receive %d after the leases lapsed: %+v, want seq %d on delivery 2", i, got, seq)
		}
	}
}
