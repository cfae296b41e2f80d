package outbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

var _ outbox.Execer = (*sqlx.Tx)(nil)

// now is the fake clock's time in epoch milliseconds, as mqlite stores it.
var now = testdb.Start.UnixMilli()

// stored is one row of the messages table.
type stored struct {
	Queue, State          string
	Held                  bool
	VisibleAt, ExpiresAt  int64
	EnqueuedAt            int64
	MessageID, GroupID    sql.NullString
	Subject               sql.NullString
	Properties            map[string]string
	BodyHash, Body        []byte
	DeliveryCount, Locked int64
}

func readMessage(t *testing.T, q testdb.Querier, seq int64) stored {
	t.Helper()
	var m stored
	var props sql.NullString
	err := q.QueryRowContext(context.Background(), `SELECT queue, state, held, visible_at, expires_at,
		enqueued_at, message_id, group_id, subject, properties, content_key, body, delivery_count, locked_until
		FROM mqlite_messages WHERE id = ?`, seq).Scan(&m.Queue, &m.State, &m.Held, &m.VisibleAt, &m.ExpiresAt,
		&m.EnqueuedAt, &m.MessageID, &m.GroupID, &m.Subject, &props, &m.BodyHash, &m.Body,
		&m.DeliveryCount, &m.Locked)
	if err != nil {
		t.Fatalf("read message %d: %v", seq, err)
	}
	if props.Valid {
		if err := json.Unmarshal([]byte(props.String), &m.Properties); err != nil {
			t.Fatalf("message %d properties %q: %v", seq, props.String, err)
		}
	}
	return m
}

func equalStored(a, b stored) bool {
	return a.Queue == b.Queue && a.State == b.State && a.Held == b.Held &&
		a.VisibleAt == b.VisibleAt && a.ExpiresAt == b.ExpiresAt && a.EnqueuedAt == b.EnqueuedAt &&
		a.MessageID == b.MessageID && a.GroupID == b.GroupID && a.Subject == b.Subject &&
		maps.Equal(a.Properties, b.Properties) && bytes.Equal(a.BodyHash, b.BodyHash) &&
		bytes.Equal(a.Body, b.Body) && a.DeliveryCount == b.DeliveryCount && a.Locked == b.Locked
}

// hashOf is the content key of body: the first 16 bytes of its SHA-256.
func hashOf(body string) []byte {
	sum := sha256.Sum256([]byte(body))
	return sum[:16]
}

func some(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

// counts returns the number of rows in messages and in dedup.
func counts(t *testing.T, q testdb.Querier) [2]int64 {
	t.Helper()
	return [2]int64{
		testdb.Int(t, q, `SELECT count(*) FROM mqlite_messages`),
		testdb.Int(t, q, `SELECT count(*) FROM mqlite_dedup`),
	}
}

// inTx runs fn in a Store.Tx and fails the test if it returns an error.
func inTx(t *testing.T, st *mqlite.Store, fn func(ctx context.Context, tx *sql.Tx) error) {
	t.Helper()
	if err := st.Tx(context.Background(), func(tx *mqlite.Tx) error { return fn(tx.Context(), tx.SQL()) }); err != nil {
		t.Fatalf("tx: %v", err)
	}
}

// sendOne commits msg on queue in its own transaction and returns its seq.
func sendOne(t *testing.T, st *mqlite.Store, queue string, msg outbox.Message) int64 {
	t.Helper()
	var seq int64
	inTx(t, st, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		seq, err = outbox.SendOne(ctx, tx, queue, msg)
		return err
	})
	return seq
}

// sendBatch commits msgs on queue in one transaction.
func sendBatch(t *testing.T, st *mqlite.Store, queue string, msgs []outbox.Message) []outbox.Result {
	t.Helper()
	var res []outbox.Result
	inTx(t, st, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		res, err = outbox.SendBatch(ctx, tx, queue, msgs)
		return err
	})
	if len(res) != len(msgs) {
		t.Fatalf("SendBatch returned %d results for %d messages", len(res), len(msgs))
	}
	return res
}

func TestSendCommitKeepsEveryField(t *testing.T) {
	t.Parallel()
	hour := time.Hour.Milliseconds()
	props := map[string]string{"trace": "abc", "k": "v"}
	tests := []struct {
		name    string
		queue   mqlite.QueueOptions
		msg     outbox.Message
		want    stored
		wantKey string // "": no dedup row
	}{
		{
			name: "every field, scheduled",
			msg: outbox.Message{Body: []byte("hello"), MessageID: "m-1", GroupID: "g", Subject: "order.placed",
				Properties: props, DeliverAt: testdb.Start.Add(time.Hour), TTL: 2 * time.Hour},
			want: stored{State: "scheduled", VisibleAt: now + hour, ExpiresAt: now + 2*hour,
				MessageID: some("m-1"), GroupID: some("g"), Subject: some("order.placed"),
				Properties: props, BodyHash: hashOf("hello"), Body: []byte("hello")},
			wantKey: "m-1",
		},
		{
			name: "body only: no dedup key",
			msg:  outbox.Message{Body: []byte("plain")},
			want: stored{State: "active", VisibleAt: now, BodyHash: hashOf("plain"), Body: []byte("plain")},
		},
		{
			name:    "body only, on a queue that deduplicates bodies",
			queue:   mqlite.QueueOptions{DedupByBody: true},
			msg:     outbox.Message{Body: []byte("plain")},
			want:    stored{State: "active", VisibleAt: now, BodyHash: hashOf("plain"), Body: []byte("plain")},
			wantKey: string(hashOf("plain")), // a BLOB: no MessageID can equal it
		},
		{
			name:    "nil body",
			msg:     outbox.Message{MessageID: "empty"},
			want:    stored{State: "active", VisibleAt: now, MessageID: some("empty"), BodyHash: hashOf("")},
			wantKey: "empty",
		},
		{
			name:    "DeliverAt in the past is now",
			msg:     outbox.Message{Body: []byte("b"), MessageID: "past", DeliverAt: testdb.Start.Add(-time.Hour)},
			want:    stored{State: "active", VisibleAt: now, MessageID: some("past"), BodyHash: hashOf("b"), Body: []byte("b")},
			wantKey: "past",
		},
		{
			name:    "DeliverAt now is active",
			msg:     outbox.Message{Body: []byte("b"), MessageID: "now", DeliverAt: testdb.Start},
			want:    stored{State: "active", VisibleAt: now, MessageID: some("now"), BodyHash: hashOf("b"), Body: []byte("b")},
			wantKey: "now",
		},
		{
			name:    "queue DefaultTTL when TTL is 0",
			queue:   mqlite.QueueOptions{DefaultTTL: 30 * time.Minute},
			msg:     outbox.Message{Body: []byte("b"), MessageID: "ttl"},
			want:    stored{State: "active", VisibleAt: now, ExpiresAt: now + hour/2, MessageID: some("ttl"), BodyHash: hashOf("b"), Body: []byte("b")},
			wantKey: "ttl",
		},
		{
			name:    "TTL wins over DefaultTTL",
			queue:   mqlite.QueueOptions{DefaultTTL: 30 * time.Minute},
			msg:     outbox.Message{Body: []byte("b"), MessageID: "ttl", TTL: 5 * time.Minute},
			want:    stored{State: "active", VisibleAt: now, ExpiresAt: now + hour/12, MessageID: some("ttl"), BodyHash: hashOf("b"), Body: []byte("b")},
			wantKey: "ttl",
		},
		{
			name:    "FIFO message without GroupID joins the default group",
			queue:   mqlite.QueueOptions{Ordering: mqlite.FIFO},
			msg:     outbox.Message{Body: []byte("b"), MessageID: "fifo"},
			want:    stored{State: "active", VisibleAt: now, MessageID: some("fifo"), GroupID: some(""), BodyHash: hashOf("b"), Body: []byte("b")},
			wantKey: "fifo",
		},
	}
	for _, tc := range tests {
		for _, batch := range []bool{false, true} {
			name := tc.name + "/SendOne"
			if batch {
				name = tc.name + "/SendBatch"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := testdb.Open(t, mqlite.Config{})
				b.Queue(t, "q", tc.queue)
				var seq int64
				if batch {
					// A second slot sends the batch down the prepared-statement path.
					res := sendBatch(t, b.Store, "q", []outbox.Message{tc.msg, {Body: []byte("filler")}})
					if res[0].Err != nil || res[1].Err != nil || res[0].Duplicate {
						t.Fatalf("SendBatch results %+v", res)
					}
					seq = res[0].Seq
				} else {
					seq = sendOne(t, b.Store, "q", tc.msg)
				}
				if seq != 1 {
					t.Fatalf("seq = %d, want 1 on a fresh file", seq)
				}
				want := tc.want
				want.Queue, want.EnqueuedAt = "q", now
				if got := readMessage(t, b.Store.DB(), seq); !equalStored(got, want) {
					t.Fatalf("stored message\n got %+v\nwant %+v", got, want)
				}

				var key string
				var dseq, expires int64
				var dhash []byte
				var keyType string
				err := b.Store.DB().QueryRow(`SELECT key, typeof(key), seq, coalesce(content_key, key), expires_at FROM mqlite_dedup WHERE queue = 'q' AND seq = ?`, seq).
					Scan(&key, &keyType, &dseq, &dhash, &expires)
				if tc.wantKey == "" {
					if !errors.Is(err, sql.ErrNoRows) {
						t.Fatalf("dedup row of a message without a key: %v, want none", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("dedup row: %v", err)
				}
				if wantType := map[bool]string{true: "text", false: "blob"}[tc.msg.MessageID != ""]; keyType != wantType {
					t.Fatalf("dedup key stored as %s, want %s", keyType, wantType)
				}
				if key != tc.wantKey || !bytes.Equal(dhash, want.BodyHash) || expires != now+mqlite.DefaultDedupWindow.Milliseconds() {
					t.Fatalf("dedup row key %q hash %x expires %d, want key %q hash %x expires %d",
						key, dhash, expires, tc.wantKey, want.BodyHash, now+mqlite.DefaultDedupWindow.Milliseconds())
				}
			})
		}
	}
}

func TestSendHoldsLaterGroupMembers(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "std", mqlite.QueueOptions{})
	b.Queue(t, "fifo", mqlite.QueueOptions{Ordering: mqlite.FIFO})
	tests := []struct {
		queue, group string
		wantHeld     bool
	}{
		{"std", "g1", false},
		{"std", "g1", true},
		{"std", "g2", false},
		{"std", "", false},
		{"std", "", false},
		{"fifo", "", false},
		{"fifo", "", true},
		{"fifo", "g1", false}, // groups are per queue
	}
	for i, tc := range tests {
		seq := sendOne(t, b.Store, tc.queue, outbox.Message{Body: []byte{byte(i)}, GroupID: tc.group})
		if got := readMessage(t, b.Store.DB(), seq).Held; got != tc.wantHeld {
			t.Errorf("message %d (queue %s, group %q): held = %v, want %v", i, tc.queue, tc.group, got, tc.wantHeld)
		}
	}
}

func TestSendRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	msgs := []outbox.Message{{Body: []byte("a"), MessageID: "a"}, {Body: []byte("b")}}
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	st := b.Store

	err := st.Tx(context.Background(), func(tx *mqlite.Tx) error {
		if _, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", msgs[0]); err != nil {
			return err
		}
		if _, err := outbox.SendBatch(tx.Context(), tx.SQL(), "q", msgs); err != nil {
			return err
		}
		if got := counts(t, tx.SQL()); got != [2]int64{2, 1} {
			t.Errorf("inside the transaction: %v rows, want 2 messages and 1 dedup row (b has no MessageID)", got)
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Tx: %v", err)
	}
	if got := counts(t, st.DB()); got != [2]int64{} {
		t.Fatalf("after rollback: %v messages/dedup rows, want none", got)
	}

	// A caller's own *sql.Tx rolls back the same way.
	tx, err := st.DB().Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.SendOne(context.Background(), tx, "q", msgs[0]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := counts(t, st.DB()); got != [2]int64{} {
		t.Fatalf("after rollback of a *sql.Tx: %v, want none", got)
	}

	// No dedup row survived: the same id is a new message, not a replay.
	if seq := sendOne(t, st, "q", msgs[0]); seq == 0 {
		t.Fatal("no seq")
	}
	if got := counts(t, st.DB()); got != [2]int64{1, 1} {
		t.Fatalf("after a fresh send: %v, want 1 message and 1 dedup row", got)
	}
}

func TestDedupReplay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msg  outbox.Message
	}{
		{"MessageID", outbox.Message{Body: []byte("body"), MessageID: "id-1"}},
		{"body hash without MessageID", outbox.Message{Body: []byte("body")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testdb.Open(t, mqlite.Config{})
			b.Queue(t, "q", mqlite.QueueOptions{DedupByBody: tc.msg.MessageID == ""})
			st := b.Store
			first := sendOne(t, st, "q", tc.msg)

			// Replayed in a later transaction, in the same one, and in a batch.
			if seq := sendOne(t, st, "q", tc.msg); seq != first {
				t.Fatalf("replay returned seq %d, want the original %d", seq, first)
			}
			inTx(t, st, func(ctx context.Context, tx *sql.Tx) error {
				for range 2 {
					if seq, err := outbox.SendOne(ctx, tx, "q", tc.msg); err != nil || seq != first {
						t.Fatalf("replay in one tx: seq %d, %v; want %d", seq, err, first)
					}
				}
				return nil
			})
			res := sendBatch(t, st, "q", []outbox.Message{tc.msg, tc.msg})
			for i, r := range res {
				if r.Seq != first || !r.Duplicate || r.Err != nil {
					t.Fatalf("batch slot %d: %+v, want the original seq %d as a duplicate", i, r, first)
				}
			}
			b.Clock.Advance(mqlite.DefaultDedupWindow - time.Millisecond)
			if seq := sendOne(t, st, "q", tc.msg); seq != first {
				t.Fatalf("replay at the window's last millisecond returned seq %d, want %d", seq, first)
			}
			if got := counts(t, st.DB()); got != [2]int64{1, 1} {
				t.Fatalf("replays inserted rows: %v, want 1 message and 1 dedup row", got)
			}
		})
	}
}

func TestDedupDifferentBodyWithoutIDIsNew(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{DedupByBody: true})
	a := sendOne(t, b.Store, "q", outbox.Message{Body: []byte("a")})
	c := sendOne(t, b.Store, "q", outbox.Message{Body: []byte("c")})
	if a == c {
		t.Fatalf("two bodies got the same seq %d", a)
	}
}

func TestDedupIsPerQueue(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q1", mqlite.QueueOptions{})
	b.Queue(t, "q2", mqlite.QueueOptions{})
	msg := outbox.Message{Body: []byte("x"), MessageID: "same"}
	if s1, s2 := sendOne(t, b.Store, "q1", msg), sendOne(t, b.Store, "q2", msg); s1 == s2 {
		t.Fatalf("the same id on two queues got one seq %d", s1)
	}
}

func TestDedupConflict(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	st := b.Store
	orig := sendOne(t, st, "q", outbox.Message{Body: []byte("original"), MessageID: "id"})

	var other int64
	inTx(t, st, func(ctx context.Context, tx *sql.Tx) error {
		seq, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("changed"), MessageID: "id"})
		if !errors.Is(err, mqlite.ErrDuplicateConflict) || seq != 0 {
			t.Fatalf("same id, other body: seq %d, %v; want 0 and ErrDuplicateConflict", seq, err)
		}
		// The transaction is still usable.
		other, err = outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("next"), MessageID: "id-2"})
		return err
	})
	if other == 0 || other == orig {
		t.Fatalf("send after the conflict: seq %d", other)
	}
	if got := readMessage(t, st.DB(), orig); string(got.Body) != "original" {
		t.Fatalf("the original message changed: body %q", got.Body)
	}
	if got := counts(t, st.DB()); got != [2]int64{2, 2} {
		t.Fatalf("%v rows, want 2 messages and 2 dedup rows", got)
	}
}

func TestDedupWindowPasses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		second outbox.Message
	}{
		{"same body", outbox.Message{Body: []byte("x"), MessageID: "id"}},
		{"other body is no conflict", outbox.Message{Body: []byte("y"), MessageID: "id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testdb.Open(t, mqlite.Config{})
			b.Queue(t, "q", mqlite.QueueOptions{DedupWindow: time.Minute})
			first := sendOne(t, b.Store, "q", outbox.Message{Body: []byte("x"), MessageID: "id"})
			b.Clock.Advance(time.Minute)
			second := sendOne(t, b.Store, "q", tc.second)
			if second == first {
				t.Fatalf("after the window the same id returned the original seq %d", first)
			}
			// The dedup row now points at the new message, for a new window.
			if got := testdb.Int(t, b.Store.DB(), `SELECT seq FROM mqlite_dedup WHERE key = 'id'`); got != second {
				t.Fatalf("dedup row points at %d, want %d", got, second)
			}
			if seq := sendOne(t, b.Store, "q", tc.second); seq != second {
				t.Fatalf("replay of the new message: %d, want %d", seq, second)
			}
		})
	}
}

func TestDedupDisabled(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{DedupWindow: -1})
	msgs := []outbox.Message{
		{Body: []byte("x"), MessageID: "id"},
		{Body: []byte("x"), MessageID: "id"},
		{Body: []byte("other"), MessageID: "id"},
		{Body: []byte("x")},
	}
	seen := map[int64]bool{}
	for _, m := range msgs {
		seen[sendOne(t, b.Store, "q", m)] = true
	}
	for _, r := range sendBatch(t, b.Store, "q", msgs) {
		if r.Err != nil || r.Duplicate {
			t.Fatalf("batch slot %+v with dedup off", r)
		}
		seen[r.Seq] = true
	}
	if len(seen) != 2*len(msgs) {
		t.Fatalf("%d distinct seqs for %d sends", len(seen), 2*len(msgs))
	}
	if got := counts(t, b.Store.DB()); got != [2]int64{int64(2 * len(msgs)), 0} {
		t.Fatalf("%v rows, want %d messages and no dedup rows", got, 2*len(msgs))
	}
}

func TestSendBatchConflictingSlot(t *testing.T) {
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	st := b.Store
	orig := sendOne(t, st, "q", outbox.Message{Body: []byte("X"), MessageID: "a"})

	res := sendBatch(t, st, "q", []outbox.Message{
		{Body: []byte("b"), MessageID: "b"},
		{Body: []byte("Y"), MessageID: "a"}, // conflict with the committed "a"
		{Body: []byte("c"), MessageID: "c"},
		{Body: []byte("X"), MessageID: "a"}, // replay of the committed "a"
		{Body: []byte("d1"), MessageID: "d"},
		{Body: []byte("d2"), MessageID: "d"}, // conflict inside the batch
		{Body: []byte("d1"), MessageID: "d"}, // replay inside the batch
	})
	for _, i := range []int{1, 5} {
		if res[i].Seq != 0 || !errors.Is(res[i].Err, mqlite.ErrDuplicateConflict) {
			t.Errorf("slot %d: %+v, want seq 0 and ErrDuplicateConflict", i, res[i])
		}
	}
	for _, i := range []int{0, 2, 4} {
		if res[i].Seq <= orig || res[i].Err != nil || res[i].Duplicate {
			t.Errorf("slot %d: %+v, want a new seq", i, res[i])
		}
	}
	if !(res[0].Seq < res[2].Seq && res[2].Seq < res[4].Seq) {
		t.Errorf("new seqs not in slot order: %d %d %d", res[0].Seq, res[2].Seq, res[4].Seq)
	}
	if res[3].Seq != orig || !res[3].Duplicate {
		t.Errorf("slot 3: %+v, want the original seq %d as a duplicate", res[3], orig)
	}
	if res[6].Seq != res[4].Seq || !res[6].Duplicate {
		t.Errorf("slot 6: %+v, want slot 4's seq %d as a duplicate", res[6], res[4].Seq)
	}
	for i, id := range map[int]string{0: "b", 2: "c", 4: "d"} {
		if got := readMessage(t, st.DB(), res[i].Seq); got.MessageID.String != id {
			t.Errorf("slot %d committed message id %q, want %q", i, got.MessageID.String, id)
		}
	}
	if got := counts(t, st.DB()); got != [2]int64{4, 4} {
		t.Fatalf("%v rows, want 4 messages and 4 dedup rows", got)
	}
}

func TestSendBadInput(t *testing.T) {
	t.Parallel()
	good := outbox.Message{Body: []byte("good")}
	huge := outbox.Message{Body: make([]byte, 10<<20)}
	tests := []struct {
		name string
		send func(ctx context.Context, tx *sql.Tx) error
		want error
	}{
		{"empty queue name", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "", good)
			return err
		}, mqlite.ErrInvalidQueueName},
		{"empty queue name, batch", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendBatch(ctx, tx, "", []outbox.Message{good})
			return err
		}, mqlite.ErrInvalidQueueName},
		{"10 MiB body", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", huge)
			return err
		}, mqlite.ErrMessageTooLarge},
		{"10 MiB body after a good slot", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendBatch(ctx, tx, "q", []outbox.Message{good, huge})
			return err
		}, mqlite.ErrMessageTooLarge},
		{"negative TTL", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), TTL: -time.Second})
			return err
		}, mqlite.ErrInvalidTTL},
		{"TTL under a millisecond", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), TTL: time.Microsecond})
			return err
		}, mqlite.ErrInvalidTTL},
		{"TTL over MaxTTL", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), TTL: mqlite.MaxTTL + time.Hour})
			return err
		}, mqlite.ErrInvalidTTL},
		{"negative TTL after a good slot", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendBatch(ctx, tx, "q", []outbox.Message{good, {Body: []byte("x"), TTL: -1}})
			return err
		}, mqlite.ErrInvalidTTL},
		{"MessageID too long", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), MessageID: strings.Repeat("i", mqlite.MaxMessageIDLen+1)})
			return err
		}, mqlite.ErrInvalidMessage},
		{"GroupID not UTF-8", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), GroupID: "\xff"})
			return err
		}, mqlite.ErrInvalidMessage},
		{"GroupID too long", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), GroupID: strings.Repeat("g", mqlite.MaxGroupIDLen+1)})
			return err
		}, mqlite.ErrInvalidMessage},
		{"Subject too long", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"), Subject: strings.Repeat("s", mqlite.MaxSubjectLen+1)})
			return err
		}, mqlite.ErrInvalidMessage},
		{"Properties too large", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"),
				Properties: map[string]string{"k": strings.Repeat("v", mqlite.MaxPropertiesBytes)}})
			return err
		}, mqlite.ErrInvalidMessage},
		{"property value not UTF-8", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x"),
				Properties: map[string]string{"a": "\xff", "b": "ok"}})
			return err
		}, mqlite.ErrInvalidMessage},
		{"property key not UTF-8", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendBatch(ctx, tx, "q", []outbox.Message{good, {Body: []byte("x"),
				Properties: map[string]string{"\xfe": "v", "\xff": "v"}}})
			return err
		}, mqlite.ErrInvalidMessage},
		{"metadata pushes the message over the limit", func(ctx context.Context, tx *sql.Tx) error {
			body := make([]byte, mqlite.DefaultMaxMessageBytes-10)
			_, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: body, Subject: strings.Repeat("s", 20)})
			return err
		}, mqlite.ErrMessageTooLarge},
		{"unknown queue", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendOne(ctx, tx, "missing", good)
			return err
		}, mqlite.ErrQueueNotFound},
		{"unknown queue, batch", func(ctx context.Context, tx *sql.Tx) error {
			_, err := outbox.SendBatch(ctx, tx, "missing", []outbox.Message{good, good})
			return err
		}, mqlite.ErrQueueNotFound},
		{"nil *sql.Tx", func(ctx context.Context, _ *sql.Tx) error {
			_, err := outbox.SendOne(ctx, (*sql.Tx)(nil), "q", good)
			return err
		}, mqlite.ErrNilTx},
		{"nil Execer", func(ctx context.Context, _ *sql.Tx) error {
			_, err := outbox.SendBatch(ctx, nil, "q", []outbox.Message{good})
			return err
		}, mqlite.ErrNilTx},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := testdb.Open(t, mqlite.Config{})
			b.Queue(t, "q", mqlite.QueueOptions{})
			st := b.Store
			sendOne(t, st, "q", outbox.Message{Body: []byte("already there"), MessageID: "there"})
			before := counts(t, st.DB())

			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if err := tc.send(ctx, tx); !errors.Is(err, tc.want) {
				t.Fatalf("send: %v, want %v", err, tc.want)
			}
			if got := counts(t, tx); got != before {
				t.Fatalf("the refused send wrote rows: %v, before %v", got, before)
			}
			// The transaction is still usable and commits what follows.
			if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("after"), MessageID: "after"}); err != nil {
				t.Fatalf("send after the refused one: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("commit: %v", err)
			}
			if got, want := counts(t, st.DB()), [2]int64{before[0] + 1, before[1] + 1}; got != want {
				t.Fatalf("after commit: %v rows, want %v", got, want)
			}
		})
	}
}

func TestSendNotAStore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// prepare returns the path of a file to open with plain database/sql.
		prepare   func(t *testing.T) string
		hasSchema bool
	}{
		{"plain SQLite file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "plain.db") }, false},
		{"mqlite file opened without mqlite", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "mq.db")
			st, err := mqlite.Open(context.Background(), path, mqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CreateQueue(context.Background(), "q", mqlite.QueueOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			return path
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, err := sql.Open("sqlite", tc.prepare(t))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TABLE biz (id INTEGER PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			tables := func() int64 { return testdb.Int(t, db, `SELECT count(*) FROM sqlite_schema`) }
			schemaBefore := tables()

			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			for _, send := range []func() error{
				func() error { _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("x")}); return err },
				func() error {
					_, err := outbox.SendBatch(ctx, tx, "q", []outbox.Message{{Body: []byte("x")}, {Body: []byte("y")}})
					return err
				},
			} {
				if err := send(); !errors.Is(err, mqlite.ErrNotAStore) {
					t.Fatalf("send on a foreign transaction: %v, want ErrNotAStore", err)
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO biz DEFAULT VALUES`); err != nil {
				t.Fatalf("the transaction is not usable after the refusal: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := tables(); got != schemaBefore {
				t.Fatalf("the refused send changed the schema: %d objects, before %d", got, schemaBefore)
			}
			if tc.hasSchema {
				if got := counts(t, db); got != [2]int64{} {
					t.Fatalf("the refused send wrote %v rows", got)
				}
			}
		})
	}
}

func TestSendWithSQLXAndConn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testdb.Open(t, mqlite.Config{})
	b.Queue(t, "q", mqlite.QueueOptions{})
	st := b.Store
	if _, err := st.DB().Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	// sqlx wraps the store's *sql.DB; closing it would close the store's.
	xdb := sqlx.NewDb(st.DB(), "sqlite")
	tx, err := xdb.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx.MustExecContext(ctx, `INSERT INTO orders (item) VALUES (?)`, "book")
	if _, err := outbox.SendOne(ctx, tx, "q", outbox.Message{Body: []byte("via *sqlx.Tx")}); err != nil {
		t.Fatalf("SendOne(*sqlx.Tx): %v", err)
	}
	if _, err := outbox.SendOne(ctx, tx.Tx, "q", outbox.Message{Body: []byte("via tx.Tx")}); err != nil {
		t.Fatalf("SendOne(tx.Tx): %v", err)
	}
	if _, err := outbox.SendBatch(ctx, tx, "q", []outbox.Message{{Body: []byte("b1")}, {Body: []byte("b2")}}); err != nil {
		t.Fatalf("SendBatch(*sqlx.Tx): %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	// A *sql.Conn sends outside any transaction: each call commits on its own.
	conn, err := st.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.SendOne(ctx, conn, "q", outbox.Message{Body: []byte("via conn")}); err != nil {
		t.Fatalf("SendOne(*sql.Conn): %v", err)
	}
	if _, err := outbox.SendBatch(ctx, conn, "q", []outbox.Message{{Body: []byte("c1")}, {Body: []byte("c2")}}); err != nil {
		t.Fatalf("SendBatch(*sql.Conn): %v", err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}

	var bodies []string
	if err := xdb.SelectContext(ctx, &bodies, `SELECT CAST(body AS TEXT) FROM mqlite_messages ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	want := "via *sqlx.Tx,via tx.Tx,b1,b2,via conn,c1,c2"
	if got := strings.Join(bodies, ","); got != want {
		t.Fatalf("messages %s, want %s", got, want)
	}
	if n := testdb.Int(t, st.DB(), `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

// TestOversizeRefusedBeforeItIsTouched: a message over the limit is refused
// before it is hashed, copied or bound: the refusal allocates a small part of
// the body's size. Not parallel: it reads the process's allocation counter.
func TestOversizeRefusedBeforeItIsTouched(t *testing.T) {
	b := testdb.Open(t, mqlite.Config{MaxMessageBytes: mqlite.MaxMessageBytesLimit})
	b.Queue(t, "q", mqlite.QueueOptions{})
	body := make([]byte, mqlite.MaxMessageBytesLimit+1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := outbox.Send(context.Background(), b.Store, "q", outbox.Message{Body: body})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, mqlite.ErrMessageTooLarge) {
		t.Fatalf("send: %v, want ErrMessageTooLarge", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(len(body))/8 {
		t.Fatalf("refusing a %d-byte body allocated %d bytes", len(body), got)
	}
}
