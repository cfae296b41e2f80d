package powerloss_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/powerloss/forgetfs"
)

// The store's own tables the checks read (the application's are orders).
const (
	tableMessages = "mqlite_messages"
	tableAttempts = "mqlite_receive_attempts"
)

const (
	plQueue = "pl"
	plMax   = 3 // MaxDeliveryCount
	plDB    = "mq.db"
)

func init() { workers["store"] = storeWorker }

func openOpts(full bool) mqlite.Config {
	sync := mqlite.SyncNormal
	if full {
		sync = mqlite.SyncFull
	}
	// Leases long enough that none lapses in a worker's life, and no
	// janitor: every receipt and attempt of a run stays to be replayed.
	return mqlite.Config{Sync: sync, JanitorInterval: -1, RetentionInterval: -1, TTLInterval: -1, ScheduleInterval: -1,
		Logger: slog.New(slog.DiscardHandler)}
}

// storeWorker runs business+outbox sends, receives with an AttemptID,
// handler transactions, settlements (complete, abandon, reject) and
// redrives, one at a time, and acknowledges each commit after it returned:
//
//	send <op> <nonce> <seq>            (one line per message of the transaction)
//	recv <op> <attempt> <max> <seq>:<token>:<count>...
//	handled <op> <seq>                 (the handler's business transaction)
//	settle <op> <kind> <seq> <token>   (kind: complete, abandon, reject)
//	redrive <op> <seq>
//
// Operations are numbered in commit order: the worker is one goroutine on
// the store's one connection.
func storeWorker(ctx context.Context, w workerEnv) error {
	rng := rand.New(rand.NewPCG(w.seed, uint64(w.cycle)))
	opts := openOpts(w.full)
	if os.Getenv(envStandby) == "1" {
		opts.WaitForLock = true
		say("waiting")
	}
	st, err := mqlite.Open(ctx, w.path, opts)
	if err != nil {
		return fmt.Errorf("open: %w", err) // before the cut: a stale lock, a refused file
	}
	defer st.Close()
	if err := st.CreateQueue(ctx, plQueue, mqlite.QueueOptions{MaxDeliveryCount: plMax, LockDuration: time.Hour}); err != nil &&
		!errors.Is(err, mqlite.ErrQueueExists) {
		return err
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		nonce TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, body_hash BLOB NOT NULL,
		handled INTEGER NOT NULL DEFAULT 0, last_op INTEGER NOT NULL DEFAULT 0) STRICT`); err != nil {
		return err
	}
	say("ready")
	var held []mqlite.Message
	var rejected []int64
	var tags groupTags
	for n := 1; ; n++ {
		op := w.cycle*1_000_000 + n
		switch p := rng.IntN(100); {
		case (p < 40 || (p >= 65 && len(held) == 0 && len(rejected) == 0)) && os.Getenv(envGrouped) == "1":
			if err := groupedSends(ctx, st, rng, op, &tags); err != nil {
				return err
			}
			n += groupedProducers - 1
		case p < 40 || (p >= 65 && len(held) == 0 && len(rejected) == 0):
			if err := workerSend(ctx, st, rng, op, nil); err != nil {
				return err
			}
		case p < 65 && len(held) < 30:
			attempt := fmt.Sprintf("a%d", op)
			max := 1 + rng.IntN(4)
			msgs, err := st.Receive(ctx, plQueue, mqlite.ReceiveOptions{Max: max, AttemptID: attempt})
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				continue
			}
			parts := make([]string, len(msgs))
			for i, m := range msgs {
				parts[i] = fmt.Sprintf("%d:%s:%d", m.Seq, m.LockToken, m.DeliveryCount)
			}
			say("recv %d %s %d %s", op, attempt, max, strings.Join(parts, " "))
			held = append(held, msgs...)
		case len(held) > 0 && p < 95:
			i := rng.IntN(len(held))
			m := held[i]
			held = slices.Delete(held, i, i+1)
			kind := "complete"
			switch q := rng.IntN(100); {
			case q < 10:
				kind = "abandon"
			case q < 18:
				kind = "reject"
			}
			if kind == "complete" {
				_, err := st.DB().ExecContext(ctx, `UPDATE orders SET handled = handled + 1, last_op = ? WHERE seq = ?`, op, m.Seq)
				if err != nil {
					return err
				}
				say("handled %d %d", op, m.Seq)
				n++
				op++
			}
			if err := settle(ctx, st, kind, m.Lock()); err != nil {
				return err
			}
			say("settle %d %s %d %s", op, kind, m.Seq, m.LockToken)
			if kind == "reject" {
				rejected = append(rejected, m.Seq)
			}
		case len(rejected) > 0:
			seq := rejected[0]
			rejected = rejected[1:]
			if _, err := st.Redrive(ctx, plQueue, mqlite.RedriveOptions{Seqs: []int64{seq}}); err != nil {
				return err
			}
			say("redrive %d %d", op, seq)
		}
	}
}

// workerSend sends one to four messages with their business rows in one
// Tx and acknowledges each after the Tx returned. tags, when not nil, tags
// the Tx with its group commit: the acknowledgements carry it as a fifth
// field.
func workerSend(ctx context.Context, st *mqlite.Store, rng *rand.Rand, op int, tags *groupTags) error {
	k := 1 + rng.IntN(4)
	msgs := make([]outbox.Message, k)
	nonces := make([]string, k)
	for i := range msgs {
		nonces[i] = fmt.Sprintf("n%d-%d", op, i)
		msgs[i] = outbox.Message{Body: []byte(nonces[i] + strings.Repeat("x", rng.IntN(300)))}
	}
	var seqs []int64
	tag := ""
	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
		if tags != nil {
			tag = " " + tags.of(tx.SQL())
		}
		res, err := outbox.SendBatch(tx.Context(), tx.SQL(), plQueue, msgs)
		if err != nil {
			return err
		}
		seqs = seqs[:0]
		for i, r := range res {
			if r.Err != nil {
				return r.Err
			}
			sum := sha256.Sum256(msgs[i].Body)
			if _, err := tx.SQL().ExecContext(tx.Context(),
				`INSERT INTO orders (nonce, seq, body_hash) VALUES (?, ?, ?)`, nonces[i], r.Seq, sum[:]); err != nil {
				return err
			}
			seqs = append(seqs, r.Seq)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, seq := range seqs {
		say("send %d %s %d%s", op, nonces[i], seq, tag)
	}
	return nil
}

// envGrouped, set to "1", has the store worker send from several
// producers at once, whose transactions share group commits.
const envGrouped = "MQLITE_POWERLOSS_GROUPED"

// groupedProducers is how many sends groupedSends runs at once.
const groupedProducers = 8

// groupedSends runs groupedProducers sends at once (workerSend, ops op to
// op+groupedProducers-1), each acknowledged after its own Tx returned:
// Store.Tx runs the ones that arrive together in one group commit, which
// tags tells apart.
func groupedSends(ctx context.Context, st *mqlite.Store, rng *rand.Rand, op int, tags *groupTags) error {
	errs := make([]error, groupedProducers)
	var wg sync.WaitGroup
	for i := range groupedProducers {
		prng := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
		wg.Go(func() { errs[i] = workerSend(ctx, st, prng, op+i, tags) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// groupTags names the group commit a callback of Store.Tx runs in, from
// outside the store: the callbacks of one group share its *sql.Tx and run
// one after the other, so a callback whose tx is not the one before it
// begins a new group. The last tx is kept, so its memory is not reused for
// the next group's while compared.
type groupTags struct {
	mu   sync.Mutex
	last *sql.Tx
	n    int
}

// of returns the tag of the group tx belongs to: "g<n>".
func (g *groupTags) of(tx *sql.Tx) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if tx != g.last {
		g.last, g.n = tx, g.n+1
	}
	return "g" + strconv.Itoa(g.n)
}

// settle runs one settlement of kind; the same call again is its retry.
func settle(ctx context.Context, st *mqlite.Store, kind string, l mqlite.Lock) error {
	switch kind {
	case "complete":
		return st.Complete(ctx, l)
	case "abandon":
		return st.Abandon(ctx, l, 0)
	default:
		return st.Reject(ctx, l, "power-reject", "")
	}
}

// ack is one acknowledged commit of a worker.
type ack struct {
	op     int
	kind   string // send, recv, handled, settle, redrive
	fields []string
}

// storeTally is what a scenario counts over its cuts.
type storeTally struct {
	cuts, acked, lost, maxLost, holes, integrityOK, gone, tableGone int
	dropped, torn, reordered                                        int // unsynced writes the cuts lost in whole or part; of them torn; kept writes put down out of order
	sidecars, orphans, replays, attempts, extraDeliveries           int
	groups, sharedGroups, maxCallers                                int // group commits of acknowledged sends (grouped): all, those of more than one caller, the most callers in one
	lostByCut                                                       []int
	ackedPerSec                                                     []float64
}

// TestPowerLoss cuts the power under a store at random moments, many
// times over one file, for each synchronous setting. After every cut the
// file as the cut left it passes integrity_check; Open recovers it at once
// (no stale lock); with FULL every acknowledged commit is there, with
// NORMAL what vanished is a suffix of the acknowledged commits, never a
// hole; a business row is never without its message nor a message without
// its row; every surviving settlement replays from its receipt and every
// surviving receive attempt replays without claiming anything new; no
// message is past MaxDeliveryCount. FULL runs three times: over a disk
// that keeps a prefix of the unsynced writes, over one that keeps any
// subset in any order (forgetfs.CutOptions.Reorder), and with the sends of
// eight producers at once, which Store.Tx runs in group commits (one fsync
// for a group).
//
// The controls, in the same run: the cuts dropped unsynced writes in every
// case, NORMAL lost acknowledged commits (a file system that stopped
// forgetting would make FULL's "none lost" prove nothing), and the
// reordering cuts put writes down out of order.
func TestPowerLoss(t *testing.T) {
	t.Parallel()
	for _, c := range []storeCase{
		{name: "full", full: true},
		{name: "normal"},
		{name: "full_reordered", full: true, reorder: true},
		{name: "full_grouped", full: true, grouped: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testPowerLoss(t, c)
		})
	}
}

// storeCase is one case of TestPowerLoss: the setting, and whether the
// cuts reorder unsynced writes.
type storeCase struct {
	name          string
	full, reorder bool
	grouped       bool // sends from eight producers at once, in group commits (envGrouped)
}

// testPowerLoss is one case of TestPowerLoss.
func testPowerLoss(t *testing.T, c storeCase) {
	name, full, reorder := c.name, c.full, c.reorder
	tally := runStoreCuts(t, c, cutsWanted(10))
	t.Logf("%s: %d cuts (%d unsynced writes dropped in whole or part, %d of them torn; %d kept writes put down out of order), %d acknowledged commits, %d lost (%d holes; %d cuts lost some, most in one cut %d, median of those %.0f), integrity ok %d times (%d times the cut took the whole file, %d times the run's table with all its commits), %d orphaned leases recovered, %d settlements replayed from receipts, %d receive attempts replayed, %d deliveries not counted after a lost claim, lock sidecar present after %d cuts, acknowledged commits per second over the mount: median %.0f",
		name, tally.cuts, tally.dropped, tally.torn, tally.reordered, tally.acked, tally.lost, tally.holes, len(lossy(tally.lostByCut)), tally.maxLost, median(lossy(tally.lostByCut)),
		tally.integrityOK, tally.gone, tally.tableGone, tally.orphans, tally.replays, tally.attempts, tally.extraDeliveries,
		tally.sidecars, median(tally.ackedPerSec))
	if full && tally.lost > 0 {
		t.Fatalf("synchronous=FULL lost %d acknowledged commits", tally.lost)
	}
	if c.grouped {
		// What the case is for: commits that several callers shared.
		t.Logf("%s: %d group commits of acknowledged sends, %d of more than one caller, at most %d callers in one",
			name, tally.groups, tally.sharedGroups, tally.maxCallers)
		if tally.sharedGroups == 0 {
			t.Fatalf("%s: none of %d group commits had more than one caller: the cuts never fell on a shared commit", name, tally.groups)
		}
	}
	// The controls.
	if tally.dropped == 0 {
		t.Fatalf("%s: %d cuts dropped no unsynced write: the file system forgets nothing", name, tally.cuts)
	}
	if !full && tally.lost == 0 {
		t.Fatalf("%s: %d cuts lost no acknowledged commit: the cuts take nothing a commit wrote, so FULL's none lost shows nothing", name, tally.cuts)
	}
	if reorder && tally.reordered == 0 {
		t.Fatalf("%s: %d cuts put no write down out of order", name, tally.cuts)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// runStoreCuts runs cuts cycles of: power on, a worker, a cut at a random
// operation, the checks. Under NORMAL, while no cut has lost an
// acknowledged commit, it goes on for up to four times as many: a cut
// that lands just after a checkpoint loses nothing, and the control needs
// one that lands before.
func runStoreCuts(t *testing.T, c storeCase, cuts int) storeTally {
	full := c.full
	seed, rng := seeded(t, 7)
	r := newRig(t)
	var tally storeTally
	sends := map[string]int64{} // every surviving acknowledged send: nonce -> seq
	for cycle := 1; cycle <= cuts || !full && tally.lost == 0 && cycle <= 4*cuts; cycle++ {
		r.powerOn()
		var env []string
		if c.grouped {
			env = append(env, envGrouped+"=1")
		}
		p := r.start("store", plDB, seed+uint64(cycle), cycle, full, env...)
		var acks []ack
		keep := func(f []string) {
			if len(f) >= 2 && f[0] != "stop" {
				n, _ := strconv.Atoi(f[1])
				acks = append(acks, ack{op: n, kind: f[0], fields: f})
			}
		}
		p.expect("ready", keep)
		opts := &forgetfs.CutOptions{Tear: rng.IntN(2) == 0, Reorder: c.reorder, Rand: rand.New(rand.NewPCG(seed, uint64(cycle)))}
		began := time.Now()
		r.fs.CutAfter(1+rng.IntN(1500), opts)
		r.waitCut(p)
		lifetime := time.Since(began)
		p.kill(keep)
		r.powerOff()
		tally.cuts++
		rep, err := r.fs.Result()
		if err != nil {
			t.Fatalf("cut %d: %v", cycle, err)
		}
		tally.dropped += rep.Writes + rep.Torn
		tally.torn += rep.Torn
		tally.reordered += rep.Reordered
		tally.acked += len(acks)
		tally.ackedPerSec = append(tally.ackedPerSec, float64(len(acks))/lifetime.Seconds())
		if _, err := os.Stat(r.onDisk(plDB + ".lock")); err == nil {
			tally.sidecars++
		}
		countGroups(acks, &tally)
		checkStoreCut(t, r, full, cycle, acks, sends, &tally)
	}
	return tally
}

// countGroups counts the group commits of one worker's acknowledged sends
// by their tags (groupTags), and how many callers (ops) each had.
func countGroups(acks []ack, tally *storeTally) {
	callers := map[string]map[string]bool{} // tag -> ops
	for _, a := range acks {
		if a.kind != "send" || len(a.fields) < 5 {
			continue
		}
		if callers[a.fields[4]] == nil {
			callers[a.fields[4]] = map[string]bool{}
		}
		callers[a.fields[4]][a.fields[1]] = true
	}
	for _, ops := range callers {
		tally.groups++
		if len(ops) > 1 {
			tally.sharedGroups++
		}
		tally.maxCallers = max(tally.maxCallers, len(ops))
	}
}

// checkStoreCut checks the file after one cut, with the power off (on the
// folder itself), then leaves it recovered for the next worker.
func checkStoreCut(t *testing.T, r *rig, full bool, cycle int, acks []ack, sends map[string]int64, tally *storeTally) {
	t.Helper()
	ctx := context.Background()
	path := r.onDisk(plDB)
	if !integrity(t, path) {
		// The file's name was never synced: the cut took it all.
		tally.gone++
		lostEverything(t, full, cycle, acks, sends, tally)
		return
	}
	tally.integrityOK++
	tally.orphans += rawCount(t, path, `SELECT count(*) FROM `+tableMessages+` WHERE state = 'locked'`)
	st, err := mqlite.Open(ctx, path, openOpts(full))
	if err != nil {
		t.Fatalf("cut %d: open after the cut: %v", cycle, err)
	}
	defer st.Close()
	db := st.DB()
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("cut %d: %s: %v", cycle, q, err)
		}
		return n
	}
	if count(`SELECT count(*) FROM sqlite_schema WHERE name = 'orders'`) == 0 {
		// The worker's first commits were lost with the table, and every
		// one after them: NORMAL allows it for a cut before the first
		// checkpoint, FULL does not. Never half a transaction: no message
		// stays without its business row.
		if n := count(`SELECT count(*) FROM ` + tableMessages); n != 0 {
			t.Fatalf("cut %d: the orders table is gone and %d messages are left", cycle, n)
		}
		tally.tableGone++
		lostEverything(t, full, cycle, acks, sends, tally)
		return
	}

	// Recovery: no lease survives Open, none is past the limit.
	if n := count(`SELECT count(*) FROM ` + tableMessages + ` WHERE state = 'locked'`); n != 0 {
		t.Fatalf("cut %d: %d leases survived recovery", cycle, n)
	}
	if n := count(`SELECT coalesce(max(delivery_count), 0) FROM ` + tableMessages); n > plMax {
		t.Fatalf("cut %d: a message was delivered %d times, max %d", cycle, n, plMax)
	}
	// The outbox: a message has its business row; a business row without
	// its message was handled and completed.
	if n := count(`SELECT count(*) FROM ` + tableMessages + ` m WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.seq = m.id)`); n != 0 {
		t.Fatalf("cut %d: %d messages without their business row", cycle, n)
	}
	if n := count(`SELECT count(*) FROM orders o WHERE o.handled = 0 AND NOT EXISTS (SELECT 1 FROM ` + tableMessages + ` m WHERE m.id = o.seq)`); n != 0 {
		t.Fatalf("cut %d: %d business rows without their message", cycle, n)
	}
	if n := count(`SELECT count(*) FROM orders o JOIN ` + tableMessages + ` m ON m.id = o.seq WHERE CAST(substr(m.body, 1, length(o.nonce)) AS TEXT) <> o.nonce`); n != 0 {
		t.Fatalf("cut %d: %d messages changed body", cycle, n)
	}

	// Which acknowledged commits survived: true, false, or unknown (a
	// redrive with later commits on its message).
	survived := make([]int, len(acks)) // 1 yes, -1 no, 0 unknown
	lastOn := map[int64]int{}          // seq -> index of the last ack on it
	for i, a := range acks {
		if seq, ok := ackSeq(a); ok {
			lastOn[seq] = i
		}
	}
	rejectSurvived := map[int64]bool{}
	for i, a := range acks {
		yes := false
		switch a.kind {
		case "send":
			yes = count(`SELECT count(*) FROM orders WHERE nonce = ?`, a.fields[2]) == 1
		case "recv":
			yes = count(`SELECT count(*) FROM `+tableAttempts+` WHERE attempt_id = ?`, a.fields[2]) == 1
		case "handled":
			yes = count(`SELECT count(*) FROM orders WHERE seq = ? AND last_op >= ?`, a.fields[2], a.op) == 1
		case "settle":
			seq, _ := strconv.ParseInt(a.fields[3], 10, 64)
			err := settle(ctx, st, a.fields[2], mqlite.Lock{Queue: plQueue, Seq: seq, Token: a.fields[4]})
			switch {
			case err == nil:
				yes = true
				tally.replays++
			case !errors.Is(err, mqlite.ErrLockLost):
				t.Fatalf("cut %d: retried %s of %d: %v", cycle, a.fields[2], seq, err)
			}
			if a.fields[2] == "reject" {
				rejectSurvived[seq] = yes
			}
		case "redrive":
			seq, _ := ackSeq(a)
			if lastOn[seq] != i || !rejectSurvived[seq] {
				continue // unknown: later commits changed the message, or it was never dead-lettered
			}
			yes = count(`SELECT count(*) FROM `+tableMessages+` WHERE id = ? AND state <> 'dead_lettered'`, seq) == 1
		}
		survived[i] = -1
		if yes {
			survived[i] = 1
		}
	}
	lost, firstLost, holes := 0, -1, 0
	for i, s := range survived {
		switch {
		case s < 0:
			lost++
			if firstLost < 0 {
				firstLost = i
			}
		case s > 0 && firstLost >= 0:
			holes++
			t.Errorf("cut %d: a hole: %v survived after %v was lost", cycle, acks[i].fields, acks[firstLost].fields)
		}
	}
	tally.lost += lost
	tally.holes += holes
	tally.lostByCut = append(tally.lostByCut, lost)
	tally.maxLost = max(tally.maxLost, lost)
	if full && lost > 0 {
		t.Fatalf("cut %d: synchronous=FULL lost %d acknowledged commits, the first %v", cycle, lost, acks[firstLost].fields)
	}
	if holes > 0 {
		t.FailNow()
	}

	// Receive attempts that survived replay: the same call hands out
	// nothing new (recovery released their leases, so nothing at all).
	for i, a := range acks {
		if a.kind != "recv" || survived[i] < 0 {
			continue
		}
		max, _ := strconv.Atoi(a.fields[3])
		msgs, err := st.Receive(ctx, plQueue, mqlite.ReceiveOptions{Max: max, AttemptID: a.fields[2]})
		if err != nil {
			t.Fatalf("cut %d: replay of attempt %s: %v", cycle, a.fields[2], err)
		}
		if len(msgs) != 0 {
			t.Fatalf("cut %d: replay of attempt %s after recovery handed out %d messages", cycle, a.fields[2], len(msgs))
		}
		tally.attempts++
	}
	if n := count(`SELECT count(*) FROM ` + tableMessages + ` WHERE state = 'locked'`); n != 0 {
		t.Fatalf("cut %d: replays claimed %d messages", cycle, n)
	}

	// The delivery bound: a surviving claim's count is kept; a claim the
	// cut took away (NORMAL) hands its delivery out again uncounted.
	for i, a := range acks {
		if a.kind != "recv" {
			continue
		}
		for _, part := range a.fields[4:] {
			var seq int64
			var token string
			var dc int
			if _, err := fmt.Sscanf(strings.ReplaceAll(part, ":", " "), "%d %s %d", &seq, &token, &dc); err != nil {
				t.Fatal(err)
			}
			if mayBeRedriven(acks[i+1:], seq) {
				continue
			}
			var now int
			err := db.QueryRowContext(ctx, `SELECT delivery_count FROM `+tableMessages+` WHERE id = ?`, seq).Scan(&now)
			if errors.Is(err, sql.ErrNoRows) {
				continue // completed
			}
			if err != nil {
				t.Fatal(err)
			}
			if now < dc {
				if survived[i] > 0 {
					t.Fatalf("cut %d: seq %d delivered %d times before the cut, counts %d after it", cycle, seq, dc, now)
				}
				tally.extraDeliveries += dc - now
			}
		}
	}

	// Every surviving acknowledged send, of this run and the ones before,
	// is there with its seq; the lost ones leave the record.
	for i, a := range acks {
		if a.kind == "send" && survived[i] > 0 {
			seq, _ := strconv.ParseInt(a.fields[3], 10, 64)
			sends[a.fields[2]] = seq
		}
	}
	for nonce, seq := range sends {
		if count(`SELECT count(*) FROM orders WHERE nonce = ? AND seq = ?`, nonce, seq) != 1 {
			t.Fatalf("cut %d: acknowledged send %s (seq %d) of an earlier run is missing", cycle, nonce, seq)
		}
	}
}

// lostEverything counts a cut that took every commit of its run (the file
// or the worker's table gone). Only NORMAL may lose acknowledged commits;
// an earlier run's sends were checkpointed by the checks after its cut, so
// no setting may lose them.
func lostEverything(t *testing.T, full bool, cycle int, acks []ack, sends map[string]int64, tally *storeTally) {
	t.Helper()
	if len(sends) > 0 {
		t.Fatalf("cut %d: the %d acknowledged sends of earlier runs are gone", cycle, len(sends))
	}
	if full && len(acks) > 0 {
		t.Fatalf("cut %d: synchronous=FULL lost all %d acknowledged commits, the first %v", cycle, len(acks), acks[0].fields)
	}
	tally.lost += len(acks)
	tally.lostByCut = append(tally.lostByCut, len(acks))
	tally.maxLost = max(tally.maxLost, len(acks))
}

// ackSeq is the message an ack is about, for handled, settle and redrive.
func ackSeq(a ack) (int64, bool) {
	var f string
	switch a.kind {
	case "handled", "redrive":
		f = a.fields[2]
	case "settle":
		f = a.fields[3]
	default:
		return 0, false
	}
	seq, err := strconv.ParseInt(f, 10, 64)
	return seq, err == nil
}

// mayBeRedriven tells whether acks redrive seq, which starts its count
// again, or reject it: the worker redrives what it rejected, and the
// redrive in flight at the cut may have committed (its fsync done) with
// the worker killed before it acknowledged it.
func mayBeRedriven(acks []ack, seq int64) bool {
	for _, a := range acks {
		if s, ok := ackSeq(a); ok && s == seq && (a.kind == "redrive" || a.kind == "settle" && a.fields[2] == "reject") {
			return true
		}
	}
	return false
}

// rawCount runs a count on the file with a plain connection, before mqlite
// opens it; 0 when the table is not there yet.
func rawCount(t *testing.T, path, q string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return 0
		}
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// lossy is the losses of the cuts that lost something.
func lossy(perCut []int) []float64 {
	var out []float64
	for _, n := range perCut {
		if n > 0 {
			out = append(out, float64(n))
		}
	}
	return out
}
