//go:build crash_injection

package crashtest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/pgtest"
)

// The crash tests on PostgreSQL: the same workers and checks as on a
// SQLite file, the store a schema of the shared server (pgtest.URL). A
// killed worker's leases are not released when the next one opens the
// store (another process may hold them): they lapse, and a claim or the
// reaper takes them back.

const (
	pgKills  = wantKills
	pgBudget = 150 * time.Second
)

// TestCrashLoopTxPostgres is TestCrashLoopTx on PostgreSQL.
func TestCrashLoopTxPostgres(t *testing.T) {
	crashLoopTx(t, setupEffectsOn(t, pgtest.URL(t)), pgKills, minKills, pgBudget)
}

// TestCrashLoopTxPostgresControl is TestCrashLoopTxControl on PostgreSQL.
func TestCrashLoopTxPostgresControl(t *testing.T) {
	loopTxControl(t, setupEffectsOn(t, pgtest.URL(t)))
}

// TestCrashInjectionPostgres is TestCrashInjection on PostgreSQL.
func TestCrashInjectionPostgres(t *testing.T) {
	crashInjection(t, pgtest.URL(t), pgKills, minKills, pgBudget)
}

// TestCrashInjectionPostgresControl shows the check of acknowledged sends
// can fail: a sender that acknowledges inside its transaction, killed
// before the commit, leaves acknowledged sends that are not there.
func TestCrashInjectionPostgresControl(t *testing.T) {
	r := setupEffectsOn(t, pgtest.URL(t))
	acked := map[int64]bool{}
	for i := range controlKills {
		t.Setenv(envAckEarly, "1")
		for _, l := range runAndKill(t, senderWorker, r.target, uint64(i), inSendTx, 0) {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "ack" {
				seq, _ := strconv.ParseInt(f[1], 10, 64)
				acked[seq] = true
			}
		}
	}
	lost := lostAcks(t, r.target, acked)
	t.Logf("control, acknowledged before the commit: %d kills in the send transaction, %d acknowledged sends, %d lost", controlKills, len(acked), lost)
	if lost == 0 {
		t.Fatal("kills between the acknowledgement and the commit lost no acknowledged send")
	}
}

// waitLeasesReclaimed waits until no lease of the crash queue is held: the
// leases the killed workers left lapse, and the reaper takes them back.
func waitLeasesReclaimed(t *testing.T, url string) {
	t.Helper()
	st, err := openStore(url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		stats, err := st.Stats(context.Background(), crashQueue)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Locked == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases still held a minute after the last kill (lease %v)", stats.Locked, crashLease)
		}
		time.Sleep(crashLease / 4) // the leases lapse on the wall clock
	}
}
