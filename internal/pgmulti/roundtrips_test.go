package pgmulti_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/fakeclock"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/outbox"
)

// wire counts the round trips a store makes to PostgreSQL: it sits between
// the store and the server as a TCP proxy and reads what the store sends.
// A round trip is a simple query ('Q': BEGIN, COMMIT, LISTEN) or the Sync
// ('S') that ends a batch of the extended protocol (a prepared statement's
// Bind and Execute, or a Parse and Describe); the ping database/sql makes
// of a connection idle for a second is left out. It keeps the text of what
// it counted, for a failure's message.
type wire struct {
	mu    sync.Mutex
	trips int
	seen  []string
	stmts map[string]string // prepared statements' queries by name
	next  string            // what the next Sync ends: a Parse's or a Bind's query
}

// count records one frontend message of type typ with payload body.
func (w *wire) count(typ byte, body []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch typ {
	case 'Q':
		text := strings.TrimRight(string(body), "\x00")
		if text == "-- ping" {
			return
		}
		w.trips++
		w.seen = append(w.seen, text)
	case 'P': // Parse: name\0 query\0 ...
		if parts := strings.SplitN(string(body), "\x00", 3); len(parts) == 3 {
			if w.stmts == nil {
				w.stmts = map[string]string{}
			}
			w.stmts[parts[0]], w.next = parts[1], "prepare "+parts[1]
		}
	case 'B': // Bind: portal\0 statement\0 ...
		if parts := strings.SplitN(string(body), "\x00", 3); len(parts) == 3 {
			w.next = w.stmts[parts[1]]
		}
	case 'S':
		w.trips++
		w.seen = append(w.seen, oneLine(w.next))
	}
}

// oneLine puts a statement's text on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// short joins statements for a log line, each cut to its start.
func short(stmts []string) string {
	out := make([]string, len(stmts))
	for i, s := range stmts {
		if len(s) > 60 {
			s = s[:60] + "…"
		}
		out[i] = s
	}
	return strings.Join(out, " | ")
}

// since returns how many round trips were made after mark, and their text.
func (w *wire) since(mark int) (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.trips - mark, append([]string(nil), w.seen[mark:]...)
}

// mark is where the count stands.
func (w *wire) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.trips
}

// proxy starts a counting proxy to the server of rawURL and returns the
// URL that goes through it (TLS off, so that the proxy reads the protocol)
// and its counter. It stops when t ends.
func proxy(t *testing.T, rawURL string) (string, *wire) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wire{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, s); _ = c.Close() })
			wg.Go(func() { _ = w.relay(s, c); _ = s.Close() })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String(), w
}

// relay copies the frontend messages of from to to, counting each.
func (w *wire) relay(to io.Writer, from io.Reader) error {
	var head [5]byte
	// Untyped messages first: an SSL or GSS request (answered with one
	// byte, then the startup follows), then the startup message.
	for {
		if _, err := io.ReadFull(from, head[:4]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[:4]))
		body := make([]byte, n-4)
		if _, err := io.ReadFull(from, body); err != nil {
			return err
		}
		if _, err := to.Write(append(head[:4:4], body...)); err != nil {
			return err
		}
		if code := binary.BigEndian.Uint32(body[:4]); code != 80877103 && code != 80877104 {
			break // the startup message (or a cancel request, after which nothing comes)
		}
	}
	for {
		if _, err := io.ReadFull(from, head[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[1:]))
		body := make([]byte, n-4)
		if _, err := io.ReadFull(from, body); err != nil {
			return err
		}
		w.count(head[0], body)
		if _, err := to.Write(append(head[:], body...)); err != nil {
			return err
		}
	}
}

// quiet is a store's configuration with no background loop, so that every
// statement the proxy sees is the test's; one connection, so that every
// statement is prepared once by the warm-up.
func quiet(clock mqlite.Clock) mqlite.Config {
	return mqlite.Config{Clock: clock, MaxConns: 1,
		ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1, ScheduleInterval: -1}
}

// TestRoundTrips pins how many round trips the store's message path costs
// on PostgreSQL: a Receive, a Complete, a CompleteBatch and each plain
// settlement outside a caller's transaction are one statement each, sent
// in autocommit; a plain send in Store.Tx is BEGIN, one statement, COMMIT.
// The control (a Store.Tx of one statement counts 3) shows the proxy sees
// the transaction's own round trips.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	through, w := proxy(t, pgtest.URL(t))
	clock := fakeclock.New()
	st, err := mqlite.Open(ctx, through, quiet(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, q := range []string{"q", "other"} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateQueue(ctx, "fifo", mqlite.QueueOptions{Ordering: mqlite.FIFO}); err != nil {
		t.Fatal(err)
	}
	send := func(queue string, n int) {
		t.Helper()
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Body: []byte("body")}
		}
		if err := st.Tx(ctx, func(tx *mqlite.Tx) error {
			_, err := outbox.SendBatch(tx.Context(), tx.SQL(), queue, msgs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(max int) []mqlite.Message {
		t.Helper()
		msgs, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{Max: max})
		if err != nil || len(msgs) != max {
			t.Fatalf("Receive(%d): %d messages, %v", max, len(msgs), err)
		}
		return msgs
	}
	locks := func(msgs []mqlite.Message) []mqlite.Lock {
		out := make([]mqlite.Lock, len(msgs))
		for i, m := range msgs {
			out[i] = m.Lock()
		}
		return out
	}
	ops := []struct {
		name string
		want int
		run  func() error
		stmt string // the start of a statement the round trips must include
	}{
		{"send one, plain, in Store.Tx", 3, func() error { send("q", 1); return nil }, "INSERT INTO mqlite_messages"},
		{"send 100, plain, in Store.Tx", 3, func() error { send("q", 100); return nil }, "WITH q AS (SELECT default_ttl_ms"},
		// The plain statement found the FIFO queue not plain once: the
		// full statement goes first from then on.
		{"send one into a FIFO queue, in Store.Tx", 3, func() error { send("fifo", 1); return nil }, "WITH q AS ( SELECT ordering"},
		{"Receive", 1, func() error { receive(1); return nil }, "WITH q AS (SELECT max_delivery_count"},
		{"Complete", 1, nil, "UPDATE mqlite_messages SET state = 'completed'"}, // settleOne
		{"Complete replayed", 2, nil, ""},                                                   // set below: the fence misses, the receipt answers
		{"CompleteBatch", 1, nil, "WITH l AS ("},                                            // set below: of locks received before
		{"Abandon", 1, nil, "WITH u AS (UPDATE"},                                            // settleOne
		{"Reject", 1, nil, "WITH u AS (UPDATE mqlite_messages SET state = 'dead_lettered'"}, // settleOne
		{"Defer", 1, nil, "WITH u AS (UPDATE mqlite_messages SET state = 'deferred'"},       // settleOne
		{"Release", 1, nil, "WITH u AS (UPDATE mqlite_messages SET state = 'active'"},       // settleOne
		{"Renew", 1, nil, "UPDATE mqlite_messages SET locked_until"},                        // settleOne
		// LoopTx's commit: the step's statements and the claim of the
		// next message, in one transaction with no savepoint.
		{"TxAndReceive of one statement", 4, func() error {
			msgs, err := st.TxAndReceive(ctx, "q", mqlite.ReceiveOptions{Max: 1}, func(tx *mqlite.Tx) error {
				_, err := tx.SQL().ExecContext(tx.Context(), "SELECT 1")
				return err
			})
			if err == nil && len(msgs) != 1 {
				err = fmt.Errorf("claimed %d messages, want 1", len(msgs))
			}
			return err
		}, "WITH q AS (SELECT max_delivery_count"},
		{"control: a Store.Tx of one statement", 3, func() error {
			return st.Tx(ctx, func(tx *mqlite.Tx) error {
				_, err := tx.SQL().ExecContext(tx.Context(), "SELECT 1")
				return err
			})
		}, "SELECT 1"},
	}
	var completed mqlite.Lock
	ops[5].run = func() error { return st.Complete(ctx, completed) }
	var batch []mqlite.Lock
	ops[6].run = func() error {
		res, err := st.CompleteBatch(ctx, batch)
		return errors.Join(err, errors.Join(res...))
	}
	send("q", 400)
	for pass := range 2 { // the first prepares every statement on the connection
		for i, op := range ops {
			if op.name == "CompleteBatch" {
				batch = locks(receive(3))
			}
			if op.name == "Complete replayed" {
				completed = receive(1)[0].Lock()
				if err := st.Complete(ctx, completed); err != nil {
					t.Fatal(err)
				}
			}
			var mark int
			var err error
			if op.name == "Complete" || op.name == "Abandon" || op.name == "Reject" || op.name == "Defer" ||
				op.name == "Release" || op.name == "Renew" {
				// Count the settlement alone: receive first.
				msg := receive(1)[0]
				mark = w.mark()
				err = settleOne(ctx, st, op.name, msg.Lock())
			} else {
				mark = w.mark()
				err = op.run()
			}
			got, seen := w.since(mark)
			if err != nil {
				t.Fatalf("%s: %v", op.name, err)
			}
			if pass == 0 {
				continue
			}
			t.Logf("%-40s %d round trips: %s", op.name, got, short(seen))
			if got != op.want {
				t.Errorf("%s: %d round trips, want %d: %s", ops[i].name, got, op.want, short(seen))
			}
			if op.stmt != "" && !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, op.stmt) }) {
				t.Errorf("%s: no statement %q… among %s", op.name, op.stmt, short(seen))
			}
		}
	}
	// The drain of the benchmark: a batch is two round trips.
	mark := w.mark()
	res, err := st.CompleteBatch(ctx, locks(receive(100)))
	if err := errors.Join(err, errors.Join(res...)); err != nil {
		t.Fatal(err)
	}
	if got, seen := w.since(mark); got != 2 {
		t.Errorf("Receive of 100 and their CompleteBatch: %d round trips, want 2: %s", got, short(seen))
	}
}

// settleOne settles l as the operation named op of TestRoundTrips.
func settleOne(ctx context.Context, st *mqlite.Store, op string, l mqlite.Lock) error {
	switch op {
	case "Complete":
		return st.Complete(ctx, l)
	case "Abandon":
		return st.Abandon(ctx, l, 0)
	case "Reject":
		return st.Reject(ctx, l, "r", "d")
	case "Defer":
		return st.Defer(ctx, l)
	case "Release":
		return st.Release(ctx, l)
	}
	_, err := st.Renew(ctx, l)
	return err
}

// twoStores opens two stores on one new database (pgtest.URL), as two
// processes would, on clock and without background loops (quiet); they
// close when t ends.
func twoStores(t *testing.T, clock mqlite.Clock) (*mqlite.Store, *mqlite.Store) {
	t.Helper()
	url := pgtest.URL(t)
	var out [2]*mqlite.Store
	for i := range out {
		st, err := mqlite.Open(context.Background(), url, quiet(clock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		out[i] = st
	}
	return out[0], out[1]
}

// TestSettingsAcrossStores checks that a queue's settings changed by one
// store count at once for the claims of another store on the same
// database, which reads them in the claim statement itself: the lock
// duration of the next Receive, a pause and a resume.
func TestSettingsAcrossStores(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	admin, consumer := twoStores(t, clock)
	if err := admin.CreateQueue(ctx, "q", mqlite.QueueOptions{LockDuration: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "q", []outbox.Message{{Body: []byte("a")}, {Body: []byte("b")}, {Body: []byte("c")}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	lease := func(want time.Duration) {
		t.Helper()
		msgs, err := consumer.Receive(ctx, "q", mqlite.ReceiveOptions{})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("Receive: %d messages, %v", len(msgs), err)
		}
		if got := msgs[0].LockedUntil.Sub(clock.Now()); got != want {
			t.Errorf("lease of %v, want %v (the queue's LockDuration as the other store set it)", got, want)
		}
	}
	lease(30 * time.Second)
	if err := admin.UpdateQueue(ctx, "q", mqlite.QueueOptions{LockDuration: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	lease(2 * time.Minute)
	if err := admin.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if msgs, err := consumer.Receive(ctx, "q", mqlite.ReceiveOptions{}); err != nil || len(msgs) != 0 {
		t.Fatalf("Receive on a queue the other store paused: %d messages, %v; want none", len(msgs), err)
	}
	if err := admin.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	lease(2 * time.Minute)
	if err := admin.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.Receive(ctx, "q", mqlite.ReceiveOptions{}); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("Receive on a queue the other store deleted: %v, want ErrQueueNotFound", err)
	}
}

// TestPlainSendFollowsTheQueue checks the plain send (one INSERT for
// messages with no MessageID and no GroupID) against queue settings
// another store changes: once the queue deduplicates bodies, a body sent
// twice is a duplicate; once it no longer does, the same body is a new
// message again; a batch's seqs follow its slots, with the queue's
// default TTL and each message's DeliverAt.
func TestPlainSendFollowsTheQueue(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	sender, admin := twoStores(t, clock)
	opts := mqlite.QueueOptions{DefaultTTL: time.Hour}
	if err := admin.CreateQueue(ctx, "q", opts); err != nil {
		t.Fatal(err)
	}
	send := func(msgs ...outbox.Message) []outbox.Result {
		t.Helper()
		var res []outbox.Result
		if err := sender.Tx(ctx, func(tx *mqlite.Tx) error {
			var err error
			res, err = outbox.SendBatch(tx.Context(), tx.SQL(), "q", msgs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return res
	}
	body := outbox.Message{Body: []byte("same")}
	first := send(body, body)
	if first[0].Duplicate || first[1].Duplicate || first[1].Seq <= first[0].Seq {
		t.Fatalf("a queue without dedup by body: %+v, want two new messages in slot order", first)
	}
	opts.DedupByBody = true
	if err := admin.UpdateQueue(ctx, "q", opts); err != nil {
		t.Fatal(err)
	}
	again := send(body)
	if again[0].Duplicate {
		t.Fatalf("the first send after DedupByBody: %+v, want a new message", again)
	}
	if dup := send(body); !dup[0].Duplicate || dup[0].Seq != again[0].Seq {
		t.Fatalf("the same body again inside the window: %+v, want a duplicate of seq %d", dup, again[0].Seq)
	}
	opts.DedupByBody = false
	if err := admin.UpdateQueue(ctx, "q", opts); err != nil {
		t.Fatal(err)
	}
	later := clock.Now().Add(time.Minute)
	batch := send(body, outbox.Message{Body: []byte("later"), DeliverAt: later}, body)
	for i, r := range batch {
		if r.Duplicate || (i > 0 && r.Seq <= batch[i-1].Seq) {
			t.Fatalf("DedupByBody off again: %+v, want new messages in slot order", batch)
		}
	}
	msgs, err := sender.Peek(ctx, "q", mqlite.PeekParams{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if want := clock.Now().Add(time.Hour); !m.ExpiresAt.Equal(want) {
			t.Errorf("seq %d expires at %v, want the queue's default TTL: %v", m.Seq, m.ExpiresAt, want)
		}
		if m.Seq == batch[1].Seq && (m.State != mqlite.StateScheduled || !m.VisibleAt.Equal(later)) {
			t.Errorf("seq %d: %s visible at %v, want scheduled at %v", m.Seq, m.State, m.VisibleAt, later)
		}
	}
	if len(msgs) != 6 {
		t.Errorf("%d messages in the queue, want 6", len(msgs))
	}
}

// TestTxAndReceiveShared checks TxAndReceive's promises where its claim
// is a statement of fn's transaction with no savepoint (PostgreSQL): a
// queue that does not exist, or one another store deleted, is
// ErrQueueNotFound with fn's row rolled back; a fn that fails claims
// nothing; otherwise fn's row and the claim commit together.
func TestTxAndReceiveShared(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New()
	st, other := twoStores(t, clock)
	if _, err := st.DB().ExecContext(ctx, "CREATE TABLE mqlite_test_effects (n int)"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q", "gone"} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendBatch(tx.Context(), tx.SQL(), "q", []outbox.Message{{Body: []byte("1")}, {Body: []byte("2")}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.DeleteQueue(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	insert := func(tx *mqlite.Tx) error {
		_, err := tx.SQL().ExecContext(tx.Context(), "INSERT INTO mqlite_test_effects VALUES (1)")
		return err
	}
	effects := func() int {
		t.Helper()
		var n int
		if err := st.DB().QueryRowContext(ctx, "SELECT count(*) FROM mqlite_test_effects").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		queue string
		fn    func(*mqlite.Tx) error
		want  error
	}{
		{"unknown queue", "nope", insert, mqlite.ErrQueueNotFound},
		{"a queue another store deleted", "gone", insert, mqlite.ErrQueueNotFound},
		{"fn fails", "q", func(tx *mqlite.Tx) error { _ = insert(tx); return boom }, boom},
	} {
		msgs, err := st.TxAndReceive(ctx, tc.queue, mqlite.ReceiveOptions{}, tc.fn)
		if !errors.Is(err, tc.want) || len(msgs) != 0 {
			t.Errorf("%s: %d messages, %v; want none, %v", tc.name, len(msgs), err, tc.want)
		}
		if n := effects(); n != 0 {
			t.Fatalf("%s: %d effects committed, want 0", tc.name, n)
		}
	}
	msgs, err := st.TxAndReceive(ctx, "q", mqlite.ReceiveOptions{Max: 1}, insert)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "1" || msgs[0].DeliveryCount != 1 {
		t.Fatalf("claimed %+v, %v; want message 1 on its first delivery", msgs, err)
	}
	if n := effects(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	// The claim committed: the other store gets the next message only.
	next, err := other.Receive(ctx, "q", mqlite.ReceiveOptions{Max: 10})
	if err != nil || len(next) != 1 || string(next[0].Body) != "2" {
		t.Fatalf("the other store's Receive: %+v, %v; want message 2 alone", next, err)
	}
	if err := st.Complete(ctx, msgs[0].Lock()); err != nil {
		t.Fatalf("complete the claimed message: %v", err)
	}
	// An empty queue: fn's row commits, nothing claimed.
	if msgs, err := st.TxAndReceive(ctx, "q", mqlite.ReceiveOptions{}, insert); err != nil || len(msgs) != 0 {
		t.Fatalf("on an empty queue: %d messages, %v; want none, nil", len(msgs), err)
	}
	if n := effects(); n != 2 {
		t.Fatalf("%d effects, want 2", n)
	}
}
