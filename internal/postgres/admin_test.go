package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/errs"
)

func init() {
	// Package mqlite sets the error of a bad input value; these tests run
	// the engine without it.
	if errs.NewInvalid == nil {
		errs.NewInvalid = func(kind error, detail string) error { return fmt.Errorf("%w: %s", kind, detail) }
	}
}

// adminQueue is a queue with valid settings.
func adminQueue(name string) driver.Queue {
	return driver.Queue{Name: name, MaxDeliveryCount: 5, LockDurationMS: 30_000, DedupWindowMS: 60_000,
		DLQMaxCount: 10}
}

// putMessage writes a message into queue directly (the send is another
// family's) and returns its id.
func putMessage(t *testing.T, db *sql.DB, queue, state string) int64 {
	t.Helper()
	var id int64
	err := db.QueryRow(`INSERT INTO mqlite_messages (queue, state, body_len, enqueued_at, content_key, body, properties, settled_at)
		VALUES ($1, $2, 1, 0, '\x00'::bytea, 'x'::bytea, '{"k":"v"}', CASE WHEN $2 = 'completed' THEN 1 END) RETURNING id`,
		queue, state).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// count returns the rows of table (a fixed name) matching where.
func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestAdminQueues(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	q := adminQueue("orders")
	q.FIFO, q.DeadLetterOnExpire, q.DedupByBody = true, true, true
	noErr(t, "create", pg.CreateQueue(ctx, db, q, 100))
	wantErr(t, "create again", pg.CreateQueue(ctx, db, q, 101), errs.ErrQueueExists)
	noErr(t, "create b", pg.CreateQueue(ctx, db, adminQueue("b"), 102))

	got, err := pg.GetQueue(ctx, db, "orders")
	noErr(t, "get", err)
	want := q
	want.CreatedAt, want.UpdatedAt = 100, 100
	if got != want {
		t.Fatalf("get = %+v, want %+v", got, want)
	}
	_, err = pg.GetQueue(ctx, db, "nope")
	wantErr(t, "get missing", err, errs.ErrQueueNotFound)
	list, err := pg.ListQueues(ctx, db)
	noErr(t, "list", err)
	if len(list) != 2 || list[0].Name != "b" || list[1].Name != "orders" {
		t.Fatalf("list = %+v", list)
	}

	// Pause keeps the first moment; resume clears it.
	noErr(t, "pause", pg.SetPaused(ctx, db, "orders", 500))
	noErr(t, "pause again", pg.SetPaused(ctx, db, "orders", 600))
	if got, _ := pg.GetQueue(ctx, db, "orders"); got.PausedAt != 500 {
		t.Fatalf("paused at %d, want 500", got.PausedAt)
	}
	noErr(t, "resume", pg.SetPaused(ctx, db, "orders", 0))
	if got, _ := pg.GetQueue(ctx, db, "orders"); got.PausedAt != 0 {
		t.Fatalf("paused at %d after resume", got.PausedAt)
	}
	wantErr(t, "pause missing", pg.SetPaused(ctx, db, "nope", 1), errs.ErrQueueNotFound)

	// The ordering cannot change while the queue holds a message; a
	// completed one does not count.
	putMessage(t, db, "orders", "completed")
	up := q
	up.FIFO, up.MaxDeliveryCount = false, 9
	noErr(t, "update, completed only", pg.UpdateQueue(ctx, db, up, 200))
	id := putMessage(t, db, "orders", "active")
	up.FIFO = true
	wantErr(t, "update ordering", pg.UpdateQueue(ctx, db, up, 300), errs.ErrInvalidOrdering)
	up.FIFO, up.MaxDeliveryCount = false, 7
	noErr(t, "update", pg.UpdateQueue(ctx, db, up, 300))
	if got, _ := pg.GetQueue(ctx, db, "orders"); got.FIFO || got.MaxDeliveryCount != 7 || got.UpdatedAt != 300 || got.CreatedAt != 100 {
		t.Fatalf("after update: %+v", got)
	}
	wantErr(t, "update missing", pg.UpdateQueue(ctx, db, adminQueue("nope"), 1), errs.ErrQueueNotFound)

	// Delete takes everything of the queue along, and nothing of another.
	other := putMessage(t, db, "b", "active")
	for _, stmt := range []string{
		`INSERT INTO mqlite_dedup (queue, kind, key, seq, expires_at) VALUES ($1, 'id', 'k', 1, 1)`,
		`INSERT INTO mqlite_settlement_receipts (seq, lock_token, operation, args, queue, expires_at) VALUES (1, '\x00'::bytea, 'complete', $1, $1, 1)`,
		`INSERT INTO mqlite_receive_attempts (queue, attempt_id, request, result, expires_at) VALUES ($1, 'a', '', '\x00'::bytea, 1)`,
	} {
		for _, name := range []string{"orders", "b"} {
			if _, err := db.Exec(stmt, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	noErr(t, "delete", pg.DeleteQueue(ctx, db, "orders"))
	wantErr(t, "delete again", pg.DeleteQueue(ctx, db, "orders"), errs.ErrQueueNotFound)
	for _, table := range []string{"mqlite_messages", "mqlite_dedup", "mqlite_settlement_receipts", "mqlite_receive_attempts"} {
		if n := count(t, db, `SELECT count(*) FROM `+table+` WHERE queue = 'orders'`); n != 0 {
			t.Fatalf("%s keeps %d rows of the deleted queue", table, n)
		}
		if n := count(t, db, `SELECT count(*) FROM `+table+` WHERE queue = 'b'`); n != 1 {
			t.Fatalf("%s has %d rows of the other queue, want 1", table, n)
		}
	}
	if n := count(t, db, `SELECT count(*) FROM mqlite_messages WHERE id = $1`, id); n != 0 {
		t.Fatalf("message %d outlived its queue", id)
	}
	if n := count(t, db, `SELECT count(*) FROM mqlite_messages WHERE id = $1`, other); n != 1 {
		t.Fatalf("message %d of the other queue went", other)
	}
}

func TestAdminQueueOnAPool(t *testing.T) {
	// Every method runs on the handle itself, outside any transaction.
	db, _ := openTest(t)
	ctx := context.Background()
	noErr(t, "create", pg.CreateQueue(ctx, db, adminQueue("q"), 1))
	wantErr(t, "create again", pg.CreateQueue(ctx, db, adminQueue("q"), 1), errs.ErrQueueExists)
	noErr(t, "topic", pg.CreateTopic(ctx, db, "t", 1))
	noErr(t, "subscribe", pg.CreateSubscription(ctx, db, "t", adminQueue("s"), driver.Filter{}, 1))
	noErr(t, "delete topic", pg.DeleteTopic(ctx, db, "t"))
	noErr(t, "delete queue", pg.DeleteQueue(ctx, db, "q"))
	if n := count(t, db, `SELECT count(*) FROM mqlite_queues`); n != 0 {
		t.Fatalf("%d queues left", n)
	}
}

func TestAdminTopics(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	noErr(t, "queue", pg.CreateQueue(ctx, db, adminQueue("plain"), 1))
	noErr(t, "topic", pg.CreateTopic(ctx, db, "events", 10))
	wantErr(t, "topic again", pg.CreateTopic(ctx, db, "events", 11), errs.ErrTopicExists)
	wantErr(t, "topic named as a queue", pg.CreateTopic(ctx, db, "plain", 11), errs.ErrTopicExists)
	wantErr(t, "queue named as a topic", pg.CreateQueue(ctx, db, adminQueue("events"), 11), errs.ErrQueueExists)

	f := driver.Filter{SubjectPrefix: "order.", Properties: map[string]driver.Match{"region": {In: []string{"eu"}}}}
	noErr(t, "subscribe b", pg.CreateSubscription(ctx, db, "events", adminQueue("events.b"), f, 20))
	noErr(t, "subscribe a", pg.CreateSubscription(ctx, db, "events", adminQueue("events.a"), driver.Filter{}, 21))
	wantErr(t, "subscribe to nothing", pg.CreateSubscription(ctx, db, "nope", adminQueue("x"), f, 22), errs.ErrTopicNotFound)
	wantErr(t, "subscribe a taken name", pg.CreateSubscription(ctx, db, "events", adminQueue("plain"), f, 22), errs.ErrQueueExists)
	wantErr(t, "subscribe the topic's name", pg.CreateSubscription(ctx, db, "events", adminQueue("events"), f, 22), errs.ErrQueueExists)
	if _, err := pg.GetQueue(ctx, db, "x"); !errors.Is(err, errs.ErrQueueNotFound) {
		t.Fatalf("a refused subscription left its queue: %v", err)
	}

	top, err := pg.GetTopic(ctx, db, "events")
	noErr(t, "get", err)
	if top.CreatedAt != 10 || len(top.Subscriptions) != 2 || top.Subscriptions[0].Queue != "events.a" ||
		top.Subscriptions[1].Queue != "events.b" || top.Subscriptions[1].Filter.SubjectPrefix != "order." ||
		top.Subscriptions[1].Filter.Properties["region"].In[0] != "eu" || top.Subscriptions[1].CreatedAt != 20 {
		t.Fatalf("get = %+v", top)
	}
	_, err = pg.GetTopic(ctx, db, "nope")
	wantErr(t, "get missing", err, errs.ErrTopicNotFound)

	noErr(t, "update filter", pg.UpdateSubscription(ctx, db, "events", "events.a", driver.Filter{Subject: "s"}))
	wantErr(t, "update missing", pg.UpdateSubscription(ctx, db, "events", "plain", f), errs.ErrSubscriptionNotFound)
	noErr(t, "topic 2", pg.CreateTopic(ctx, db, "audit", 30))
	list, err := pg.ListTopics(ctx, db)
	noErr(t, "list", err)
	if len(list) != 2 || list[0].Name != "audit" || len(list[0].Subscriptions) != 0 || list[1].Name != "events" ||
		list[1].Subscriptions[0].Filter.Subject != "s" {
		t.Fatalf("list = %+v", list)
	}

	putMessage(t, db, "events.a", "active")
	noErr(t, "unsubscribe", pg.DeleteSubscription(ctx, db, "events", "events.a"))
	wantErr(t, "unsubscribe again", pg.DeleteSubscription(ctx, db, "events", "events.a"), errs.ErrSubscriptionNotFound)
	if _, err := pg.GetQueue(ctx, db, "events.a"); !errors.Is(err, errs.ErrQueueNotFound) {
		t.Fatalf("the subscription's queue stayed: %v", err)
	}
	// Deleting a subscription's queue drops the subscription.
	noErr(t, "subscribe c", pg.CreateSubscription(ctx, db, "events", adminQueue("events.c"), f, 40))
	noErr(t, "delete c", pg.DeleteQueue(ctx, db, "events.c"))
	if top, _ := pg.GetTopic(ctx, db, "events"); len(top.Subscriptions) != 1 {
		t.Fatalf("subscriptions after the queue went: %+v", top.Subscriptions)
	}

	putMessage(t, db, "events.b", "active")
	noErr(t, "delete topic", pg.DeleteTopic(ctx, db, "events"))
	wantErr(t, "delete topic again", pg.DeleteTopic(ctx, db, "events"), errs.ErrTopicNotFound)
	if n := count(t, db, `SELECT count(*) FROM mqlite_queues WHERE name LIKE 'events%'`); n != 0 {
		t.Fatalf("%d subscription queues outlived their topic", n)
	}
	noErr(t, "the name is free again", pg.CreateQueue(ctx, db, adminQueue("events"), 50))
}

func adminSchedule(name, target string, next int64) driver.Schedule {
	return driver.Schedule{Name: name, Target: target, IntervalMS: 1000, CatchUp: 1, Body: []byte("tick"),
		Properties: `{"a":"b"}`, NextAt: next}
}

func TestAdminSchedules(t *testing.T) {
	db, _ := openTest(t)
	ctx := context.Background()
	noErr(t, "queue", pg.CreateQueue(ctx, db, adminQueue("q"), 1))
	noErr(t, "topic", pg.CreateTopic(ctx, db, "t", 1))
	wantErr(t, "no target", pg.CreateSchedule(ctx, db, adminSchedule("s", "nope", 1), 1), errs.ErrQueueNotFound)
	noErr(t, "create", pg.CreateSchedule(ctx, db, adminSchedule("s", "q", 5000), 10))
	wantErr(t, "create again", pg.CreateSchedule(ctx, db, adminSchedule("s", "q", 5000), 10), errs.ErrScheduleExists)
	nobody := adminSchedule("u", "t", 3000)
	nobody.Body = nil
	noErr(t, "create on a topic", pg.CreateSchedule(ctx, db, nobody, 11))

	got, err := pg.GetSchedule(ctx, db, "s")
	noErr(t, "get", err)
	if got.Target != "q" || string(got.Body) != "tick" || got.NextAt != 5000 || got.CreatedAt != 10 ||
		got.UpdatedAt != 10 || got.Properties != `{"a":"b"}` || got.IntervalMS != 1000 {
		t.Fatalf("get = %+v", got)
	}
	if got, _ := pg.GetSchedule(ctx, db, "u"); got.Body == nil || len(got.Body) != 0 {
		t.Fatalf("an empty body reads %#v", got.Body)
	}
	_, err = pg.GetSchedule(ctx, db, "nope")
	wantErr(t, "get missing", err, errs.ErrScheduleNotFound)

	// Due, advance, next.
	next, err := pg.NextScheduleAt(ctx, db)
	noErr(t, "next", err)
	if next != 3000 {
		t.Fatalf("next = %d, want 3000", next)
	}
	due, err := pg.DueSchedules(ctx, db, 5000, 10)
	noErr(t, "due", err)
	if len(due) != 2 || due[0].Name != "u" || due[1].Name != "s" {
		t.Fatalf("due = %+v", due)
	}
	if due, _ := pg.DueSchedules(ctx, db, 4999, 10); len(due) != 1 {
		t.Fatalf("due before s's period: %d", len(due))
	}
	noErr(t, "advance", pg.AdvanceSchedule(ctx, db, "u", driver.Advance{NextAt: 8000, LastAt: 3000, Fired: 1, Skipped: 2, LastError: "e"}))
	noErr(t, "advance keeping last", pg.AdvanceSchedule(ctx, db, "u", driver.Advance{NextAt: 9000, Fired: 1}))
	if got, _ := pg.GetSchedule(ctx, db, "u"); got.NextAt != 9000 || got.LastAt != 3000 || got.Fired != 2 ||
		got.Skipped != 2 || got.LastError != "" {
		t.Fatalf("after advances: %+v", got)
	}
	if next, _ := pg.NextScheduleAt(ctx, db); next != 5000 {
		t.Fatalf("next = %d, want 5000", next)
	}

	// Update keeps the history and clears the error.
	noErr(t, "advance with error", pg.AdvanceSchedule(ctx, db, "u", driver.Advance{NextAt: 9000, LastError: "boom"}))
	up := adminSchedule("u", "q", 7000)
	up.Cron, up.IntervalMS, up.TimeZone = "* * * * *", 0, "Europe/Paris"
	noErr(t, "update", pg.UpdateSchedule(ctx, db, up, 20))
	if got, _ := pg.GetSchedule(ctx, db, "u"); got.Target != "q" || got.Cron != "* * * * *" || got.NextAt != 7000 ||
		got.Fired != 2 || got.LastAt != 3000 || got.LastError != "" || got.UpdatedAt != 20 || got.CreatedAt != 11 {
		t.Fatalf("after update: %+v", got)
	}
	wantErr(t, "update missing", pg.UpdateSchedule(ctx, db, adminSchedule("nope", "q", 1), 1), errs.ErrScheduleNotFound)
	wantErr(t, "update to no target", pg.UpdateSchedule(ctx, db, adminSchedule("u", "nope", 1), 1), errs.ErrQueueNotFound)

	// Pages: by count, by bytes (the first whatever its size).
	for _, n := range []string{"a", "b", "c"} {
		r := adminSchedule(n, "q", 1_000_000)
		r.Body = make([]byte, 100)
		noErr(t, "create "+n, pg.CreateSchedule(ctx, db, r, 1))
	}
	names := func(rs []driver.Schedule) (out []string) {
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return out
	}
	page, err := pg.ListSchedules(ctx, db, "", 2, 0)
	noErr(t, "page", err)
	if got := names(page); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("page = %v", got)
	}
	size := page[0].Size()
	page, err = pg.ListSchedules(ctx, db, "a", 10, size+size/2)
	noErr(t, "bounded page", err)
	if got := names(page); len(got) != 1 || got[0] != "b" {
		t.Fatalf("bounded page = %v", got)
	}
	page, err = pg.ListSchedules(ctx, db, "", 10, 1)
	noErr(t, "tiny page", err)
	if got := names(page); len(got) != 1 || got[0] != "a" {
		t.Fatalf("tiny page = %v", got)
	}
	page, err = pg.ListSchedules(ctx, db, "c", 10, 1<<20)
	noErr(t, "last page", err)
	if got := names(page); len(got) != 2 || got[0] != "s" || got[1] != "u" {
		t.Fatalf("last page = %v", got)
	}
	if page, err := pg.ListSchedules(ctx, db, "u", 10, 1<<20); err != nil || len(page) != 0 {
		t.Fatalf("past the end: %v, %v", page, err)
	}

	noErr(t, "delete", pg.DeleteSchedule(ctx, db, "s"))
	wantErr(t, "delete again", pg.DeleteSchedule(ctx, db, "s"), errs.ErrScheduleNotFound)
	for _, n := range []string{"a", "b", "c", "u"} {
		noErr(t, "delete "+n, pg.DeleteSchedule(ctx, db, n))
	}
	if next, err := pg.NextScheduleAt(ctx, db); err != nil || next != 0 {
		t.Fatalf("next with no schedule = %d, %v", next, err)
	}
}

func TestAdminCommits(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	_, found, err := pg.LookupCommit(ctx, db, "k1", "idem")
	if err != nil || found {
		t.Fatalf("lookup of nothing: %v, %v", found, err)
	}
	noErr(t, "record", pg.RecordCommit(ctx, db, "k1", "idem", driver.CommitRecord{Request: "r1", Result: []byte("a")}))
	rec, found, err := pg.LookupCommit(ctx, db, "k1", "idem")
	if err != nil || !found || rec.Request != "r1" || string(rec.Result) != "a" {
		t.Fatalf("lookup = %+v, %v, %v", rec, found, err)
	}
	if _, found, _ := pg.LookupCommit(ctx, db, "k2", "idem"); found {
		t.Fatal("a record of another scope was found")
	}
	// Expired: not found, and replaced by the next record.
	clock.ms.Add(driver.ReceiptTTLMS)
	if _, found, _ := pg.LookupCommit(ctx, db, "k1", "idem"); found {
		t.Fatal("an expired record was found")
	}
	noErr(t, "record other", pg.RecordCommit(ctx, db, "k1", "other", driver.CommitRecord{Request: "o"}))
	noErr(t, "record again", pg.RecordCommit(ctx, db, "k1", "idem", driver.CommitRecord{Request: "r2", Result: []byte("b")}))
	rec, found, _ = pg.LookupCommit(ctx, db, "k1", "idem")
	if !found || rec.Request != "r2" || string(rec.Result) != "b" {
		t.Fatalf("after replace: %+v, %v", rec, found)
	}
	// The replaced record is the newest: a trim to one keeps it.
	n, err := pg.TrimCommits(ctx, db, "k1", 1)
	if err != nil || n != 1 {
		t.Fatalf("trim = %d, %v", n, err)
	}
	if _, found, _ := pg.LookupCommit(ctx, db, "k1", "idem"); !found {
		t.Fatal("the trim dropped the newest record")
	}
	// The trim drops the expired records too.
	clock.ms.Add(1)
	noErr(t, "record 3", pg.RecordCommit(ctx, db, "k1", "3", driver.CommitRecord{Request: "3"}))
	clock.ms.Add(driver.ReceiptTTLMS - 1) // idem's record expires, 3's does not
	noErr(t, "record 4", pg.RecordCommit(ctx, db, "k1", "4", driver.CommitRecord{Request: "4"}))
	noErr(t, "record k2", pg.RecordCommit(ctx, db, "k2", "x", driver.CommitRecord{Request: "x"}))
	if n, err := pg.TrimCommits(ctx, db, "k1", 10); err != nil || n != 2 {
		t.Fatalf("trim of the expired = %d, %v; want 2", n, err)
	}
	if n, err := pg.TrimCommits(ctx, db, "k1", 0); err != nil || n != 0 {
		t.Fatalf("trim to 0 = %d, %v", n, err)
	}
	if n, _ := pg.TrimCommits(ctx, db, "k2", 5); n != 1 {
		t.Fatalf("another scope's record went: %d", n)
	}
}

func TestAdminDedup(t *testing.T) {
	db, clock := openTest(t)
	ctx := context.Background()
	now := clock.now()
	_, err := pg.LookupDedup(ctx, db, "nope", "k")
	wantErr(t, "lookup on no queue", err, errs.ErrQueueNotFound)
	noErr(t, "queue", pg.CreateQueue(ctx, db, adminQueue("q"), 1))
	e, err := pg.LookupDedup(ctx, db, "q", "k")
	if err != nil || e.Found || e.WindowMS != 60_000 || e.NowMS != now {
		t.Fatalf("lookup of nothing = %+v, %v", e, err)
	}
	live := putMessage(t, db, "q", "active")
	done := putMessage(t, db, "q", "completed")
	for key, seq := range map[string]int64{"live": live, "done": done, "gone": 999_999} {
		if _, err := db.Exec(`INSERT INTO mqlite_dedup (queue, kind, key, seq, expires_at) VALUES ('q', 'id', $1, $2, $3)`,
			key, seq, now+1000); err != nil {
			t.Fatal(err)
		}
	}
	// A content key of the same text is another kind: never found.
	if _, err := db.Exec(`INSERT INTO mqlite_dedup (queue, kind, key, seq, expires_at) VALUES ('q', 'body', 'k', $1, $2)`,
		live, now+1000); err != nil {
		t.Fatal(err)
	}
	if e, _ := pg.LookupDedup(ctx, db, "q", "k"); e.Found {
		t.Fatalf("a content key was found as a MessageID: %+v", e)
	}
	e, _ = pg.LookupDedup(ctx, db, "q", "live")
	if !e.Found || e.Seq != live || !e.Unfinished || e.Properties != `{"k":"v"}` {
		t.Fatalf("live = %+v", e)
	}
	e, _ = pg.LookupDedup(ctx, db, "q", "done")
	if !e.Found || e.Seq != done || e.Unfinished || e.Properties != "" {
		t.Fatalf("done = %+v", e)
	}
	e, _ = pg.LookupDedup(ctx, db, "q", "gone")
	if !e.Found || e.Seq != 999_999 || e.Unfinished {
		t.Fatalf("gone = %+v", e)
	}
	// Forget only drops the row that still points at seq.
	noErr(t, "forget other seq", pg.ForgetDedup(ctx, db, "q", "done", live))
	if e, _ := pg.LookupDedup(ctx, db, "q", "done"); !e.Found {
		t.Fatal("forget dropped a row of another seq")
	}
	noErr(t, "forget", pg.ForgetDedup(ctx, db, "q", "done", done))
	if e, _ := pg.LookupDedup(ctx, db, "q", "done"); e.Found {
		t.Fatal("forget left the row")
	}
	if n := count(t, db, `SELECT count(*) FROM mqlite_dedup WHERE kind = 'body'`); n != 1 {
		t.Fatalf("forget touched the content key: %d", n)
	}
	// Expired: not found.
	clock.ms.Add(1000)
	if e, _ := pg.LookupDedup(ctx, db, "q", "live"); e.Found {
		t.Fatalf("an expired row was found: %+v", e)
	}
}

// waitBlocked waits until a statement of db's database waits on a lock,
// and fails the test after ten seconds: the second process is then known
// to be inside the race, not before it.
func waitBlocked(t *testing.T, db *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := count(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`); n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the second process never waited on a lock")
}

func TestAdminTwoProcessesCreateOneName(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		first, then func(db driver.DBTX) error
		want        error
	}{
		{"queue then queue",
			func(db driver.DBTX) error { return pg.CreateQueue(ctx, db, adminQueue("x"), 1) },
			func(db driver.DBTX) error { return pg.CreateQueue(ctx, db, adminQueue("x"), 2) }, errs.ErrQueueExists},
		{"topic then queue",
			func(db driver.DBTX) error { return pg.CreateTopic(ctx, db, "x", 1) },
			func(db driver.DBTX) error { return pg.CreateQueue(ctx, db, adminQueue("x"), 2) }, errs.ErrQueueExists},
		{"queue then topic",
			func(db driver.DBTX) error { return pg.CreateQueue(ctx, db, adminQueue("x"), 1) },
			func(db driver.DBTX) error { return pg.CreateTopic(ctx, db, "x", 2) }, errs.ErrTopicExists},
		{"topic then topic",
			func(db driver.DBTX) error { return pg.CreateTopic(ctx, db, "x", 1) },
			func(db driver.DBTX) error { return pg.CreateTopic(ctx, db, "x", 2) }, errs.ErrTopicExists},
		{"subscription then queue",
			func(db driver.DBTX) error {
				return pg.CreateSubscription(ctx, db, "t", adminQueue("x"), driver.Filter{}, 1)
			},
			func(db driver.DBTX) error { return pg.CreateQueue(ctx, db, adminQueue("x"), 2) }, errs.ErrQueueExists},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, clock := openTest(t)
			twin := openTwin(t, db, clock)
			noErr(t, "topic t", pg.CreateTopic(ctx, db, "t", 0))
			tx1, err := db.BeginTx(ctx, nil)
			noErr(t, "begin", err)
			defer func() { _ = tx1.Rollback() }()
			noErr(t, "first", c.first(tx1))

			// The control: what the first wrote is not visible to the
			// other process yet, so a check of the name alone would pass.
			if n := count(t, twin, `SELECT (SELECT count(*) FROM mqlite_queues WHERE name = 'x') +
				(SELECT count(*) FROM mqlite_topics WHERE name = 'x')`); n != 0 {
				t.Fatalf("control: the uncommitted name is visible (%d)", n)
			}
			got := make(chan error, 1)
			go func() {
				tx2, err := twin.BeginTx(ctx, nil)
				if err != nil {
					got <- err
					return
				}
				err = c.then(tx2)
				got <- errors.Join(err, tx2.Rollback())
			}()
			waitBlocked(t, db)
			noErr(t, "commit first", tx1.Commit())
			err = <-got
			t.Logf("second process waited on the name, then: %v", err)
			wantErr(t, "second", err, c.want)
			if n := count(t, db, `SELECT (SELECT count(*) FROM mqlite_queues WHERE name = 'x') +
				(SELECT count(*) FROM mqlite_topics WHERE name = 'x')`); n != 1 {
				t.Fatalf("the name has %d rows", n)
			}
		})
	}
}

func TestAdminTwoProcessesRaceCreateQueue(t *testing.T) {
	// Many rounds of two processes creating one name at once, with no
	// order forced: each round has exactly one success.
	db, clock := openTest(t)
	twin := openTwin(t, db, clock)
	ctx := context.Background()
	for round := range 20 {
		name := "r" + string(rune('a'+round))
		errsOf := make([]error, 2)
		var wg sync.WaitGroup
		for i, h := range []*sql.DB{db, twin} {
			wg.Go(func() {
				if i == 0 {
					errsOf[i] = pg.CreateQueue(ctx, h, adminQueue(name), 1)
				} else {
					errsOf[i] = pg.CreateTopic(ctx, h, name, 1)
				}
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errsOf {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, errs.ErrQueueExists) && !errors.Is(err, errs.ErrTopicExists):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d successes (%v)", round, ok, errsOf)
		}
	}
}

// fireOnce is a firing transaction as the root's fireRound runs it, with
// the send written directly: the due schedules each enqueue one message
// per period and advance by one period.
func fireOnce(ctx context.Context, db *sql.DB, now int64) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	due, err := pg.DueSchedules(ctx, tx, now, 64)
	if err != nil {
		return 0, err
	}
	for _, r := range due {
		if _, err := tx.ExecContext(ctx, `INSERT INTO mqlite_messages (queue, body_len, enqueued_at, content_key, message_id)
			VALUES ($1, 0, $2, '\x00'::bytea, $3)`, r.Target, now, r.Name+"@"+time.UnixMilli(r.NextAt).UTC().Format(time.RFC3339Nano)); err != nil {
			return 0, err
		}
		if err := pg.AdvanceSchedule(ctx, tx, r.Name, driver.Advance{NextAt: r.NextAt + r.IntervalMS, LastAt: r.NextAt, Fired: 1}); err != nil {
			return 0, err
		}
	}
	if _, err := pg.NextScheduleAt(ctx, tx); err != nil {
		return 0, err
	}
	return len(due), tx.Commit()
}

func TestAdminTwoProcessesFireAPeriodOnce(t *testing.T) {
	db, clock := openTest(t)
	twin := openTwin(t, db, clock)
	ctx := context.Background()
	noErr(t, "queue", pg.CreateQueue(ctx, db, adminQueue("q"), 1))
	start := clock.now()
	noErr(t, "schedule", pg.CreateSchedule(ctx, db, adminSchedule("s", "q", start), 1))

	// One process holds the period; the other finds nothing due, and its
	// next period is not the held one (no spinning on it).
	tx1, err := db.BeginTx(ctx, nil)
	noErr(t, "begin", err)
	defer func() { _ = tx1.Rollback() }()
	due, err := pg.DueSchedules(ctx, tx1, start, 64)
	if err != nil || len(due) != 1 {
		t.Fatalf("first firing: %v, %v", due, err)
	}
	// The control: a plain read in the other process sees the period due,
	// so a firing without the lock would send it again.
	if n := count(t, twin, `SELECT count(*) FROM mqlite_schedules WHERE next_at <= $1`, start); n != 1 {
		t.Fatalf("control: the held period reads %d due", n)
	}
	tx2, err := twin.BeginTx(ctx, nil)
	noErr(t, "begin twin", err)
	defer func() { _ = tx2.Rollback() }()
	due2, err := pg.DueSchedules(ctx, tx2, start, 64)
	if err != nil || len(due2) != 0 {
		t.Fatalf("second firing while the first holds the period: %v, %v", due2, err)
	}
	if next, err := pg.NextScheduleAt(ctx, tx2); err != nil || next != 0 {
		t.Fatalf("next of the second while the first fires: %d, %v", next, err)
	}
	noErr(t, "rollback twin", tx2.Rollback())
	noErr(t, "advance", pg.AdvanceSchedule(ctx, tx1, "s", driver.Advance{NextAt: start + 1000, LastAt: start, Fired: 1}))
	// The firing itself sees its own schedule's next period.
	if next, err := pg.NextScheduleAt(ctx, tx1); err != nil || next != start+1000 {
		t.Fatalf("next of the firing = %d, %v; want %d", next, err, start+1000)
	}
	noErr(t, "commit", tx1.Commit())
	if next, err := pg.NextScheduleAt(ctx, twin); err != nil || next != start+1000 {
		t.Fatalf("next of the other after the commit = %d, %v; want %d", next, err, start+1000)
	}
	if due, _ := pg.DueSchedules(ctx, twin, start, 64); len(due) != 0 {
		t.Fatalf("the fired period is due again: %v", due)
	}

	// Then many periods fired by two processes at once, no order forced:
	// each period gives one message.
	const periods = 30
	for p := 1; p <= periods; p++ {
		now := start + int64(p)*1000
		fired := make([]int, 2)
		errsOf := make([]error, 2)
		var wg sync.WaitGroup
		for i, h := range []*sql.DB{db, twin} {
			wg.Go(func() { fired[i], errsOf[i] = fireOnce(ctx, h, now) })
		}
		wg.Wait()
		noErr(t, "fire", errors.Join(errsOf...))
		if fired[0]+fired[1] != 1 {
			t.Fatalf("period %d fired %d+%d times", p, fired[0], fired[1])
		}
	}
	if n := count(t, db, `SELECT count(*) FROM mqlite_messages WHERE queue = 'q'`); n != periods {
		t.Fatalf("%d messages for %d periods", n, periods)
	}
	if n := count(t, db, `SELECT count(DISTINCT message_id) FROM mqlite_messages WHERE queue = 'q'`); n != periods {
		t.Fatalf("%d distinct periods among the messages", n)
	}
	if got, _ := pg.GetSchedule(ctx, db, "s"); got.Fired != periods+1 {
		t.Fatalf("fired = %d, want %d", got.Fired, periods+1)
	}
}
