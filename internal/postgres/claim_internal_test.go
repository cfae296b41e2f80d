package postgres

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/pgtest"
	"github.com/mqlite/mqlite/schema"
)

// testNow is the store's now of openWithQueue's handle.
const testNow = int64(1_700_000_000_000)

// openWithQueue opens the engine on a new, empty database with the current
// layout (pgtest.URL) and the queue q, its clock standing at testNow; it
// closes when tb ends.
func openWithQueue(tb testing.TB, q driver.Queue) *sql.DB {
	tb.Helper()
	ctx := context.Background()
	db, release, err := PostgreSQL{}.Open(driver.ConnConfig{Path: pgtest.URL(tb), StoreID: 1, MaxMessageBytes: 1 << 20,
		Now: func() int64 { return testNow }, Closing: func() bool { return false }})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close(); release() })
	if err := schema.ApplyPostgres(ctx, db); err != nil {
		tb.Fatal(err)
	}
	if err := (PostgreSQL{}).CreateQueue(ctx, db, q, testNow); err != nil {
		tb.Fatal(err)
	}
	return db
}

// TestClaimPlanOfAPausedQueue: the claim reads the queue's pause in its own
// statement, as a one-time filter, so on a paused queue its plan reads no
// message (the scan of the active messages is never executed) however
// many wait; on the queue resumed the same statement claims. The plan is
// behaviour: a pause written as a condition on each row would scan the
// whole backlog on every Receive of a paused queue.
func TestClaimPlanOfAPausedQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := driver.Queue{Name: "q", MaxDeliveryCount: 5, LockDurationMS: 30_000}
	db := openWithQueue(t, q)
	msgs := make([]driver.SendMessage, 200)
	for i := range msgs {
		msgs[i] = driver.SendMessage{Body: []byte("m")}
	}
	if _, err := (PostgreSQL{}).Enqueue(ctx, db, "q", msgs); err != nil {
		t.Fatal(err)
	}
	if err := (PostgreSQL{}).SetPaused(ctx, db, "q", testNow); err != nil {
		t.Fatal(err)
	}
	plan := explainClaim(t, db, 10)
	text := strings.Join(plan, "\n")
	t.Logf("the claim's plan on a paused queue of %d messages:\n%s", len(msgs), text)
	if !strings.Contains(text, "One-Time Filter") {
		t.Errorf("no one-time filter in the claim's plan on a paused queue")
	}
	for _, line := range plan {
		if strings.Contains(line, "on mqlite_messages m") && !strings.Contains(line, "never executed") {
			t.Errorf("the claim read the paused queue's messages: %s", strings.TrimSpace(line))
		}
	}
	if err := (PostgreSQL{}).SetPaused(ctx, db, "q", 0); err != nil {
		t.Fatal(err)
	}
	got, err := PostgreSQL{}.Claim(ctx, db, driver.ClaimRequest{Queue: driver.Queue{Name: "q"}, Max: 3, Now: testNow})
	if err != nil || len(got) != 3 {
		t.Fatalf("claim on the queue resumed: %d rows, %v; want 3", len(got), err)
	}
	if got[0].LockedUntil != testNow+q.LockDurationMS || got[0].DeliveryCount != 1 {
		t.Errorf("claimed %+v, want a lease of the queue's %d ms and a first delivery", got[0], q.LockDurationMS)
	}
}

// TestClaimSkipsTheDueProbeWhenFull: a claim that took its Max reads
// neither range of the due probe (dueMarker): in its plan the scans of the
// scheduled and the locked messages are never executed. A claim with room
// left runs them (the control: the test can tell a probe that ran).
func TestClaimSkipsTheDueProbeWhenFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openWithQueue(t, driver.Queue{Name: "q", MaxDeliveryCount: 5, LockDurationMS: 30_000})
	msgs := make([]driver.SendMessage, 20)
	for i := range msgs {
		msgs[i] = driver.SendMessage{Body: []byte("m")}
	}
	if _, err := (PostgreSQL{}).Enqueue(ctx, db, "q", msgs); err != nil {
		t.Fatal(err)
	}
	probes := func(max int) (ran int) {
		t.Helper()
		plan := explainClaim(t, db, max)
		for i, line := range plan {
			if !strings.Contains(line, "mqlite_msg_scheduled") && !strings.Contains(line, "mqlite_msg_locked") {
				continue
			}
			if !strings.Contains(line, "never executed") {
				ran++
				t.Logf("Max %d, the due probe ran: %s", max, strings.TrimSpace(plan[i]))
			}
		}
		return ran
	}
	if ran := probes(5); ran != 0 {
		t.Errorf("a claim that took its Max of 5 (of 20 waiting) ran %d scans of the due probe, want none", ran)
	}
	if ran := probes(50); ran == 0 {
		t.Errorf("control: a claim with room left (Max 50, 20 waiting) ran no scan of the due probe: the test cannot see one")
	}
}

// explainClaim returns the plan of the claim of up to max messages of the
// queue q as EXPLAIN ANALYZE ran it, in a transaction rolled back after it
// (EXPLAIN ANALYZE runs the claim).
func explainClaim(t *testing.T, db *sql.DB, max int) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+claimSQLs[0][0], "q", testNow, max)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
