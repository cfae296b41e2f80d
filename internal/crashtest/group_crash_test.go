//go:build crash_injection

package crashtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The group commit crash test: a worker runs eight producers at once, each
// calling Store.Tx in a loop with one to four business rows and their
// messages, so that their transactions run together in group commits; some
// callers fail on purpose (an error, a panic), and each acknowledges its
// rows only after Tx returned nil. The harness SIGKILLs it at a random
// moment or inside a step (other callers of the group have run theirs, or
// wait), reopens the file and checks it: every acknowledged caller's rows
// are there (checkAfterCrash), no caller's rows are half there, and no
// failed caller's rows are there at all. The control worker acknowledges
// each caller when its callback returns, before the group's commit: a kill
// inside a later caller's step then leaves acknowledged rows missing.

const (
	groupWorker        = "TestCrashGroupWorker"
	groupProducers     = 8
	groupKills         = 16
	groupControlKills  = 4
	envGroupControl    = "MQLITE_CRASH_GROUP_CONTROL" // "1": acknowledge before the commit
	inGroupStep        = "in-group-step"              // a caller's rows written, its step not ended
	groupCall          = "group-call"                 // a caller begins: a point no harness arms
	groupFailedPrefix  = "gf:"                        // the nonces of callers that fail on purpose
	groupNonceOf       = "of"                         // a nonce ends "<i>of<k>": row i of k
	groupStepFailError = "step fails on purpose"
)

// TestCrashGroupWorker is the worker process of the group commit crash
// test; it does nothing unless the harness started it.
func TestCrashGroupWorker(t *testing.T) {
	st, rng, seed := startWorker(t, 40)
	defer st.Close()
	ctx := context.Background()
	err := st.CreateQueue(ctx, crashQueue, mqlite.QueueOptions{MaxDeliveryCount: crashMax, LockDuration: crashLease})
	if err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
		t.Fatalf("worker queue: %v", err)
	}
	if _, err := st.DB().Exec(ordersDDLOf(workerTarget)); err != nil {
		t.Fatalf("worker table: %v", err)
	}
	control := os.Getenv(envGroupControl) == "1"
	var sayMu sync.Mutex
	say := func(format string, args ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		fmt.Fprintf(os.Stdout, linePrefix+format+"\n", args...)
	}
	say("ready")
	var wg sync.WaitGroup
	for p := range groupProducers {
		prng := rand.New(rand.NewPCG(seed, uint64(p)+rng.Uint64()))
		wg.Go(func() {
			stop := time.Now().Add(time.Minute) // a safety net; the harness kills long before
			for n := 0; time.Now().Before(stop); n++ {
				groupSend(t, st, prng, fmt.Sprintf("g%d-%d-%d", seed, p, n), control, say)
			}
		})
	}
	wg.Wait()
}

// groupSend is one caller of Store.Tx: k orders and their messages, ending
// as drawn (commit, error, panic), acknowledged after Tx returned nil, or,
// for the control, as soon as the callback returns.
func groupSend(t *testing.T, st *mqlite.Store, rng *rand.Rand, caller string, control bool, say func(string, ...any)) {
	maybeCrash(groupCall) // never armed: the passes that tell an unreached inGroupStep
	k := 1 + rng.IntN(4)
	fail := rng.IntN(6) // 0: an error, 1: a panic, otherwise commit
	prefix := caller
	if fail < 2 {
		prefix = groupFailedPrefix + caller
	}
	nonces := make([]string, k)
	msgs := make([]outbox.Message, k)
	for i := range msgs {
		nonces[i] = fmt.Sprintf("%s-%d%s%d", prefix, i, groupNonceOf, k)
		msgs[i] = outbox.Message{Body: []byte(nonces[i] + strings.Repeat("x", rng.IntN(200)))}
	}
	var seqs []int64
	ack := func() {
		for i, seq := range seqs {
			say("ack %d %s", seq, nonces[i])
		}
	}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil && p != groupStepFailError {
				panic(p)
			} else if p != nil {
				err = errors.New(groupStepFailError)
			}
		}()
		return st.Tx(context.Background(), func(tx *mqlite.Tx) error {
			var err error
			if seqs, err = sendOrders(tx, msgs, nonces); err != nil {
				return err
			}
			maybeCrash(inGroupStep)
			switch fail {
			case 0:
				return errors.New(groupStepFailError)
			case 1:
				panic(groupStepFailError)
			}
			if control {
				ack() // wrongly: the group has not committed yet
			}
			return nil
		})
	}()
	if fail < 2 {
		if err == nil || err.Error() != groupStepFailError {
			t.Errorf("worker: failing caller got %v", err)
		}
		return
	}
	if err != nil {
		t.Errorf("worker send: %v", err)
		return
	}
	if !control {
		ack()
	}
}

// groupRun is what a series of kills of the group worker found.
type groupRun struct {
	kills, acked, missing int
	points                map[string]int // kills per point
}

// runGroupKills kills the group worker kills times on one file and checks
// the file after each kill; for the control, missing acknowledged commits
// are counted instead of failing the test.
func runGroupKills(t *testing.T, kills int, control bool) groupRun {
	path := filepath.Join(t.TempDir(), "mq.db")
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	if control {
		t.Setenv(envGroupControl, "1")
	}
	var r groupRun
	r.points = map[string]int{}
	acked := map[string]int64{}
	for r.kills < kills {
		point := inGroupStep
		if !control {
			point = pointOf(r.kills, []string{inGroupStep})
		}
		lines := runAndKill(t, groupWorker, path, seed+uint64(r.kills), point, time.Duration(5+rng.IntN(300))*time.Millisecond)
		r.kills++
		r.points[point]++
		for _, l := range lines {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "ack" {
				seq, _ := strconv.ParseInt(f[1], 10, 64)
				acked[f[2]] = seq
			}
		}
		if control {
			r.missing += forgetMissing(t, path, acked)
			continue
		}
		checkAfterCrash(t, path, acked, r.kills)
		checkWholeCallers(t, path, r.kills)
	}
	r.acked = len(acked)
	return r
}

// TestCrashGroupCommit is the harness of the group commit crash test.
func TestCrashGroupCommit(t *testing.T) {
	r := runGroupKills(t, groupKills, false)
	t.Logf("group commit: %d SIGKILLs (%d at random moments, %d inside a caller's step), %d acknowledged rows all present, no caller half there, no failed caller's row",
		r.kills, r.points[randomMoment], r.points[inGroupStep], r.acked)
	checkPoints(t, r.points, []string{inGroupStep})
}

// TestCrashGroupCommitControl shows the check can fail: a caller
// acknowledged before the group's commit loses its rows to a kill inside a
// later caller's step.
func TestCrashGroupCommitControl(t *testing.T) {
	r := runGroupKills(t, groupControlKills, true)
	t.Logf("control, acknowledged before the commit: %d kills, %d of %d acknowledged rows missing", r.kills, r.missing, r.acked)
	if r.missing == 0 {
		t.Fatal("the control lost no acknowledged row: the check cannot fail")
	}
}

// forgetMissing counts the acknowledged nonces the file at path lacks and
// forgets them, so the next kill counts only its own.
func forgetMissing(t *testing.T, path string, acked map[string]int64) int {
	t.Helper()
	st, err := mqlite.Open(context.Background(), path, mqlite.Config{ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer st.Close()
	missing := 0
	for nonce := range acked {
		var n int
		if err := st.DB().QueryRow(`SELECT count(*) FROM orders WHERE nonce = ?`, nonce).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			missing++
			delete(acked, nonce)
		}
	}
	return missing
}

// checkWholeCallers checks that every caller's rows are all there or none
// are, and that no failed caller's row is.
func checkWholeCallers(t *testing.T, path string, kill int) {
	t.Helper()
	st, err := mqlite.Open(context.Background(), path, mqlite.Config{ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1, JanitorInterval: -1, RetentionInterval: -1})
	if err != nil {
		t.Fatalf("kill %d: reopen: %v", kill, err)
	}
	defer st.Close()
	rows, err := st.DB().Query(`SELECT nonce FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	callers := map[string][2]int{} // caller -> rows found, rows written
	for rows.Next() {
		var nonce string
		if err := rows.Scan(&nonce); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(nonce, groupFailedPrefix) {
			t.Fatalf("kill %d: the row %s of a failed caller exists", kill, nonce)
		}
		cut := strings.LastIndex(nonce, "-")
		_, of, _ := strings.Cut(nonce[cut+1:], groupNonceOf)
		k, _ := strconv.Atoi(of)
		c := callers[nonce[:cut]]
		callers[nonce[:cut]] = [2]int{c[0] + 1, k}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for caller, c := range callers {
		if c[0] != c[1] {
			t.Fatalf("kill %d: caller %s has %d of its %d rows", kill, caller, c[0], c[1])
		}
	}
}
