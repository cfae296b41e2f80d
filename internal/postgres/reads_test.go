package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"testing"

	"github.com/mqlite/mqlite/internal/driver"
)

// seedQueue inserts the queue name with its delivery limit and TTL and
// retention settings straight into mqlite_queues, so that these tests do
// not lean on the queues' operations.
func seedQueue(t testing.TB, db *sql.DB, q driver.Queue) {
	t.Helper()
	if q.MaxDeliveryCount == 0 {
		q.MaxDeliveryCount = 3
	}
	_, err := db.Exec(`INSERT INTO mqlite_queues (name, ordering, max_delivery_count, lock_duration_ms,
		dedup_window_ms, default_ttl_ms, dead_letter_on_ttl, dlq_max_age_ms, dlq_max_count, dlq_max_bytes,
		created_at, updated_at, dedup_by_body) VALUES ($1, 'standard', $2, 30000, 0, 0, $3, $4, $5, $6, 0, 0, false)`,
		q.Name, q.MaxDeliveryCount, q.DeadLetterOnExpire, q.DLQMaxAgeMS, q.DLQMaxCount, q.DLQMaxBytes)
	if err != nil {
		t.Fatal(err)
	}
}

// msg is a message row as seed writes it; the zero value of a field is
// the column's default.
type msg struct {
	queue, state         string
	group, mid, subject  string
	props                string
	body                 []byte
	priority             int
	dc                   int64
	visible, lockedUntil int64
	expires, enq         int64
	deadAt, settled      int64
	token                string
}

// seed inserts m straight into mqlite_messages (the sends are built
// elsewhere) and returns its id.
func seed(t testing.TB, db *sql.DB, m msg) int64 {
	t.Helper()
	if m.state == "" {
		m.state = "active"
	}
	if m.token == "" {
		m.token = "--------------------------------"
	}
	var settled, reason any
	if m.state == "completed" {
		settled = m.settled
	}
	if m.state == "dead_lettered" {
		reason = "because"
	}
	var id int64
	err := db.QueryRow(`INSERT INTO mqlite_messages (queue, state, visible_at, locked_until, body_len,
		lock_token, delivery_count, expires_at, enqueued_at, message_id, group_id, subject, properties,
		content_key, body, dead_letter_reason, dead_lettered_at, settled_at, priority)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, ''), nullif($11, ''), nullif($12, ''), nullif($13, ''),
		        '\x00', $14, $15, $16, $17, $18) RETURNING id`,
		m.queue, m.state, m.visible, m.lockedUntil, len(m.body), m.token, m.dc, m.expires, m.enq,
		m.mid, m.group, m.subject, m.props, m.body, reason, m.deadAt, settled, m.priority).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPeekPagesTheLiveMessagesInIDOrder(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	seedQueue(t, db, driver.Queue{Name: "q"})
	seedQueue(t, db, driver.Queue{Name: "other"})
	a := seed(t, db, msg{queue: "q", body: []byte("a"), priority: 0})
	seed(t, db, msg{queue: "other", body: []byte("x")})
	b := seed(t, db, msg{queue: "q", body: []byte("bb"), priority: 9})
	c := seed(t, db, msg{queue: "q", state: "locked", body: []byte("c"), token: "0123456789abcdef0123456789abcdef", lockedUntil: 5, dc: 1})
	dead := seed(t, db, msg{queue: "q", state: "dead_lettered", deadAt: 7})
	seed(t, db, msg{queue: "q", state: "completed", settled: 1, token: "0123456789abcdef0123456789abcdef"})
	d := seed(t, db, msg{queue: "q", state: "scheduled", visible: 99, priority: 4})
	e := seed(t, db, msg{queue: "q", state: "deferred", subject: "s"})

	rows, err := pg.Peek(ctx, db, driver.PeekRequest{Queue: "q", Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(rows), []int64{a, b, c, d, e}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Peek = %v, want %v (no dead letter, no completed, no other queue)", got, want)
	}
	for _, r := range rows {
		if (r.LockToken != "") != (r.Seq == c) {
			t.Errorf("message %d (%s) shows token %q: only a locked message shows its token", r.Seq, r.State, r.LockToken)
		}
	}
	if rows[1].Priority != 9 || string(rows[1].Body) != "bb" || rows[4].Subject != "s" {
		t.Errorf("rows read wrong: %+v", rows)
	}
	// A page from a sequence number, at most Max.
	rows, err = pg.Peek(ctx, db, driver.PeekRequest{Queue: "q", FromSeq: b, Max: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqsOf(rows), []int64{b, c}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Peek from %d max 2 = %v, want %v", b, got, want)
	}
	// A byte budget: the first comes whatever its size, the page stops
	// before the sizes pass it.
	for _, tc := range []struct {
		budget int64
		want   []int64
	}{{1, []int64{a}}, {3, []int64{a, b}}, {0, []int64{a, b, c, d, e}}} {
		rows, err = pg.Peek(ctx, db, driver.PeekRequest{Queue: "q", Max: 100, MaxBytes: tc.budget})
		if err != nil {
			t.Fatal(err)
		}
		if got := seqsOf(rows); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Peek MaxBytes %d = %v, want %v", tc.budget, got, tc.want)
		}
	}
	rows, err = pg.PeekDeadLetters(ctx, db, driver.PeekRequest{Queue: "q", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(rows); !reflect.DeepEqual(got, []int64{dead}) || rows[0].DeadLetterReason != "because" || rows[0].DeadLetteredAt != 7 {
		t.Fatalf("PeekDeadLetters = %+v, want only %d", rows, dead)
	}
}

// TestPeekMergesThePriorities pages through a queue whose active messages
// of every priority interleave: each page is in id order whatever the
// priorities (the window merges the ten ranges).
func TestPeekMergesThePriorities(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	seedQueue(t, db, driver.Queue{Name: "q"})
	var want []int64
	for i := range 40 {
		want = append(want, seed(t, db, msg{queue: "q", priority: (i * 7) % 10}))
	}
	var got []int64
	from := int64(0)
	for {
		rows, err := pg.Peek(ctx, db, driver.PeekRequest{Queue: "q", FromSeq: from, Max: 6})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			break
		}
		got = append(got, seqsOf(rows)...)
		from = rows[len(rows)-1].Seq + 1
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pages = %v, want %v", got, want)
	}
}

func TestFindFiltersWithinTheScanWindow(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	seedQueue(t, db, driver.Queue{Name: "q"})
	o1 := seed(t, db, msg{queue: "q", subject: "order.created", props: `{"k":"v"}`, body: []byte("1")})
	seed(t, db, msg{queue: "q", subject: "invoice", props: `{"k":"w"}`})
	o2 := seed(t, db, msg{queue: "q", state: "locked", subject: "order.paid", mid: "m-2", token: "0123456789abcdef0123456789abcdef", priority: 3})
	seed(t, db, msg{queue: "q", state: "completed", subject: "order.done", settled: 1, token: "0123456789abcdef0123456789abcdef"})
	o3 := seed(t, db, msg{queue: "q", state: "dead_lettered", subject: "order.dead", props: `{"k":"v"}`})
	o4 := seed(t, db, msg{queue: "q", state: "scheduled", subject: "order.later", props: `{"k":"v","j":"x"}`, visible: 9})

	find := func(r driver.FindRequest) driver.FindResult {
		t.Helper()
		r.Queue = "q"
		if r.Max == 0 {
			r.Max = 100
		}
		if r.ScanMax == 0 {
			r.ScanMax = 1000
		}
		res, err := pg.Find(ctx, db, r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check := func(name string, res driver.FindResult, want []int64, next int64, scanned int) {
		t.Helper()
		if got := seqsOf(res.Rows); !reflect.DeepEqual(got, want) || res.NextSeq != next || res.Scanned != scanned {
			t.Errorf("%s: rows %v next %d scanned %d, want %v next %d scanned %d", name, got, res.NextSeq, res.Scanned, want, next, scanned)
		}
	}
	check("subject prefix", find(driver.FindRequest{SubjectPrefix: "order."}), []int64{o1, o2, o4}, 0, 4)
	check("message id", find(driver.FindRequest{MessageID: "m-2"}), []int64{o2}, 0, 4)
	check("property", find(driver.FindRequest{PropertyKey: "k", PropertyValue: "v"}), []int64{o1, o4}, 0, 4)
	check("property absent", find(driver.FindRequest{PropertyKey: "j", PropertyValue: ""}), []int64{}, 0, 4)
	check("dead letters", find(driver.FindRequest{State: "dead_lettered", PropertyKey: "k", PropertyValue: "v"}), []int64{o3}, 0, 1)
	check("locked", find(driver.FindRequest{State: "locked"}), []int64{o2}, 0, 1)
	// The window ends the page: the next starts after the last examined.
	check("scan window", find(driver.FindRequest{SubjectPrefix: "order.", ScanMax: 2}), []int64{o1}, o2, 2)
	// Max ends the page: the next starts after the last row.
	check("max", find(driver.FindRequest{SubjectPrefix: "order.", Max: 2}), []int64{o1, o2}, o2+1, 4)
	// A byte budget ends it too.
	check("bytes", find(driver.FindRequest{MaxBytes: 1}), []int64{o1}, o1+1, 4)
	if _, err := pg.Find(ctx, db, driver.FindRequest{Queue: "q", State: "completed", Max: 1, ScanMax: 1}); err == nil {
		t.Error("Find in the state completed: no error")
	}
}

func TestStatsCountsEachStateButCompleted(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	seedQueue(t, db, driver.Queue{Name: "q"})
	seedQueue(t, db, driver.Queue{Name: "other"})
	seed(t, db, msg{queue: "q", body: []byte("abc"), enq: 10})
	seed(t, db, msg{queue: "q", body: []byte("de"), enq: 5, group: "g"})
	seed(t, db, msg{queue: "q", state: "locked", body: []byte("f"), enq: 20})
	seed(t, db, msg{queue: "q", state: "dead_lettered", body: []byte("gh"), enq: 30, deadAt: 400})
	seed(t, db, msg{queue: "q", state: "dead_lettered", body: []byte("i"), enq: 31, deadAt: 300})
	seed(t, db, msg{queue: "q", state: "completed", settled: 1, enq: 1, token: "0123456789abcdef0123456789abcdef"})
	seed(t, db, msg{queue: "other", body: []byte("zzzz"), enq: 1})
	got, err := pg.Stats(ctx, db, "q")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]driver.StateStats{
		"active":        {Count: 2, Bytes: 5, OldestEnq: 10},
		"locked":        {Count: 1, Bytes: 1, OldestEnq: 20},
		"dead_lettered": {Count: 2, Bytes: 3, OldestEnq: 30, OldestDead: 300},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
	if got, err := pg.Stats(ctx, db, "none"); err != nil || len(got) != 0 {
		t.Fatalf("Stats of an empty queue = %v, %v", got, err)
	}
}

// TestOldestAndBusyFollowTheGroupRule checks the claimable set of Oldest
// and Busy: an active message behind an earlier live member of its group,
// or in a group with a member locked or deferred, is not claimable.
func TestOldestAndBusyFollowTheGroupRule(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	seedQueue(t, db, driver.Queue{Name: "q"})
	seedQueue(t, db, driver.Queue{Name: "r"})
	now := clock.now()
	seed(t, db, msg{queue: "q", state: "dead_lettered", deadAt: 77, enq: 1})
	seed(t, db, msg{queue: "q", state: "locked", group: "g", enq: 2, token: "0123456789abcdef0123456789abcdef"})
	seed(t, db, msg{queue: "q", group: "g", enq: 3})              // behind the locked one
	seed(t, db, msg{queue: "q", group: "h", enq: 4, priority: 2}) // the front of h
	seed(t, db, msg{queue: "q", group: "h", enq: 5})              // behind it
	seed(t, db, msg{queue: "q", state: "scheduled", visible: now, enq: 6})
	seed(t, db, msg{queue: "q", state: "scheduled", visible: now + 1, enq: 7})
	seed(t, db, msg{queue: "q", state: "completed", settled: 1, token: "0123456789abcdef0123456789abcdef", enq: 8})
	seed(t, db, msg{queue: "r", enq: 9})
	seed(t, db, msg{queue: "q", group: "k", enq: 10})                    // front of k...
	seed(t, db, msg{queue: "q", group: "k", state: "deferred", enq: 11}) // ...yet a member is deferred

	enq, dead, err := pg.Oldest(ctx, db, "q")
	if err != nil || enq != 4 || dead != 77 {
		t.Fatalf("Oldest = %d, %d, %v; want 4 (the front of h), 77", enq, dead, err)
	}
	// locked 2, the front of h, the due scheduled one.
	if n, err := pg.Busy(ctx, db, []string{"q"}); err != nil || n != 3 {
		t.Fatalf("Busy(q) = %d, %v; want 3", n, err)
	}
	if n, err := pg.Busy(ctx, db, []string{"q", "r", "none"}); err != nil || n != 4 {
		t.Fatalf("Busy(q, r) = %d, %v; want 4", n, err)
	}
	if enq, dead, err := pg.Oldest(ctx, db, "none"); err != nil || enq != 0 || dead != 0 {
		t.Fatalf("Oldest of an empty queue = %d, %d, %v", enq, dead, err)
	}
}

// TestReadsWriteNothing runs every read in a READ ONLY transaction, which
// PostgreSQL refuses any write in.
func TestReadsWriteNothing(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	seedQueue(t, db, driver.Queue{Name: "q"})
	seed(t, db, msg{queue: "q", group: "g", body: []byte("x")})
	seed(t, db, msg{queue: "q", state: "dead_lettered"})
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	for name, read := range map[string]func() error{
		"Peek": func() error {
			_, err := pg.Peek(ctx, tx, driver.PeekRequest{Queue: "q", Max: 10})
			return err
		},
		"PeekDeadLetters": func() error {
			_, err := pg.PeekDeadLetters(ctx, tx, driver.PeekRequest{Queue: "q", Max: 10})
			return err
		},
		"Find": func() error {
			_, err := pg.Find(ctx, tx, driver.FindRequest{Queue: "q", Max: 10, ScanMax: 10, PropertyKey: "a"})
			return err
		},
		"Stats": func() error { _, err := pg.Stats(ctx, tx, "q"); return err },
		"Oldest": func() error {
			_, _, err := pg.Oldest(ctx, tx, "q")
			return err
		},
		"Busy": func() error { _, err := pg.Busy(ctx, tx, []string{"q"}); return err },
	} {
		if err := read(); err != nil {
			t.Errorf("%s in a read-only transaction: %v", name, err)
		}
	}
	// The control: a write in the same kind of transaction is refused.
	tx2, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx2.Rollback() }()
	_, err = pg.Redrive(ctx, tx2, "q", nil, 1)
	t.Logf("control: Redrive in a read-only transaction: %v", err)
	if err == nil {
		t.Fatal("control: a write in a read-only transaction was not refused")
	}
}

// Example row count helper for the sweeps' tests.
func countWhere(t testing.TB, db *sql.DB, where string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(*) FROM mqlite_messages WHERE %s`, where), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
