package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
	"github.com/mqlite/mqlite/internal/postgres"
)

func init() {
	// Package mqlite sets the builder of bad-input errors at its init;
	// these tests run without it.
	if errs.NewInvalid == nil {
		errs.NewInvalid = func(kind error, detail string) error { return fmt.Errorf("%w: %s", kind, detail) }
	}
}

// msgQueue is a queue of the message-path tests: standard, 5 deliveries,
// 30-second leases, no dedup.
func msgQueue(name string) driver.Queue {
	return driver.Queue{Name: name, MaxDeliveryCount: 5, LockDurationMS: 30_000}
}

// addQueue writes q's row as it is (the queue statements are another
// file's; these tests need only the row).
func addQueue(t testing.TB, db *sql.DB, q driver.Queue) {
	t.Helper()
	ordering := "standard"
	if q.FIFO {
		ordering = "fifo"
	}
	if _, err := db.Exec(`INSERT INTO mqlite_queues (name, ordering, max_delivery_count, lock_duration_ms,
		dedup_window_ms, default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes,
		created_at, updated_at, dedup_by_body) VALUES ($1, $2, $3, $4, $5, $6, false, 0, 0, 0, 0, 0, $7)`,
		q.Name, ordering, q.MaxDeliveryCount, q.LockDurationMS, q.DedupWindowMS, q.DefaultTTLMS, q.DedupByBody); err != nil {
		t.Fatal(err)
	}
}

// openAnother opens one more handle, as another process would, on the
// database of db, with clock as its store's clock and settling (may be
// nil) as its ConnConfig.Settling.
func openAnother(t testing.TB, db *sql.DB, clock *testClock, settling func(driver.Op, string, int64, string)) *sql.DB {
	t.Helper()
	return openTwin(t, db, clock, func(c *driver.ConnConfig) {
		c.MaxConns = 3
		if settling != nil {
			c.Settling = func(_ driver.TxKey, op driver.Op, queue string, seq int64, token string) {
				settling(op, queue, seq, token)
			}
		}
	})
}

// inTx runs f in a transaction on db and commits it.
func inTx(t testing.TB, db *sql.DB, f func(tx *sql.Tx) error) error {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func send(t testing.TB, db *sql.DB, name string, msgs ...driver.SendMessage) []driver.SendResult {
	t.Helper()
	var out []driver.SendResult
	if err := inTx(t, db, func(tx *sql.Tx) (err error) {
		out, err = pg.Enqueue(context.Background(), tx, name, msgs)
		return err
	}); err != nil {
		t.Fatalf("send to %s: %v", name, err)
	}
	return out
}

func claim(t testing.TB, db *sql.DB, r driver.ClaimRequest) []driver.Row {
	t.Helper()
	var out []driver.Row
	if err := inTx(t, db, func(tx *sql.Tx) (err error) {
		out, err = pg.Claim(context.Background(), tx, r)
		return err
	}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	return out
}

func settleOne(db *sql.DB, s driver.Settlement) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if err := pg.Settle(context.Background(), tx, s); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func seqsOf(rows []driver.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.Seq
	}
	return out
}

func TestMessagesSendClaimFields(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("fields")
	q.DefaultTTLMS = 60_000
	addQueue(t, db, q)
	now := clock.now()
	res := send(t, db, "fields",
		driver.SendMessage{Body: []byte("a"), MessageID: "m-a", Subject: "s", Properties: `{"k":"v"}`, GroupID: "g"},
		driver.SendMessage{Body: []byte("b"), TTLMS: 5_000, Priority: 3},
		driver.SendMessage{Body: nil})
	if len(res) != 3 || res[0].Seq == 0 || res[1].Seq <= res[0].Seq || res[2].Seq <= res[1].Seq {
		t.Fatalf("send results %+v: want three rising seqs", res)
	}
	for _, r := range res {
		if r.Duplicate || r.Err != nil || len(r.Copies) != 1 || r.Copies[0] != (driver.Copy{Queue: "fields", Seq: r.Seq}) {
			t.Fatalf("send result %+v", r)
		}
	}
	got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: now})
	if want := []int64{res[1].Seq, res[0].Seq, res[2].Seq}; !slices.Equal(seqsOf(got), want) {
		t.Fatalf("claimed %v, want %v (priority first, then seq)", seqsOf(got), want)
	}
	b, a, empty := got[0], got[1], got[2]
	tokens := map[string]bool{}
	for _, r := range got {
		if r.State != "locked" || r.DeliveryCount != 1 || r.LockedUntil != now+q.LockDurationMS ||
			!driver.IsToken(r.LockToken) || tokens[r.LockToken] || r.EnqueuedAt != now || r.VisibleAt != now {
			t.Fatalf("claimed row %+v", r)
		}
		tokens[r.LockToken] = true
	}
	if string(a.Body) != "a" || a.MessageID != "m-a" || a.Subject != "s" || a.Properties != `{"k":"v"}` ||
		a.GroupID == nil || *a.GroupID != "g" || a.ExpiresAt != now+60_000 || a.Priority != 0 {
		t.Fatalf("row a %+v", a)
	}
	if string(b.Body) != "b" || b.GroupID != nil || b.ExpiresAt != now+5_000 || b.Priority != 3 {
		t.Fatalf("row b %+v", b)
	}
	if empty.Body == nil || len(empty.Body) != 0 {
		t.Fatalf("empty body %#v, want empty and not nil", empty.Body)
	}
}

func TestMessagesSendErrors(t *testing.T) {
	db, clock := openTest(t)
	addQueue(t, db, msgQueue("q"))
	ctx := context.Background()
	if _, err := pg.Enqueue(ctx, db, "nope", []driver.SendMessage{{Body: []byte("x")}}); !errors.Is(err, errs.ErrQueueNotFound) {
		t.Fatalf("send to no queue: %v", err)
	}
	big := driver.SendMessage{Body: make([]byte, 1<<20+1)}
	if _, err := pg.Enqueue(ctx, db, "nope", []driver.SendMessage{big}); !errors.Is(err, errs.ErrQueueNotFound) {
		t.Fatalf("large send to no queue: %v, want the queue said first", err)
	}
	if _, err := pg.Enqueue(ctx, db, "q", []driver.SendMessage{{Body: []byte("x")}, big}); !errors.Is(err, errs.ErrMessageTooLarge) ||
		!strings.Contains(err.Error(), "message 1") {
		t.Fatalf("large send: %v", err)
	}
	far := clock.now() + driver.MaxDelay.Milliseconds() + 1
	if _, err := pg.Enqueue(ctx, db, "q", []driver.SendMessage{{Body: []byte("x"), DeliverAt: far}}); !errors.Is(err, errs.ErrInvalidMessage) {
		t.Fatalf("DeliverAt too far: %v", err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM mqlite_messages`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d messages written by refused sends (%v)", n, err)
	}
}

func TestMessagesDedup(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("d")
	q.DedupWindowMS = 10_000
	addQueue(t, db, q)
	first := send(t, db, "d", driver.SendMessage{Body: []byte("x"), MessageID: "id1"})[0]
	again := send(t, db, "d",
		driver.SendMessage{Body: []byte("x"), MessageID: "id1"},
		driver.SendMessage{Body: []byte("y"), MessageID: "id1"},
		driver.SendMessage{Body: []byte("z"), MessageID: "id2"},
		driver.SendMessage{Body: []byte("z"), MessageID: "id2"},
		driver.SendMessage{Body: []byte("w"), MessageID: "id2"},
		driver.SendMessage{Body: []byte("x")})
	if !again[0].Duplicate || again[0].Seq != first.Seq || again[0].Err != nil {
		t.Fatalf("same id, same body: %+v, want a duplicate of %d", again[0], first.Seq)
	}
	if !errors.Is(again[1].Err, errs.ErrDuplicateConflict) || again[1].Seq != 0 || !errors.Is(again[1].Copies[0].Err, errs.ErrDuplicateConflict) {
		t.Fatalf("same id, another body: %+v", again[1])
	}
	if again[2].Duplicate || again[2].Seq == 0 || !again[3].Duplicate || again[3].Seq != again[2].Seq ||
		!errors.Is(again[4].Err, errs.ErrDuplicateConflict) {
		t.Fatalf("a key twice in one batch: %+v %+v %+v", again[2], again[3], again[4])
	}
	if again[5].Duplicate || again[5].Seq == 0 {
		t.Fatalf("no id, no body dedup: %+v", again[5])
	}
	clock.ms.Add(10_000)
	late := send(t, db, "d", driver.SendMessage{Body: []byte("y"), MessageID: "id1"})[0]
	if late.Duplicate || late.Err != nil || late.Seq <= first.Seq {
		t.Fatalf("after the window: %+v, want a new message", late)
	}

	b := msgQueue("byBody")
	b.DedupWindowMS, b.DedupByBody = 10_000, true
	addQueue(t, db, b)
	r := send(t, db, "byBody", driver.SendMessage{Body: []byte("same")}, driver.SendMessage{Body: []byte("same")},
		driver.SendMessage{Body: []byte("same"), MessageID: "own"}, driver.SendMessage{Body: []byte("other")})
	if r[0].Duplicate || !r[1].Duplicate || r[1].Seq != r[0].Seq || r[2].Duplicate || r[3].Duplicate {
		t.Fatalf("dedup by body: %+v", r)
	}

	off := msgQueue("off")
	addQueue(t, db, off)
	r = send(t, db, "off", driver.SendMessage{Body: []byte("x"), MessageID: "id"}, driver.SendMessage{Body: []byte("y"), MessageID: "id"})
	if r[0].Duplicate || r[1].Duplicate || r[1].Err != nil {
		t.Fatalf("no window, no dedup: %+v", r)
	}
}

func TestMessagesPublish(t *testing.T) {
	db, clock := openTest(t)
	addQueue(t, db, msgQueue("all"))
	addQueue(t, db, msgQueue("red"))
	if _, err := db.Exec(`INSERT INTO mqlite_topics (name, created_at) VALUES ('t', 0), ('empty', 0);
		INSERT INTO mqlite_subscriptions (topic, queue, filter, created_at) VALUES
		('t', 'all', '{}', 0), ('t', 'red', '{"properties":{"color":{"in":["red"]}}}', 0)`); err != nil {
		t.Fatal(err)
	}
	res := send(t, db, "t",
		driver.SendMessage{Body: []byte("1"), Props: map[string]string{"color": "red"}, Properties: `{"color":"red"}`},
		driver.SendMessage{Body: []byte("2")})
	if len(res[0].Copies) != 2 || res[0].Copies[0].Queue != "all" || res[0].Copies[1].Queue != "red" ||
		res[0].Seq != res[0].Copies[0].Seq || len(res[1].Copies) != 1 || res[1].Copies[0].Queue != "all" {
		t.Fatalf("publish: %+v", res)
	}
	if got := claim(t, db, driver.ClaimRequest{Queue: msgQueue("red"), Max: 10, Now: clock.now()}); len(got) != 1 || string(got[0].Body) != "1" {
		t.Fatalf("red got %+v", got)
	}
	if res := send(t, db, "empty", driver.SendMessage{Body: []byte("x")}); res[0].Seq != 0 || len(res[0].Copies) != 0 {
		t.Fatalf("a topic with no subscription: %+v", res)
	}
}

func TestMessagesGroupsAndFIFO(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("g")
	addQueue(t, db, q)
	now := clock.now()
	res := send(t, db, "g",
		driver.SendMessage{Body: []byte("a1"), GroupID: "a"},
		driver.SendMessage{Body: []byte("a2"), GroupID: "a", Priority: 9},
		driver.SendMessage{Body: []byte("b1"), GroupID: "b"},
		driver.SendMessage{Body: []byte("n")})
	got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: now})
	if want := []int64{res[0].Seq, res[2].Seq, res[3].Seq}; !slices.Equal(seqsOf(got), want) {
		t.Fatalf("claimed %v, want each group's front and the ungrouped %v", seqsOf(got), want)
	}
	if more := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: now}); len(more) != 0 {
		t.Fatalf("claimed %v while every group is in flight", seqsOf(more))
	}
	// Abandoned with a delay, a1 stays in flight: a2 waits behind it.
	if err := settleOne(db, driver.Settlement{Op: driver.OpAbandon, Queue: "g", Seq: got[0].Seq, Token: got[0].LockToken, DelayMS: 1000, Now: now}); err != nil {
		t.Fatal(err)
	}
	if more := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: now}); len(more) != 0 {
		t.Fatalf("claimed %v behind a delayed front", seqsOf(more))
	}
	again := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: now + 1000})
	if len(again) != 1 || again[0].Seq != res[0].Seq || again[0].DeliveryCount != 2 {
		t.Fatalf("after the delay: %+v", again)
	}
	if err := settleOne(db, driver.Settlement{Op: driver.OpComplete, Queue: "g", Seq: again[0].Seq, Token: again[0].LockToken, Now: now + 1000}); err != nil {
		t.Fatal(err)
	}
	if next := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: now + 1000}); len(next) != 1 || next[0].Seq != res[1].Seq {
		t.Fatalf("after a1: %v, want a2", seqsOf(next))
	}

	f := msgQueue("fifo")
	f.FIFO = true
	addQueue(t, db, f)
	fr := send(t, db, "fifo", driver.SendMessage{Body: []byte("1")}, driver.SendMessage{Body: []byte("2")})
	one := claim(t, db, driver.ClaimRequest{Queue: f, Max: 10, Now: now})
	if len(one) != 1 || one[0].Seq != fr[0].Seq || one[0].GroupID == nil || *one[0].GroupID != "" {
		t.Fatalf("FIFO claim %+v, want the first alone, in the empty group", one)
	}
}

func TestMessagesScheduledAndDeferred(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	q := msgQueue("s")
	q.MaxDeliveryCount = 2
	addQueue(t, db, q)
	now := clock.now()
	res := send(t, db, "s", driver.SendMessage{Body: []byte("later"), DeliverAt: now + 5000})
	if got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 1, Now: now}); len(got) != 0 {
		t.Fatalf("claimed a scheduled message early: %+v", got)
	}
	if at, err := pg.NextDue(ctx, db, "s"); err != nil || at != now+5000 {
		t.Fatalf("NextDue = %d, %v; want %d", at, err, now+5000)
	}
	got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 1, Now: now + 5000})
	if len(got) != 1 || got[0].Seq != res[0].Seq || got[0].VisibleAt != now+5000 {
		t.Fatalf("due claim %+v", got)
	}
	if at, err := pg.NextDue(ctx, db, "s"); err != nil || at != now+5000+q.LockDurationMS {
		t.Fatalf("NextDue with a lease = %d, %v", at, err)
	}
	if err := settleOne(db, driver.Settlement{Op: driver.OpDefer, Queue: "s", Seq: got[0].Seq, Token: got[0].LockToken, Now: now + 5000}); err != nil {
		t.Fatal(err)
	}
	var d driver.Row
	if err := inTx(t, db, func(tx *sql.Tx) (err error) {
		d, err = pg.ClaimDeferred(ctx, tx, q, got[0].Seq, now+6000)
		return err
	}); err != nil || d.State != "locked" || d.DeliveryCount != 2 || !driver.IsToken(d.LockToken) {
		t.Fatalf("ClaimDeferred = %+v, %v", d, err)
	}
	if err := settleOne(db, driver.Settlement{Op: driver.OpDefer, Queue: "s", Seq: d.Seq, Token: d.LockToken, Now: now + 6000}); err != nil {
		t.Fatal(err)
	}
	err := inTx(t, db, func(tx *sql.Tx) error {
		_, err := pg.ClaimDeferred(ctx, tx, q, d.Seq, now+7000)
		if errors.Is(err, driver.ErrSpentDeferred) {
			return nil // commit the dead letter
		}
		return fmt.Errorf("ClaimDeferred on the last delivery: %v, want ErrSpentDeferred", err)
	})
	if err != nil {
		t.Fatal(err)
	}
	var state, desc string
	if err := db.QueryRow(`SELECT state, dead_letter_desc FROM mqlite_messages WHERE id = $1`, d.Seq).Scan(&state, &desc); err != nil || state != "dead_lettered" {
		t.Fatalf("state %q %q (%v)", state, desc, err)
	}
	if _, err := pg.ClaimDeferred(ctx, db, q, 999_999, now); !errors.Is(err, errs.ErrMessageNotFound) {
		t.Fatalf("ClaimDeferred of no message: %v", err)
	}
}

func TestMessagesMaxDelivery(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("m")
	q.MaxDeliveryCount, q.LockDurationMS = 2, 1000
	addQueue(t, db, q)
	now := clock.now()
	seq := send(t, db, "m", driver.SendMessage{Body: []byte("x")})[0].Seq
	for i := range 2 {
		got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 1, Now: now + int64(i)*1000})
		if len(got) != 1 || got[0].DeliveryCount != int64(i+1) {
			t.Fatalf("delivery %d: %+v", i+1, got)
		}
	}
	if got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 1, Now: now + 2000}); len(got) != 0 {
		t.Fatalf("a third delivery: %+v", got)
	}
	var state, reason string
	var dc int64
	if err := db.QueryRow(`SELECT state, dead_letter_reason, delivery_count FROM mqlite_messages WHERE id = $1`, seq).Scan(&state, &reason, &dc); err != nil ||
		state != "dead_lettered" || reason != driver.ReasonMaxDelivery || dc != 2 {
		t.Fatalf("after the last lease lapsed: %s %q dc=%d (%v)", state, reason, dc, err)
	}
}

func TestMessagesMaxBytesAndDelete(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("b")
	addQueue(t, db, q)
	now := clock.now()
	send(t, db, "b", driver.SendMessage{Body: make([]byte, 100)}, driver.SendMessage{Body: make([]byte, 100)},
		driver.SendMessage{Body: make([]byte, 10)})
	got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 3, MaxBytes: 150, Now: now})
	if len(got) != 1 || len(got[0].Body) != 100 {
		t.Fatalf("budget 150: %d messages", len(got))
	}
	got = claim(t, db, driver.ClaimRequest{Queue: q, Max: 3, MaxBytes: 150, Delete: true, Now: now})
	if len(got) != 2 || got[0].State != "" || got[0].LockToken != "" || got[0].DeliveryCount != 1 {
		t.Fatalf("receive-and-delete: %+v", got)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM mqlite_messages WHERE queue = 'b'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows left (%v), want the locked one", n, err)
	}
}

func TestMessagesSettleFencingAndReplay(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	var settled []string
	var mu sync.Mutex
	other := openAnother(t, db, clock, func(op driver.Op, queue string, seq int64, token string) {
		mu.Lock()
		settled = append(settled, fmt.Sprintf("%s %s/%d", op, queue, seq))
		mu.Unlock()
	})
	q := msgQueue("f")
	addQueue(t, db, q)
	now := clock.now()
	send(t, db, "f", driver.SendMessage{Body: []byte("1")}, driver.SendMessage{Body: []byte("2")},
		driver.SendMessage{Body: []byte("3")}, driver.SendMessage{Body: []byte("4")})
	got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 4, Now: now})
	m1, m2, m3, m4 := got[0], got[1], got[2], got[3]

	done := driver.Settlement{Op: driver.OpComplete, Queue: "f", Seq: m1.Seq, Token: m1.LockToken, Now: now}
	if err := settleOne(db, done); err != nil {
		t.Fatal(err)
	}
	if err := settleOne(db, done); err != nil {
		t.Fatalf("the same completion again: %v, want a replay", err)
	}
	ab := driver.Settlement{Op: driver.OpAbandon, Queue: "f", Seq: m1.Seq, Token: m1.LockToken, Now: now}
	if err := settleOne(db, ab); !errors.Is(err, errs.ErrLockLost) {
		t.Fatalf("another operation on a settled delivery: %v, want ErrLockLost", err)
	}
	rej := driver.Settlement{Op: driver.OpReject, Queue: "f", Seq: m2.Seq, Token: m2.LockToken, Reason: "r", Description: "d", Now: now}
	if err := settleOne(db, rej); err != nil {
		t.Fatal(err)
	}
	if err := settleOne(db, rej); err != nil {
		t.Fatalf("the same rejection again: %v", err)
	}
	rej.Reason = "other"
	if err := settleOne(db, rej); !errors.Is(err, errs.ErrLockLost) {
		t.Fatalf("a rejection with other arguments: %v, want ErrLockLost", err)
	}
	stale := driver.Settlement{Op: driver.OpComplete, Queue: "f", Seq: m3.Seq, Token: strings.Repeat("0", 32), Now: now}
	if err := settleOne(db, stale); !errors.Is(err, errs.ErrLockLost) {
		t.Fatalf("a stale token: %v", err)
	}
	until, err := pg.Renew(ctx, db, driver.RenewRequest{Queue: "f", Seq: m3.Seq, Token: m3.LockToken, Now: now + 10_000})
	if err != nil || until != now+10_000+q.LockDurationMS {
		t.Fatalf("Renew = %d, %v", until, err)
	}
	if _, err := pg.Renew(ctx, db, driver.RenewRequest{Queue: "f", Seq: m3.Seq, Token: m3.LockToken, Now: until}); !errors.Is(err, errs.ErrLockLost) {
		t.Fatalf("Renew of a lapsed lease: %v", err)
	}
	late := driver.Settlement{Op: driver.OpComplete, Queue: "f", Seq: m3.Seq, Token: m3.LockToken, Now: until}
	if err := settleOne(db, late); !errors.Is(err, errs.ErrLockLost) {
		t.Fatalf("a completion after the lease: %v", err)
	}

	// SettleTx never replays, and tells the store before it writes.
	txSettle := func(s driver.Settlement) error {
		return inTx(t, other, func(tx *sql.Tx) error { return pg.SettleTx(ctx, tx, s) })
	}
	rel := driver.Settlement{Op: driver.OpRelease, Queue: "f", Seq: m4.Seq, Token: m4.LockToken}
	if err := txSettle(rel); err != nil {
		t.Fatal(err)
	}
	if err := txSettle(rel); !errors.Is(err, errs.ErrAlreadySettled) {
		t.Fatalf("SettleTx again: %v, want ErrAlreadySettled", err)
	}
	if err := txSettle(driver.Settlement{Op: driver.OpComplete, Queue: "f", Seq: m1.Seq, Token: m1.LockToken}); !errors.Is(err, errs.ErrAlreadySettled) {
		t.Fatalf("SettleTx of a completed delivery: %v, want ErrAlreadySettled", err)
	}
	if err := txSettle(driver.Settlement{Op: driver.OpComplete, Queue: "f", Seq: m3.Seq, Token: strings.Repeat("1", 32)}); !errors.Is(err, errs.ErrLockLost) || errors.Is(err, errs.ErrAlreadySettled) {
		t.Fatalf("SettleTx with a stale token: %v, want ErrLockLost", err)
	}
	mu.Lock()
	if len(settled) != 4 || settled[0] != fmt.Sprintf("release f/%d", m4.Seq) {
		t.Fatalf("Settling saw %q", settled)
	}
	mu.Unlock()
	var dc int64
	var state string
	if err := db.QueryRow(`SELECT state, delivery_count FROM mqlite_messages WHERE id = $1`, m4.Seq).Scan(&state, &dc); err != nil || state != "active" || dc != 0 {
		t.Fatalf("released: %s dc=%d (%v)", state, dc, err)
	}
}

func TestMessagesCompleteMany(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	q := msgQueue("c")
	addQueue(t, db, q)
	now := clock.now()
	send(t, db, "c", driver.SendMessage{Body: []byte("1")}, driver.SendMessage{Body: []byte("2")}, driver.SendMessage{Body: []byte("3")})
	got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 3, Now: now})
	first := driver.Settlement{Op: driver.OpComplete, Queue: "c", Seq: got[0].Seq, Token: got[0].LockToken, Now: now}
	if err := settleOne(db, first); err != nil {
		t.Fatal(err)
	}
	locks := []driver.Settlement{first,
		{Queue: "c", Seq: got[1].Seq, Token: got[1].LockToken},
		{Queue: "c", Seq: got[2].Seq, Token: strings.Repeat("a", 32)}}
	var res []error
	if err := inTx(t, db, func(tx *sql.Tx) (err error) {
		res, err = pg.CompleteMany(ctx, tx, locks, now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || res[1] != nil || !errors.Is(res[2], errs.ErrLockLost) {
		t.Fatalf("CompleteMany = %v, want a replay, a completion and a lost lock", res)
	}
}

func TestMessagesAttemptReplay(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("a")
	addQueue(t, db, q)
	now := clock.now()
	send(t, db, "a", driver.SendMessage{Body: []byte("1")}, driver.SendMessage{Body: []byte("2")}, driver.SendMessage{Body: []byte("3")})
	r := driver.ClaimRequest{Queue: q, Max: 2, AttemptID: "att", Now: now}
	first := claim(t, db, r)
	again := claim(t, db, r)
	if len(first) != 2 || !slices.EqualFunc(first, again, func(a, b driver.Row) bool {
		return a.Seq == b.Seq && a.LockToken == b.LockToken && string(a.Body) == string(b.Body)
	}) {
		t.Fatalf("replay %+v, want %+v", again, first)
	}
	if err := settleOne(db, driver.Settlement{Op: driver.OpComplete, Queue: "a", Seq: first[0].Seq, Token: first[0].LockToken, Now: now}); err != nil {
		t.Fatal(err)
	}
	if left := claim(t, db, r); len(left) != 1 || left[0].Seq != first[1].Seq {
		t.Fatalf("replay after a completion: %v", seqsOf(left))
	}
	err := inTx(t, db, func(tx *sql.Tx) error {
		_, err := pg.Claim(context.Background(), tx, driver.ClaimRequest{Queue: q, Max: 3, AttemptID: "att", Now: now})
		return err
	})
	if !errors.Is(err, errs.ErrAttemptConflict) {
		t.Fatalf("the id with other options: %v", err)
	}
}

// TestMessagesConcurrentClaims: four handles, as four processes, with four
// goroutines each, claim and complete 2,000 messages (half of them in 20
// groups): each is completed exactly once, on its first delivery, each
// group in send order, and no two members of a group are ever in flight
// at once (checked as the claims commit). The control runs the same with
// a claim that ignores groups, and must be caught.
func TestMessagesConcurrentClaims(t *testing.T) {
	failures := claimConcurrently(t, 2000, 20, false)
	if len(failures) > 0 {
		t.Fatalf("%d failures, first: %s", len(failures), strings.Join(failures[:min(len(failures), 5)], "; "))
	}
	t.Log("4 handles x 4 goroutines completed 2000 messages (20 groups) exactly once each, one member of a group in flight at a time, each group in order")

	restore := postgres.ClaimWithoutGroupRule()
	defer restore()
	failures = claimConcurrently(t, 400, 2, false)
	var caught []string
	for _, f := range failures {
		if strings.Contains(f, "in flight") {
			caught = append(caught, f)
		}
	}
	if len(caught) == 0 {
		t.Fatalf("control: a claim without the group rule put no two members of a group in flight at once that the check saw (%d other failures)", len(failures))
	}
	t.Logf("control: a claim without the group rule is caught: %d members claimed beside another of their group (first: %s), %d failures in all",
		len(caught), caught[0], len(failures))
}

// TestMessagesConcurrentSendsAndClaims: four senders, one per handle,
// send 1,000 messages into the same 10 groups, a message per transaction,
// while 16 goroutines claim and complete them: each group still completes
// in id order with one member in flight at a time. (The race a send's
// group lock closes is too narrow to meet here at will:
// TestMessagesGroupSendsCommitInOrder stages it.)
func TestMessagesConcurrentSendsAndClaims(t *testing.T) {
	if failures := claimConcurrently(t, 1000, 10, true); len(failures) > 0 {
		t.Fatalf("%d failures, first: %s", len(failures), strings.Join(failures[:min(len(failures), 5)], "; "))
	}
}

// claimConcurrently sends total messages (every other one in one of
// groups groups) to a new database, has 16 goroutines on four handles
// claim and complete them all, and returns what went wrong.
func claimConcurrently(t *testing.T, total, groups int, concurrentSends bool) []string {
	db, clock := openTest(t)
	q := msgQueue("conc")
	addQueue(t, db, q)
	msgAt := func(i int) driver.SendMessage {
		m := driver.SendMessage{Body: fmt.Appendf(nil, "%d", i), Priority: int64(i % 3)}
		if i%2 == 0 {
			m.GroupID = fmt.Sprintf("g%d", i%(2*groups)/2)
		}
		return m
	}
	if !concurrentSends {
		msgs := make([]driver.SendMessage, 0, 200)
		for i := range total {
			msgs = append(msgs, msgAt(i))
			if len(msgs) == cap(msgs) || i == total-1 {
				send(t, db, "conc", msgs...)
				msgs = msgs[:0]
			}
		}
	}
	handles := []*sql.DB{db}
	for range 3 {
		handles = append(handles, openAnother(t, db, clock, nil))
	}
	var (
		mu        sync.Mutex
		inFlight  = map[string]int64{}   // group → the member held
		completed = map[int64]int{}      // seq → completions
		order     = map[string][]int64{} // group → completed seqs in order
		failures  []string
		done      atomic.Int64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	if concurrentSends {
		// One sender per handle, a message per transaction, into the
		// same groups at once, while the claimers run.
		for k, h := range handles {
			wg.Go(func() {
				for i := k; i < total && ctx.Err() == nil; i += len(handles) {
					if err := inTx(t, h, func(tx *sql.Tx) error {
						_, err := pg.Enqueue(ctx, tx, "conc", []driver.SendMessage{msgAt(i)})
						return err
					}); err != nil {
						fail("send %d: %v", i, err)
						return
					}
				}
			})
		}
	}
	for _, h := range handles {
		for w := range 4 {
			wg.Go(func() {
				for done.Load() < int64(total) && ctx.Err() == nil {
					var got []driver.Row
					err := inTx(t, h, func(tx *sql.Tx) (err error) {
						got, err = pg.Claim(ctx, tx, driver.ClaimRequest{Queue: q, Max: 1 + w%3, Now: clock.now()})
						return err
					})
					if err != nil {
						fail("claim: %v", err)
						return
					}
					mu.Lock()
					for _, r := range got {
						if r.DeliveryCount != 1 {
							failures = append(failures, fmt.Sprintf("seq %d delivered %d times", r.Seq, r.DeliveryCount))
						}
						if r.GroupID != nil {
							if held, ok := inFlight[*r.GroupID]; ok {
								failures = append(failures, fmt.Sprintf("group %s: %d claimed while %d in flight", *r.GroupID, r.Seq, held))
							}
							inFlight[*r.GroupID] = r.Seq
						}
					}
					mu.Unlock()
					locks := make([]driver.Settlement, len(got))
					for i, r := range got {
						locks[i] = driver.Settlement{Queue: "conc", Seq: r.Seq, Token: r.LockToken}
					}
					err = inTx(t, h, func(tx *sql.Tx) error {
						res, err := pg.CompleteMany(ctx, tx, locks, clock.now())
						if err != nil {
							return err
						}
						mu.Lock()
						defer mu.Unlock()
						for i, r := range got {
							if res[i] != nil {
								failures = append(failures, fmt.Sprintf("complete %d: %v", r.Seq, res[i]))
								continue
							}
							completed[r.Seq]++
							if r.GroupID != nil {
								// Out of flight before the completion commits:
								// the group's next member is claimable after.
								if inFlight[*r.GroupID] == r.Seq {
									delete(inFlight, *r.GroupID)
								}
								order[*r.GroupID] = append(order[*r.GroupID], r.Seq)
							}
						}
						return nil
					})
					if err != nil {
						fail("complete: %v", err)
						return
					}
					done.Add(int64(len(got)))
				}
			})
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		failures = append(failures, fmt.Sprintf("timed out with %d of %d completed", done.Load(), total))
	}
	if len(completed) != total {
		failures = append(failures, fmt.Sprintf("%d messages completed, want %d", len(completed), total))
	}
	for seq, n := range completed {
		if n != 1 {
			failures = append(failures, fmt.Sprintf("seq %d completed %d times", seq, n))
		}
	}
	for g, seqs := range order {
		if !slices.IsSorted(seqs) || len(seqs) != total/2/groups {
			failures = append(failures, fmt.Sprintf("group %s completed in the order %v", g, seqs))
		}
	}
	return failures
}

// TestMessagesConcurrentDedup: goroutines on four handles send one
// MessageID at once, each in its own transaction: one message is written
// and every send answers its seq; the same id with another body is a
// conflict whatever the timing.
func TestMessagesConcurrentDedup(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("dd")
	q.DedupWindowMS = 60_000
	addQueue(t, db, q)
	handles := []*sql.DB{db}
	for range 3 {
		handles = append(handles, openAnother(t, db, clock, nil))
	}
	const senders = 16
	results := make([]driver.SendResult, senders)
	errsOf := make([]error, senders)
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			body := "same"
			if i == senders-1 {
				body = "other"
			}
			errsOf[i] = inTx(t, handles[i%len(handles)], func(tx *sql.Tx) error {
				res, err := pg.Enqueue(context.Background(), tx, "dd", []driver.SendMessage{{Body: []byte(body), MessageID: "one"}})
				if err == nil {
					results[i] = res[0]
				}
				return err
			})
		})
	}
	wg.Wait()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM mqlite_messages WHERE queue = 'dd'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d messages written (%v), want 1", n, err)
	}
	var seq int64
	if err := db.QueryRow(`SELECT id FROM mqlite_messages WHERE queue = 'dd'`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	fresh, conflicts := 0, 0
	for i, r := range results {
		switch {
		case errsOf[i] != nil:
			t.Fatalf("sender %d: %v", i, errsOf[i])
		case r.Err != nil:
			if !errors.Is(r.Err, errs.ErrDuplicateConflict) {
				t.Fatalf("sender %d: %v", i, r.Err)
			}
			conflicts++
		case r.Seq != seq:
			t.Fatalf("sender %d got seq %d, want %d", i, r.Seq, seq)
		case !r.Duplicate:
			fresh++
		}
	}
	// The odd body is a conflict unless it came first: then it is the
	// original and the others are the conflicts.
	if fresh != 1 || (conflicts != 1 && conflicts != senders-1) {
		t.Fatalf("%d fresh sends and %d conflicts", fresh, conflicts)
	}
}

// TestMessagesLapsedFront: a group whose front's lease lapsed stays in
// flight until the claim that finds it due puts it back: that claim hands
// out the front again, never its next member.
func TestMessagesLapsedFront(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("lf")
	addQueue(t, db, q)
	now := clock.now()
	res := send(t, db, "lf", driver.SendMessage{Body: []byte("a1"), GroupID: "a"},
		driver.SendMessage{Body: []byte("a2"), GroupID: "a"}, driver.SendMessage{Body: []byte("n")})
	if got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 1, Now: now}); len(got) != 1 || got[0].Seq != res[0].Seq {
		t.Fatalf("first claim %v", seqsOf(got))
	}
	later := now + q.LockDurationMS
	got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: later})
	if want := []int64{res[0].Seq, res[2].Seq}; !slices.Equal(seqsOf(got), want) || got[0].DeliveryCount != 2 {
		t.Fatalf("after the lease: %v (dc %d), want %v with the front delivered again", seqsOf(got), got[0].DeliveryCount, want)
	}
}

// TestMessagesGroupSendsCommitInOrder: a send into a group waits for the
// group's earlier send to commit, so the group is claimed in commit order.
// Without the wait (the control), a second sender commits first, the claim
// hands out its message, and the first sender's message, committed after
// with a lower id, arrives behind it: the group is out of order.
func TestMessagesGroupSendsCommitInOrder(t *testing.T) {
	order := func(t *testing.T) (first int64, claimed []int64, waited bool) {
		db, clock := openTest(t)
		q := msgQueue("order")
		addQueue(t, db, q)
		other := openAnother(t, db, clock, nil)
		ctx := context.Background()
		tx1, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx1.Rollback()
		res, err := pg.Enqueue(ctx, tx1, "order", []driver.SendMessage{{Body: []byte("first"), GroupID: "g"}})
		if err != nil {
			t.Fatal(err)
		}
		first = res[0].Seq
		done := make(chan error, 1)
		go func() {
			done <- inTx(t, other, func(tx *sql.Tx) error {
				_, err := pg.Enqueue(ctx, tx, "order", []driver.SendMessage{{Body: []byte("second"), GroupID: "g"}})
				return err
			})
		}()
		// The second send either waits on the group's lock (seen in
		// pg_stat_activity) or commits.
		deadline := time.Now().Add(30 * time.Second)
		for !waited {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				done <- nil
				for _, r := range claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: clock.now()}) {
					claimed = append(claimed, r.Seq)
					if err := settleOne(db, driver.Settlement{Op: driver.OpComplete, Queue: "order", Seq: r.Seq, Token: r.LockToken, Now: clock.now()}); err != nil {
						t.Fatal(err)
					}
				}
			default:
				var n int
				if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				waited = n > 0
				if time.Now().After(deadline) {
					t.Fatal("the second send neither waited nor committed")
				}
				continue
			}
			break
		}
		if err := tx1.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for {
			got := claim(t, db, driver.ClaimRequest{Queue: q, Max: 10, Now: clock.now()})
			if len(got) == 0 {
				return first, claimed, waited
			}
			claimed = append(claimed, got[0].Seq)
			if err := settleOne(db, driver.Settlement{Op: driver.OpComplete, Queue: "order", Seq: got[0].Seq, Token: got[0].LockToken, Now: clock.now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, claimed, waited := order(t)
	if !waited || len(claimed) != 2 || claimed[0] != first || !slices.IsSorted(claimed) {
		t.Fatalf("the second send waited: %v; claimed %v, want the first sender's %d first", waited, claimed, first)
	}
	restore := postgres.SendWithoutGroupLock()
	defer restore()
	first, claimed, waited = order(t)
	if waited || len(claimed) != 2 || claimed[0] == first {
		t.Fatalf("control: the second send waited: %v; claimed %v (the first sender's is %d): the order held without the lock", waited, claimed, first)
	}
	t.Logf("control: without the group lock the group was claimed in the order %v, the first sender's %d last", claimed, first)
}

// TestMessagesConcurrentAttempt: a Receive that repeats an attempt id while
// the first, on another handle, has not committed waits for it and then
// replays what it claimed, instead of claiming other messages.
func TestMessagesConcurrentAttempt(t *testing.T) {
	db, clock := openTest(t)
	q := msgQueue("att")
	addQueue(t, db, q)
	other := openAnother(t, db, clock, nil)
	send(t, db, "att", driver.SendMessage{Body: []byte("1")}, driver.SendMessage{Body: []byte("2")},
		driver.SendMessage{Body: []byte("3")}, driver.SendMessage{Body: []byte("4")})
	ctx := context.Background()
	r := driver.ClaimRequest{Queue: q, Max: 2, AttemptID: "same", Now: clock.now()}
	tx1, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	first, err := pg.Claim(ctx, tx1, r)
	if err != nil || len(first) != 2 {
		t.Fatalf("first claim %v, %v", seqsOf(first), err)
	}
	second := make(chan []driver.Row, 1)
	go func() {
		var got []driver.Row
		if err := inTx(t, other, func(tx *sql.Tx) (err error) {
			got, err = pg.Claim(ctx, tx, r)
			return err
		}); err != nil {
			t.Error(err)
		}
		second <- got
	}()
	// Commit once the second waits on the attempt's lock.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the repeated attempt never waited for the first")
		}
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := <-second; !slices.Equal(seqsOf(got), seqsOf(first)) || got[0].LockToken != first[0].LockToken {
		t.Fatalf("the repeated attempt got %v, want the replay of %v", seqsOf(got), seqsOf(first))
	}
}
