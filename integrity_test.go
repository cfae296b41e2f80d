package mqlite_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// The integrity sweep: a randomized workload against one store on a fake
// clock, checked step by step against a model of the rules.
//
// Producers send in business transactions (an orders row per message, in
// the same transaction) that sometimes roll back. Consumers receive in
// batches and complete, abandon (with and without delay), reject, defer
// (and later ReceiveDeferred), or hold a delivery until its lease lapses;
// dead letters are sometimes redriven.
// The clock moves by small steps and sometimes past every lease; sweeps run
// at random moments; the store is closed and reopened at random points
// (recovery). Every delivery is checked: the message was committed, its
// body is unchanged (SHA-256), its delivery count is exactly the model's
// and never above MaxDeliveryCount, nobody else holds it, and no earlier
// message of its group is still live. At the end every committed message is
// completed or dead-lettered exactly as the model says (with the model's
// reason), no rolled-back message ever appeared, and the orders table
// matches the committed messages one for one.
//
// MQLITE_INTEGRITY_SEED replays a run; MQLITE_INTEGRITY_MESSAGES sets its
// size (by default 50,000; 10,000 under -race; 5,000 with -short). make
// crash runs 50,000 under -race.

const (
	integrityQueue  = "work"
	integrityMax    = 3
	integrityLease  = 30 * time.Second
	integrityGroups = 40
	rejectReason    = "integrity-reject"
)

type imsg struct {
	seq        int64
	nonce      string
	hash       [sha256.Size]byte
	group      string
	deliveries int
	status     string // "live", "completed", "dead"
	reason     string // for dead
	deferred   bool
}

type iheld struct {
	msg   mqlite.Message
	until time.Time
}

type integrity struct {
	t      *testing.T
	rng    *rand.Rand
	clock  *testdb.Clock
	path   string
	st     *mqlite.Store
	ctx    context.Context
	nonce  int
	sent   int
	msgs   map[int64]*imsg
	rolled map[string]bool // nonces of rolled-back messages
	groups map[string][]int64
	held   map[int64]iheld
	defers map[int64]bool // live deferred messages
	dead   []int64        // dead-lettered seqs, some since redriven
	live   int            // committed messages neither completed nor dead
	stale  []mqlite.Lock  // deliveries whose lease lapsed unsettled
	stats  map[string]int
}

// integrityShards is how many independent stores run the workload side by
// side, each with its share of the messages and its own seed: the SQL runs
// on one connection per store, so shards are what lets the sweep use more
// than one core (under -race it is CPU-bound in SQLite).
const integrityShards = 4

func TestIntegritySweep(t *testing.T) {
	t.Parallel()
	n := 50_000
	switch {
	case testing.Short():
		n = 5_000
	case raceEnabled:
		// SQLite is Go code here, so the race detector instruments all of
		// it: 50,000 messages take minutes on two cores. make crash (CI)
		// runs the full size under -race through MQLITE_INTEGRITY_MESSAGES.
		n = 10_000
	}
	if v := os.Getenv("MQLITE_INTEGRITY_MESSAGES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MQLITE_INTEGRITY_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (replay with MQLITE_INTEGRITY_SEED=%d), %d messages in %d shards", seed, seed, n, integrityShards)
	for i := range integrityShards {
		t.Run(fmt.Sprintf("shard%d", i), func(t *testing.T) {
			t.Parallel()
			runIntegrity(t, (n+integrityShards-1)/integrityShards, seed+uint64(i))
		})
	}
}

// runIntegrity runs the workload for at least n committed messages on a
// fresh store.
func runIntegrity(t *testing.T, n int, seed uint64) {
	start := time.Now()
	w := &integrity{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), clock: testdb.NewClock(),
		path: filepath.Join(t.TempDir(), "mq.db"), ctx: context.Background(),
		msgs: map[int64]*imsg{}, rolled: map[string]bool{}, groups: map[string][]int64{},
		held: map[int64]iheld{}, defers: map[int64]bool{}, stats: map[string]int{},
	}
	w.open()
	t.Cleanup(func() { _ = w.st.Close() })
	if err := w.st.CreateQueue(w.ctx, integrityQueue, mqlite.QueueOptions{
		MaxDeliveryCount: integrityMax, LockDuration: integrityLease,
		DLQ: mqlite.DLQRetention{MaxAge: -1, MaxCount: -1, MaxBytes: -1},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.DB().Exec(`CREATE TABLE orders (nonce TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, body_hash BLOB NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}

	for w.sent < n {
		w.step()
	}
	w.drain()
	w.verifyFinal()
	t.Logf("seed %d: %d messages committed, %d rolled back; %v; %.1fs", seed, len(w.msgs), len(w.rolled), w.stats, time.Since(start).Seconds())
}

func (w *integrity) open() {
	w.t.Helper()
	st, err := mqlite.Open(w.ctx, w.path, mqlite.Config{
		Clock: w.clock, ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		w.t.Fatalf("open: %v", err)
	}
	w.st = st
}

// step runs one random operation.
func (w *integrity) step() {
	w.advance(time.Duration(w.rng.IntN(200)) * time.Millisecond)
	switch p := w.rng.IntN(1000); {
	case p < 380:
		w.send()
	case p < 800:
		w.receive(1 + w.rng.IntN(64))
	case p < 860:
		w.settleHeld()
	case p < 900:
		w.receiveDeferred()
	case p < 930:
		w.advance(integrityLease) // every lease running now lapses
	case p < 960:
		w.staleSettle()
	case p < 975:
		w.redrive()
	case p < 995:
		if _, err := mqlite.RunSweeps(w.ctx, w.st); err != nil {
			w.t.Fatalf("sweeps: %v", err)
		}
		w.stats["sweeps"]++
	default:
		w.reopen()
	}
}

// advance moves the clock and lapses, in the model, the leases it ends.
func (w *integrity) advance(d time.Duration) {
	w.clock.Advance(d)
	now := w.clock.Now()
	for seq, h := range w.held {
		if !now.Before(h.until) {
			w.lapse(seq)
		}
	}
}

// lapse ends a delivery nobody settled: the rule of the reaper and of
// recovery.
func (w *integrity) lapse(seq int64) {
	m := w.msgs[seq]
	w.stale = append(w.stale, w.held[seq].msg.Lock())
	delete(w.held, seq)
	if m.deliveries >= integrityMax {
		w.finish(m, "dead", mqlite.ReasonMaxDelivery)
	}
	w.stats["lapsed"]++
}

func (w *integrity) send() {
	k := 1 + w.rng.IntN(48)
	rollback := w.rng.IntN(10) == 0
	batch := make([]outbox.Message, k)
	meta := make([]*imsg, k)
	for i := range batch {
		w.nonce++
		nonce := fmt.Sprintf("n%07d", w.nonce)
		pad := make([]byte, w.rng.IntN(300))
		for j := range pad {
			pad[j] = byte('a' + w.rng.IntN(26))
		}
		b := []byte(nonce + ":" + string(pad))
		m := &imsg{nonce: nonce, hash: sha256.Sum256(b), status: "live"}
		if w.rng.IntN(5) == 0 {
			m.group = fmt.Sprintf("g%d", w.rng.IntN(integrityGroups))
		}
		batch[i] = outbox.Message{Body: b, GroupID: m.group}
		if w.rng.IntN(20) == 0 {
			batch[i].DeliverAt = w.clock.Now().Add(time.Duration(1+w.rng.IntN(5000)) * time.Millisecond)
		}
		meta[i] = m
	}
	errRollback := errors.New("business rule says no")
	err := w.st.Tx(w.ctx, func(tx *mqlite.Tx) error {
		res, err := outbox.SendBatch(tx.Context(), tx.SQL(), integrityQueue, batch)
		if err != nil {
			return err
		}
		for i, r := range res {
			if r.Err != nil || r.Duplicate {
				return fmt.Errorf("slot %d: %+v", i, r)
			}
			meta[i].seq = r.Seq
			if _, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO orders (nonce, seq, body_hash) VALUES (?, ?, ?)`,
				meta[i].nonce, r.Seq, meta[i].hash[:]); err != nil {
				return err
			}
		}
		if rollback {
			return errRollback
		}
		return nil
	})
	switch {
	case rollback && errors.Is(err, errRollback):
		for _, m := range meta {
			w.rolled[m.nonce] = true
		}
		w.stats["rollbacks"]++
	case err != nil:
		w.t.Fatalf("send: %v", err)
	default:
		for _, m := range meta {
			if _, dup := w.msgs[m.seq]; dup {
				w.t.Fatalf("seq %d committed twice", m.seq)
			}
			w.msgs[m.seq] = m
			w.live++
			if m.group != "" {
				w.groups[m.group] = append(w.groups[m.group], m.seq)
			}
		}
		w.sent += k
	}
}

// check verifies one delivery against the model and records it.
func (w *integrity) check(got mqlite.Message, deferred bool) *imsg {
	w.t.Helper()
	hash := sha256.Sum256(got.Body)
	nonce, _, _ := bytesCut(got.Body)
	if w.rolled[nonce] {
		w.t.Fatalf("seq %d: message %s of a rolled-back transaction delivered", got.Seq, nonce)
	}
	m, ok := w.msgs[got.Seq]
	if !ok {
		w.t.Fatalf("delivered seq %d (%s) was never committed", got.Seq, nonce)
	}
	switch {
	case hash != m.hash:
		w.t.Fatalf("seq %d: body changed", got.Seq)
	case m.status != "live":
		w.t.Fatalf("seq %d delivered while %s (%s)", got.Seq, m.status, m.reason)
	case m.deferred != deferred:
		w.t.Fatalf("seq %d: deferred %v in the model, delivered by the other path", got.Seq, m.deferred)
	case got.DeliveryCount != m.deliveries+1:
		w.t.Fatalf("seq %d: delivery count %d, the model counts %d before this one", got.Seq, got.DeliveryCount, m.deliveries)
	case got.DeliveryCount > integrityMax:
		w.t.Fatalf("seq %d delivered %d times, max %d", got.Seq, got.DeliveryCount, integrityMax)
	}
	if _, ok := w.held[got.Seq]; ok {
		w.t.Fatalf("seq %d delivered while another delivery holds it", got.Seq)
	}
	// ReceiveDeferred asks for one message by its sequence number: it is
	// not held back by the group's order (a redrive can have put an earlier
	// member back since the deferred one was handed out).
	if m.group != "" && !deferred {
		for _, s := range w.groups[m.group] {
			if s >= got.Seq {
				break
			}
			if st := w.msgs[s].status; st == "live" {
				w.t.Fatalf("seq %d of group %s delivered while earlier seq %d is live", got.Seq, m.group, s)
			}
		}
	}
	m.deliveries++
	m.deferred = false
	delete(w.defers, got.Seq)
	w.held[got.Seq] = iheld{msg: got, until: got.LockedUntil}
	if !got.LockedUntil.Equal(w.clock.Now().Add(integrityLease)) {
		w.t.Fatalf("seq %d: lease until %v, want now+%v", got.Seq, got.LockedUntil, integrityLease)
	}
	w.stats["deliveries"]++
	return m
}

func bytesCut(b []byte) (string, string, bool) {
	for i, c := range b {
		if c == ':' {
			return string(b[:i]), string(b[i+1:]), true
		}
	}
	return string(b), "", false
}

func (w *integrity) receive(max int) int {
	msgs, err := w.st.Receive(w.ctx, integrityQueue, mqlite.ReceiveOptions{Max: max})
	if err != nil {
		w.t.Fatalf("receive: %v", err)
	}
	var complete []mqlite.Message
	for _, got := range msgs {
		w.check(got, false)
		switch p := w.rng.IntN(100); {
		case p < 62:
			complete = append(complete, got)
		case p < 80:
			// hold: settled later, or its lease lapses
		default:
			w.settleOne(got)
		}
	}
	w.completeBatch(complete)
	return len(msgs)
}

// settleOne abandons, rejects or defers a delivery whose lease runs.
func (w *integrity) settleOne(got mqlite.Message) {
	m := w.msgs[got.Seq]
	var err error
	switch p := w.rng.IntN(100); {
	case p < 45:
		delay := time.Duration(0)
		if w.rng.IntN(2) == 0 {
			delay = time.Duration(1+w.rng.IntN(3000)) * time.Millisecond
		}
		if err = w.st.Abandon(w.ctx, got.Lock(), delay); err == nil && m.deliveries >= integrityMax {
			w.finish(m, "dead", mqlite.ReasonMaxDelivery)
		}
		w.stats["abandons"]++
	case p < 60:
		if err = w.st.Reject(w.ctx, got.Lock(), rejectReason, "checked by the sweep"); err == nil {
			w.finish(m, "dead", rejectReason)
		}
		w.stats["rejects"]++
	case m.deliveries < integrityMax:
		// A message deferred on its last allowed delivery is dead-lettered
		// by ReceiveDeferred (the conformance kit's DeliveryBound/DeferredOnLastDelivery);
		// the model here defers only below the limit.
		if err = w.st.Defer(w.ctx, got.Lock()); err == nil {
			m.deferred = true
			w.defers[m.seq] = true
		}
		w.stats["defers"]++
	default:
		err = w.st.Complete(w.ctx, got.Lock())
		if err == nil {
			w.finish(m, "completed", "")
		}
		w.stats["completes"]++
	}
	if err != nil {
		w.t.Fatalf("settle seq %d (lease until %v, now %v): %v", got.Seq, got.LockedUntil, w.clock.Now(), err)
	}
	delete(w.held, got.Seq)
}

func (w *integrity) completeBatch(msgs []mqlite.Message) {
	if len(msgs) == 0 {
		return
	}
	locks := make([]mqlite.Lock, len(msgs))
	for i, m := range msgs {
		locks[i] = m.Lock()
	}
	res, err := w.st.CompleteBatch(w.ctx, locks)
	if err != nil {
		w.t.Fatalf("complete batch: %v", err)
	}
	for i, e := range res {
		if e != nil {
			w.t.Fatalf("complete seq %d: %v", locks[i].Seq, e)
		}
		w.finish(w.msgs[locks[i].Seq], "completed", "")
		delete(w.held, locks[i].Seq)
	}
	w.stats["completes"] += len(msgs)
}

// settleHeld settles some held deliveries whose lease still runs.
func (w *integrity) settleHeld() {
	seqs := w.heldSeqs()
	for _, seq := range seqs[:min(len(seqs), 1+w.rng.IntN(16))] {
		w.settleOne(w.held[seq].msg)
	}
}

func (w *integrity) heldSeqs() []int64 {
	seqs := make([]int64, 0, len(w.held))
	for seq := range w.held {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs) // map order is random; the run must replay from its seed
	w.rng.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })
	return seqs
}

func (w *integrity) deferredSeqs() []int64 {
	seqs := make([]int64, 0, len(w.defers))
	for seq := range w.defers {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	return seqs
}

// finish records the end of a committed message: completed or dead.
func (w *integrity) finish(m *imsg, status, reason string) {
	if m.status != "live" {
		w.t.Fatalf("seq %d finished twice (%s, then %s)", m.seq, m.status, status)
	}
	m.status, m.reason = status, reason
	w.live--
	if status == "dead" {
		w.dead = append(w.dead, m.seq)
	}
}

// redrive brings a few dead letters back: active, count reset, and (for
// grouped ones) back in their group's order, which check then enforces.
func (w *integrity) redrive() {
	var seqs []int64
	for range 1 + w.rng.IntN(5) {
		if len(w.dead) == 0 {
			break
		}
		i := w.rng.IntN(len(w.dead))
		seq := w.dead[i]
		w.dead = slices.Delete(w.dead, i, i+1)
		if w.msgs[seq].status == "dead" && !slices.Contains(seqs, seq) {
			seqs = append(seqs, seq)
		}
	}
	if len(seqs) == 0 {
		return
	}
	n, err := w.st.Redrive(w.ctx, integrityQueue, mqlite.RedriveOptions{Seqs: seqs})
	if err != nil || n != len(seqs) {
		for _, seq := range seqs {
			var state string
			var count int64
			qerr := w.st.DB().QueryRowContext(w.ctx, `SELECT state, delivery_count FROM mqlite_messages WHERE id = ?`, seq).Scan(&state, &count)
			w.t.Logf("seq %d: file says %s after %d deliveries (%v); model %+v", seq, state, count, qerr, *w.msgs[seq])
		}
		w.t.Fatalf("redrive %v: %d %v", seqs, n, err)
	}
	for _, seq := range seqs {
		m := w.msgs[seq]
		m.status, m.reason, m.deliveries = "live", "", 0
		w.live++
	}
	w.stats["redriven"] += n
}

// receiveDeferred claims one deferred message by seq.
func (w *integrity) receiveDeferred() {
	seqs := w.deferredSeqs()
	if len(seqs) == 0 {
		return
	}
	seq := seqs[w.rng.IntN(len(seqs))]
	got, err := w.st.ReceiveDeferred(w.ctx, integrityQueue, seq)
	if err != nil {
		w.t.Fatalf("receive deferred %d: %v", seq, err)
	}
	w.check(got, true)
	w.stats["deferred-receives"]++
	if w.rng.IntN(3) > 0 {
		w.completeBatch([]mqlite.Message{got})
	}
}

// staleSettle presents a lapsed delivery's lock: always ErrLockLost.
func (w *integrity) staleSettle() {
	if len(w.stale) == 0 {
		return
	}
	i := w.rng.IntN(len(w.stale))
	l := w.stale[i]
	w.stale = slices.Delete(w.stale, i, i+1)
	if err := w.st.Complete(w.ctx, l); !errors.Is(err, mqlite.ErrLockLost) {
		w.t.Fatalf("complete with the lapsed lock of seq %d: %v, want ErrLockLost", l.Seq, err)
	}
	w.stats["stale-settles"]++
}

// reopen closes the store with deliveries in flight and opens it again:
// recovery releases them with the reaper's rule.
func (w *integrity) reopen() {
	if err := w.st.Close(); err != nil {
		w.t.Fatalf("close: %v", err)
	}
	for _, seq := range w.heldSeqs() {
		w.lapse(seq)
	}
	w.open()
	w.stats["reopens"]++
}

// drain consumes what is left: everything live ends completed or, by the
// rules, dead-lettered.
func (w *integrity) drain() {
	for round := 0; ; round++ {
		if round > 100_000 {
			w.t.Fatal("drain does not finish")
		}
		if w.rng.IntN(50) == 0 {
			w.reopen()
		}
		if w.receive(64) > 0 {
			continue
		}
		for _, seq := range w.heldSeqs() {
			w.settleOne(w.held[seq].msg)
		}
		for _, seq := range w.deferredSeqs() {
			got, err := w.st.ReceiveDeferred(w.ctx, integrityQueue, seq)
			if err != nil {
				w.t.Fatalf("drain deferred %d: %v", seq, err)
			}
			w.check(got, true)
			w.completeBatch([]mqlite.Message{got})
		}
		if w.live == 0 {
			return
		}
		w.advance(integrityLease) // schedules fall due, leases lapse
	}
}

func (w *integrity) verifyFinal() {
	t := w.t
	if _, err := mqlite.RunSweeps(w.ctx, w.st); err != nil {
		t.Fatal(err)
	}
	if live, err := w.st.Peek(w.ctx, integrityQueue, mqlite.PeekParams{Max: 1000}); err != nil || len(live) != 0 {
		t.Fatalf("after the drain %d messages are live (%v)", len(live), err)
	}
	dead := map[int64]mqlite.Message{}
	for from := int64(0); ; {
		page, err := w.st.PeekDeadLetters(w.ctx, integrityQueue, mqlite.PeekParams{FromSeq: from, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			dead[m.Seq] = m
		}
		if len(page) < 1000 {
			break
		}
		from = page[len(page)-1].Seq + 1
	}
	counts := map[string]int{}
	for seq, m := range w.msgs {
		counts[m.status]++
		d, isDead := dead[seq]
		switch m.status {
		case "completed":
			if isDead {
				t.Errorf("seq %d completed, yet dead-lettered (%s)", seq, d.DeadLetterReason)
			}
		case "dead":
			if !isDead {
				t.Errorf("seq %d should be dead-lettered (%s), it is gone", seq, m.reason)
				continue
			}
			if d.DeadLetterReason != m.reason || d.DeliveryCount != m.deliveries || sha256.Sum256(d.Body) != m.hash {
				t.Errorf("seq %d dead letter: reason %q count %d, want %q and %d (body intact: %v)", seq,
					d.DeadLetterReason, d.DeliveryCount, m.reason, m.deliveries, sha256.Sum256(d.Body) == m.hash)
			}
		default:
			t.Errorf("seq %d ends %s", seq, m.status)
		}
	}
	if len(dead) != counts["dead"] {
		t.Errorf("%d dead letters in the store, the model has %d", len(dead), counts["dead"])
	}
	// Business rows and messages agree one for one.
	rows, err := w.st.DB().Query(`SELECT nonce, seq, body_hash FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	orders := 0
	for rows.Next() {
		var nonce string
		var seq int64
		var hash []byte
		if err := rows.Scan(&nonce, &seq, &hash); err != nil {
			t.Fatal(err)
		}
		orders++
		m, ok := w.msgs[seq]
		if !ok || m.nonce != nonce || string(hash) != string(m.hash[:]) {
			t.Errorf("order %s (seq %d) has no committed message to match (rolled back: %v)", nonce, seq, w.rolled[nonce])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if orders != len(w.msgs) {
		t.Errorf("%d orders for %d committed messages", orders, len(w.msgs))
	}
	w.stats["completed"], w.stats["dead"] = counts["completed"], counts["dead"]
}
