package postgres_test

import (
	"context"
	"database/sql"
	"reflect"
	"sync"
	"testing"

	"github.com/mqlite/mqlite/internal/driver"
)

// token is a lease's token as the claims write it: 32 hex digits.
const token = "0123456789abcdef0123456789abcdef"

// stateOf reads the state of the message id ("" when it is gone).
func stateOf(t testing.TB, db *sql.DB, id int64) string {
	t.Helper()
	var s string
	err := db.QueryRow(`SELECT state FROM mqlite_messages WHERE id = $1`, id).Scan(&s)
	if err == sql.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRedriveBringsDeadLettersBack(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "q"})
	seedQueue(t, db, driver.Queue{Name: "other"})
	d1 := seed(t, db, msg{queue: "q", state: "dead_lettered", dc: 3, deadAt: 5, expires: now - 1})
	d2 := seed(t, db, msg{queue: "q", state: "dead_lettered", dc: 3, deadAt: 6, expires: now + 1000})
	d3 := seed(t, db, msg{queue: "q", state: "dead_lettered", dc: 3, deadAt: 7})
	a := seed(t, db, msg{queue: "q"})
	o := seed(t, db, msg{queue: "other", state: "dead_lettered"})

	n, err := pg.Redrive(ctx, db, "q", []int64{d1, a, o, 9999}, now)
	if err != nil || n != 1 {
		t.Fatalf("Redrive(d1, an active one, another queue's, none) = %d, %v; want 1", n, err)
	}
	rows, err := pg.Peek(ctx, db, driver.PeekRequest{Queue: "q", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(rows); !reflect.DeepEqual(got, []int64{d1, a}) {
		t.Fatalf("live after redrive = %v", got)
	}
	r := rows[0]
	if r.State != "active" || r.DeliveryCount != 0 || r.ExpiresAt != 0 || r.VisibleAt != now ||
		r.DeadLetterReason != "" || r.DeadLetterDescription != "" || r.DeadLetteredAt != 0 {
		t.Fatalf("redriven row = %+v: want active, count 0, no TTL (it had passed), no dead-letter fields", r)
	}
	n, err = pg.Redrive(ctx, db, "q", nil, now)
	if err != nil || n != 2 {
		t.Fatalf("Redrive(all) = %d, %v; want 2", n, err)
	}
	var exp int64
	if err := db.QueryRow(`SELECT expires_at FROM mqlite_messages WHERE id = $1`, d2).Scan(&exp); err != nil || exp != now+1000 {
		t.Fatalf("a TTL still ahead = %d, %v; want kept", exp, err)
	}
	if s := stateOf(t, db, d3); s != "active" {
		t.Fatalf("d3 = %s", s)
	}
	if s := stateOf(t, db, o); s != "dead_lettered" {
		t.Fatalf("another queue's dead letter = %s", s)
	}
}

// TestRedriveRejoinsTheGroupBehindAMemberInFlight is the promise of
// SQLite's mqlite_group_rejoin and mqlite_group_handover, read through
// Oldest and Busy (the claimable set): a redriven message never overtakes
// a member in flight, takes its place in id order once that one leaves or
// comes back, and before an active front takes its place at once.
func TestRedriveRejoinsTheGroupBehindAMemberInFlight(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "q"})
	dead := seed(t, db, msg{queue: "q", group: "g", state: "dead_lettered", enq: 1})
	front := seed(t, db, msg{queue: "q", group: "g", state: "locked", token: token, lockedUntil: now + 10, enq: 2})
	seed(t, db, msg{queue: "q", group: "g", enq: 3})
	if n, err := pg.Redrive(ctx, db, "q", []int64{dead}, now); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	claimable := func(wantEnq, wantBusy int64) {
		t.Helper()
		enq, _, err := pg.Oldest(ctx, db, "q")
		if err != nil {
			t.Fatal(err)
		}
		busy, err := pg.Busy(ctx, db, []string{"q"})
		if err != nil {
			t.Fatal(err)
		}
		if enq != wantEnq || busy != wantBusy {
			t.Fatalf("oldest claimable enqueued at %d, busy %d; want %d, %d", enq, busy, wantEnq, wantBusy)
		}
	}
	claimable(0, 1) // the redriven one waits behind the locked front
	// The front's lease lapses: the reaper puts it back, and the group
	// goes on in id order, the redriven one first.
	if n, err := pg.Reap(ctx, db, now+10, nil); err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v", n, err)
	}
	claimable(1, 1)
	// Before an active front a redriven message takes its place at once.
	if _, err := db.Exec(`UPDATE mqlite_messages SET state = 'dead_lettered' WHERE id = $1`, dead); err != nil {
		t.Fatal(err)
	}
	claimable(2, 1)
	if n, err := pg.Redrive(ctx, db, "q", nil, now); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	claimable(1, 1)
	_ = front

	// A front abandoned with a delay (scheduled after a delivery) holds a
	// redriven message back like a locked one; a later member sent with a
	// delay (scheduled, never delivered) holds nobody.
	seedQueue(t, db, driver.Queue{Name: "s"})
	seed(t, db, msg{queue: "s", group: "g", enq: 1})
	later := seed(t, db, msg{queue: "s", group: "g", state: "scheduled", visible: now + 100, enq: 2})
	oldest := func(want int64) {
		t.Helper()
		if enq, _, err := pg.Oldest(ctx, db, "s"); err != nil || enq != want {
			t.Fatalf("oldest claimable of s enqueued at %d, %v; want %d", enq, err, want)
		}
	}
	oldest(1) // a later member sent with a delay holds nobody
	if _, err := db.Exec(`UPDATE mqlite_messages SET state = 'dead_lettered' WHERE queue = 's' AND id < $1`, later); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE mqlite_messages SET delivery_count = 1 WHERE id = $1`, later); err != nil {
		t.Fatal(err)
	}
	if n, err := pg.Redrive(ctx, db, "s", nil, now); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	oldest(0) // behind the front abandoned with a delay
	if n, err := pg.Promote(ctx, db, now+100, nil); err != nil || n != 1 {
		t.Fatalf("Promote = %d, %v", n, err)
	}
	oldest(1) // the front is back: the group goes on in id order
}

func TestDeliverNowMakesScheduledMessagesDue(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "q"})
	s1 := seed(t, db, msg{queue: "q", state: "scheduled", visible: now + 1000})
	s2 := seed(t, db, msg{queue: "q", state: "scheduled", visible: now + 2000})
	a := seed(t, db, msg{queue: "q"})
	if n, err := pg.DeliverNow(ctx, db, "q", []int64{s1, a}, now); err != nil || n != 1 {
		t.Fatalf("DeliverNow(s1, an active one) = %d, %v; want 1", n, err)
	}
	var vis int64
	if err := db.QueryRow(`SELECT visible_at FROM mqlite_messages WHERE id = $1 AND state = 'active'`, s1).Scan(&vis); err != nil || vis != now {
		t.Fatalf("s1 visible at %d, %v; want active at %d", vis, err, now)
	}
	if n, err := pg.DeliverNow(ctx, db, "q", nil, now); err != nil || n != 1 || stateOf(t, db, s2) != "active" {
		t.Fatalf("DeliverNow(all) = %d, %v", n, err)
	}
}

func TestPurge(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	seedQueue(t, db, driver.Queue{Name: "q"})
	seedQueue(t, db, driver.Queue{Name: "other"})
	if _, err := db.Exec(`INSERT INTO mqlite_messages (queue, body_len, content_key, enqueued_at)
		SELECT 'q', 0, '\x00', 0 FROM generate_series(1, $1)`, driver.SweepBatch+3); err != nil {
		t.Fatal(err)
	}
	dead := seed(t, db, msg{queue: "q", state: "dead_lettered"})
	dead2 := seed(t, db, msg{queue: "q", state: "dead_lettered"})
	other := seed(t, db, msg{queue: "other"})
	var got []int64
	for {
		n, err := pg.PurgeBatch(ctx, db, "q", "active")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n < driver.SweepBatch {
			break
		}
	}
	if want := []int64{driver.SweepBatch, 3}; !reflect.DeepEqual(got, want) {
		t.Fatalf("PurgeBatch rounds = %v, want %v", got, want)
	}
	if stateOf(t, db, dead) == "" || stateOf(t, db, other) == "" {
		t.Fatal("the purge of active messages took a dead letter or another queue's message")
	}
	if n, err := pg.PurgeSeqs(ctx, db, "q", "dead_lettered", []int64{dead, other}); err != nil || n != 1 {
		t.Fatalf("PurgeSeqs = %d, %v; want 1", n, err)
	}
	if stateOf(t, db, dead) != "" || stateOf(t, db, dead2) == "" {
		t.Fatal("PurgeSeqs deleted the wrong rows")
	}
	if n, err := pg.PurgeSeqs(ctx, db, "q", "dead_lettered", nil); err != nil || n != 0 {
		t.Fatalf("PurgeSeqs(none) = %d, %v", n, err)
	}
}

func TestRetainByAgeCountAndBytes(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	type dl struct {
		at   int64
		body int
	}
	setup := func(q driver.Queue, letters []dl) []int64 {
		seedQueue(t, db, q)
		seed(t, db, msg{queue: q.Name, body: make([]byte, 100)}) // not a dead letter: never removed
		var ids []int64
		for _, l := range letters {
			ids = append(ids, seed(t, db, msg{queue: q.Name, state: "dead_lettered", deadAt: l.at, body: make([]byte, l.body)}))
		}
		return ids
	}
	left := func(q string) []int64 {
		rows, err := pg.PeekDeadLetters(ctx, db, driver.PeekRequest{Queue: q, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		return seqsOf(rows)
	}
	letters := []dl{{now - 5000, 10}, {now - 3000, 10}, {now - 1000, 10}, {now, 10}}

	setup(driver.Queue{Name: "none"}, letters)
	if n, err := pg.Retain(ctx, db, driver.Queue{Name: "none"}, now, nil); err != nil || n != 0 || len(left("none")) != 4 {
		t.Fatalf("Retain unbounded = %d, %v", n, err)
	}
	q := driver.Queue{Name: "age", DLQMaxAgeMS: 3000}
	ids := setup(q, letters)
	if n, err := pg.Retain(ctx, db, q, now, nil); err != nil || n != 2 || !reflect.DeepEqual(left("age"), ids[2:]) {
		t.Fatalf("Retain by age = %d, %v, left %v", n, err, left("age"))
	}
	q = driver.Queue{Name: "count", DLQMaxCount: 1}
	ids = setup(q, letters)
	if n, err := pg.Retain(ctx, db, q, now, nil); err != nil || n != 3 || !reflect.DeepEqual(left("count"), ids[3:]) {
		t.Fatalf("Retain by count = %d, %v, left %v", n, err, left("count"))
	}
	q = driver.Queue{Name: "bytes", DLQMaxBytes: 25}
	ids = setup(q, letters)
	if n, err := pg.Retain(ctx, db, q, now, nil); err != nil || n != 2 || !reflect.DeepEqual(left("bytes"), ids[2:]) {
		t.Fatalf("Retain by bytes = %d, %v, left %v", n, err, left("bytes"))
	}
	// Twice at once on one queue: the count bound's excess goes once.
	q = driver.Queue{Name: "twice", DLQMaxCount: 2}
	ids = setup(q, append(letters, letters...))
	var wg sync.WaitGroup
	ns := make([]int64, 2)
	for i := range ns {
		wg.Go(func() {
			n, err := pg.Retain(ctx, db, q, now, nil)
			if err != nil {
				t.Error(err)
			}
			ns[i] = n
		})
	}
	wg.Wait()
	if ns[0]+ns[1] != 6 || !reflect.DeepEqual(left("twice"), ids[6:]) {
		t.Fatalf("two retentions at once removed %v, left %v; want 6 in all, the newest two left", ns, left("twice"))
	}
}

func TestReapReleasesLapsedLeases(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "q", MaxDeliveryCount: 3})
	back := seed(t, db, msg{queue: "q", state: "locked", token: token, lockedUntil: now, dc: 2})
	last := seed(t, db, msg{queue: "q", state: "locked", token: token, lockedUntil: now - 1, dc: 3})
	held := seed(t, db, msg{queue: "q", state: "locked", token: token, lockedUntil: now + 1, dc: 3})
	n, err := pg.Reap(ctx, db, now, nil)
	if err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2", n, err)
	}
	var tok, reason, desc string
	var dc, until, at int64
	row := `SELECT lock_token, coalesce(dead_letter_reason, ''), coalesce(dead_letter_desc, ''), delivery_count, locked_until, dead_lettered_at FROM mqlite_messages WHERE id = $1`
	if err := db.QueryRow(row, back).Scan(&tok, &reason, &desc, &dc, &until, &at); err != nil {
		t.Fatal(err)
	}
	if stateOf(t, db, back) != "active" || tok == token || reason != "" || dc != 2 || until != 0 || at != 0 {
		t.Fatalf("released lease: token %q reason %q count %d until %d at %d", tok, reason, dc, until, at)
	}
	if err := db.QueryRow(row, last).Scan(&tok, &reason, &desc, &dc, &until, &at); err != nil {
		t.Fatal(err)
	}
	if stateOf(t, db, last) != "dead_lettered" || reason != driver.ReasonMaxDelivery || desc != driver.DescLeaseExpired || dc != 3 || at != now {
		t.Fatalf("last delivery: reason %q desc %q count %d at %d", reason, desc, dc, at)
	}
	if stateOf(t, db, held) != "locked" {
		t.Fatal("a live lease was reaped")
	}
}

// TestSweepsHonourStop runs each sweep over more than a batch with a stop
// that says stop at once: one batch goes, and the next run takes the rest.
func TestSweepsHonourStop(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "q"})
	for _, q := range []string{
		`INSERT INTO mqlite_messages (queue, state, locked_until, lock_token, delivery_count, body_len, content_key, enqueued_at)
		 SELECT 'q', 'locked', $1, '` + token + `', 1, 0, '\x00', 0 FROM generate_series(1, $2)`,
		`INSERT INTO mqlite_messages (queue, state, visible_at, body_len, content_key, enqueued_at)
		 SELECT 'q', 'scheduled', $1, 0, '\x00', 0 FROM generate_series(1, $2)`,
		`INSERT INTO mqlite_messages (queue, state, expires_at, body_len, content_key, enqueued_at)
		 SELECT 'q', 'deferred', $1, 0, '\x00', 0 FROM generate_series(1, $2)`,
		`INSERT INTO mqlite_dedup (queue, kind, key, seq, expires_at)
		 SELECT 'q', 'id', i::text, i, $1 FROM generate_series(1, $2) i`,
	} {
		if _, err := db.Exec(q, now-1, driver.SweepBatch+1); err != nil {
			t.Fatal(err)
		}
	}
	type sweepFn func(context.Context, driver.DBTX, int64, func() bool) (int64, error)
	for _, s := range []struct {
		name string
		run  sweepFn
	}{{"Reap", pg.Reap}, {"Promote", pg.Promote}, {"Expire", pg.Expire}, {"Janitor", pg.Janitor}} {
		asked := 0
		stop := func() bool { asked++; return true }
		if n, err := s.run(ctx, db, now, stop); err != nil || n != driver.SweepBatch || asked == 0 {
			t.Errorf("%s with stop = %d, %v (stop asked %d times); want one batch", s.name, n, err, asked)
		}
		if n, err := s.run(ctx, db, now, nil); err != nil || n != 1 {
			t.Errorf("%s = %d, %v; want the rest", s.name, n, err)
		}
	}
}

func TestPromote(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "q"})
	due := seed(t, db, msg{queue: "q", state: "scheduled", visible: now})
	later := seed(t, db, msg{queue: "q", state: "scheduled", visible: now + 1})
	if n, err := pg.Promote(ctx, db, now, nil); err != nil || n != 1 {
		t.Fatalf("Promote = %d, %v", n, err)
	}
	if stateOf(t, db, due) != "active" || stateOf(t, db, later) != "scheduled" {
		t.Fatal("Promote moved the wrong rows")
	}
}

func TestExpireDeletesOrDeadLetters(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "drop"})
	seedQueue(t, db, driver.Queue{Name: "keep", DeadLetterOnExpire: true})
	var gone, kept, stay []int64
	for _, st := range []string{"active", "scheduled", "deferred"} {
		gone = append(gone, seed(t, db, msg{queue: "drop", state: st, expires: now}))
		kept = append(kept, seed(t, db, msg{queue: "keep", state: st, expires: now - 5}))
		stay = append(stay, seed(t, db, msg{queue: "drop", state: st, expires: now + 1}))
	}
	stay = append(stay,
		seed(t, db, msg{queue: "drop", state: "locked", token: token, lockedUntil: now + 10, expires: now}),
		seed(t, db, msg{queue: "keep", state: "dead_lettered", expires: now}),
		seed(t, db, msg{queue: "drop"}))
	n, err := pg.Expire(ctx, db, now, nil)
	if err != nil || n != 6 {
		t.Fatalf("Expire = %d, %v; want 6", n, err)
	}
	for _, id := range gone {
		if s := stateOf(t, db, id); s != "" {
			t.Errorf("expired %d on a dropping queue is %s, want gone", id, s)
		}
	}
	for _, id := range kept {
		var reason, desc string
		var at int64
		if err := db.QueryRow(`SELECT state, dead_letter_reason, dead_letter_desc, dead_lettered_at FROM mqlite_messages WHERE id = $1`, id).
			Scan(new(string), &reason, &desc, &at); err != nil {
			t.Fatal(err)
		}
		if stateOf(t, db, id) != "dead_lettered" || reason != driver.ReasonTTL || desc != driver.DescTTL || at != now {
			t.Errorf("expired %d on a keeping queue: %s %q %q at %d", id, stateOf(t, db, id), reason, desc, at)
		}
	}
	for _, id := range stay {
		if s := stateOf(t, db, id); s == "" {
			t.Errorf("message %d went", id)
		}
	}
}

func TestJanitorDeletesWhatExpired(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedJanitor(t, db, now, 3)
	n, err := pg.Janitor(ctx, db, now, nil)
	if err != nil || n != 12 {
		t.Fatalf("Janitor = %d, %v; want 12", n, err)
	}
	for _, table := range []string{"mqlite_settlement_receipts", "mqlite_receive_attempts", "mqlite_commits", "mqlite_dedup"} {
		var left, live int64
		if err := db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE expires_at > $1) FROM `+table, now).Scan(&left, &live); err != nil {
			t.Fatal(err)
		}
		if left != 1 || live != 1 {
			t.Errorf("%s: %d rows left, %d live; want the one live row", table, left, live)
		}
	}
}

// seedJanitor writes n expired rows and one live row into each table the
// janitor cleans.
func seedJanitor(t testing.TB, db *sql.DB, now int64, n int) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO mqlite_settlement_receipts (seq, lock_token, operation, args, queue, expires_at)
		 SELECT i, '\x01', 'complete', '', 'q', CASE WHEN i > $2 THEN $1::bigint + 1 ELSE $1::bigint END FROM generate_series(1, $2 + 1) i`,
		`INSERT INTO mqlite_receive_attempts (queue, attempt_id, request, result, expires_at)
		 SELECT 'q', i::text, '', '\x00', CASE WHEN i > $2 THEN $1::bigint + 1 ELSE $1::bigint END FROM generate_series(1, $2 + 1) i`,
		`INSERT INTO mqlite_commits (scope, idempotency_key, request, result, expires_at)
		 SELECT 's', i::text, '', '\x00', CASE WHEN i > $2 THEN $1::bigint + 1 ELSE $1::bigint END FROM generate_series(1, $2 + 1) i`,
		`INSERT INTO mqlite_dedup (queue, kind, key, seq, expires_at)
		 SELECT 'q', 'id', i::text, i, CASE WHEN i > $2 THEN $1::bigint + 1 ELSE $1::bigint END FROM generate_series(1, $2 + 1) i`,
	} {
		if _, err := db.Exec(q, now, n); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCompactReceiptsTurnsCompletedRows(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	seedQueue(t, db, driver.Queue{Name: "q"})
	recent := seed(t, db, msg{queue: "q", state: "completed", settled: now - 10, token: token})
	old := seed(t, db, msg{queue: "q", state: "completed", settled: now - driver.ReceiptTTLMS, token: token})
	future := seed(t, db, msg{queue: "q", state: "completed", settled: now + 1, token: token})
	active := seed(t, db, msg{queue: "q"})
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := pg.CompactReceipts(ctx, tx, now)
	if err != nil || n != 2 {
		t.Fatalf("CompactReceipts = %d, %v; want 2", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if stateOf(t, db, recent) != "" || stateOf(t, db, old) != "" || stateOf(t, db, future) != "completed" || stateOf(t, db, active) != "active" {
		t.Fatal("CompactReceipts turned the wrong rows")
	}
	rows, err := db.Query(`SELECT seq, encode(lock_token, 'hex'), operation, args, queue, expires_at FROM mqlite_settlement_receipts`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var seq, exp int64
		var tok, op, args, queue string
		if err := rows.Scan(&seq, &tok, &op, &args, &queue, &exp); err != nil {
			t.Fatal(err)
		}
		if seq != recent || tok != token || op != "complete" || args != "" || queue != "q" || exp != now-10+driver.ReceiptTTLMS {
			t.Errorf("receipt %d %s %s %q %s %d", seq, tok, op, args, queue, exp)
		}
		got = append(got, tok)
	}
	if len(got) != 1 {
		t.Fatalf("receipts = %v, want the recent one's only (the old one's window passed)", got)
	}
}

// TestSweepsAtOnceMoveEachRowOnce runs Reap, Expire and Janitor on two
// handles at once over the same backlog (several batches of each): every
// row is moved once, and the two handles' counts add up to the rows.
func TestSweepsAtOnceMoveEachRowOnce(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	other := openTwin(t, db, clock)
	seedQueue(t, db, driver.Queue{Name: "q", MaxDeliveryCount: 2})
	seedQueue(t, db, driver.Queue{Name: "ttl", DeadLetterOnExpire: true})
	const rows = 3*driver.SweepBatch + 17
	// Lapsed leases, every third at its last delivery; expired messages on
	// both kinds of queue; expired janitor rows.
	if _, err := db.Exec(`INSERT INTO mqlite_messages (queue, state, locked_until, lock_token, delivery_count, body_len, content_key, enqueued_at)
		SELECT 'q', 'locked', $1, $2, CASE WHEN i % 3 = 0 THEN 2 ELSE 1 END, 0, '\x00', 0 FROM generate_series(1, $3) i`,
		now-1, token, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO mqlite_messages (queue, state, expires_at, body_len, content_key, enqueued_at)
		SELECT CASE WHEN i % 2 = 0 THEN 'q' ELSE 'ttl' END, 'active', $1, 0, '\x00', 0 FROM generate_series(1, $2) i`,
		now, rows); err != nil {
		t.Fatal(err)
	}
	seedJanitor(t, db, now, rows)
	lastDelivery := countWhere(t, db, `state = 'locked' AND delivery_count = 2`)
	ttlKept := countWhere(t, db, `queue = 'ttl' AND expires_at > 0`)

	type sweepFn func(context.Context, driver.DBTX, int64, func() bool) (int64, error)
	for _, s := range []struct {
		name string
		run  sweepFn
		want int64
	}{
		{"Reap", pg.Reap, rows},
		{"Expire", pg.Expire, rows},
		{"Janitor", pg.Janitor, 4 * rows},
	} {
		var wg sync.WaitGroup
		counts := make([]int64, 2)
		start := make(chan struct{})
		for i, h := range []*sql.DB{db, other} {
			wg.Go(func() {
				<-start
				n, err := s.run(ctx, h, now, nil)
				if err != nil {
					t.Errorf("%s on handle %d: %v", s.name, i, err)
				}
				counts[i] = n
			})
		}
		close(start)
		wg.Wait()
		t.Logf("%s: handle 0 moved %d, handle 1 moved %d, of %d", s.name, counts[0], counts[1], s.want)
		if counts[0]+counts[1] != s.want {
			t.Errorf("%s: the handles moved %d + %d rows, want %d in all", s.name, counts[0], counts[1], s.want)
		}
	}
	if n := countWhere(t, db, `state = 'locked'`); n != 0 {
		t.Errorf("%d leases left", n)
	}
	if n := countWhere(t, db, `state = 'dead_lettered' AND dead_letter_reason = $1 AND delivery_count = 2`, driver.ReasonMaxDelivery); n != lastDelivery {
		t.Errorf("%d dead-lettered at their last delivery, want %d", n, lastDelivery)
	}
	if n := countWhere(t, db, `state = 'active' AND delivery_count = 1`); n != rows-lastDelivery {
		t.Errorf("%d back to active, want %d", n, rows-lastDelivery)
	}
	if n := countWhere(t, db, `dead_letter_reason = $1`, driver.ReasonTTL); n != ttlKept {
		t.Errorf("%d dead-lettered by TTL, want %d", n, ttlKept)
	}
	if n := countWhere(t, db, `expires_at > 0 AND state = 'active'`); n != 0 {
		t.Errorf("%d expired messages left", n)
	}
}
