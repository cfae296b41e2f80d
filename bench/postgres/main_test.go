package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMain is the consumer process of a latency run when the test binary
// is started again as one (latency runs os.Executable with -consume).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-consume" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestSmoke runs every row for every side at SmokeSizes, one run, on the
// server at DefaultAdminURL (MQLITE_PG_URL when set): it proves the
// benchmark runs, not how fast anything is. No server: the test skips,
// or fails under MQLITE_REQUIRE_SERVICES=1.
func TestSmoke(t *testing.T) {
	admin := server(t)
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"-short", "-url", admin}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, p := range peers() {
		if !strings.Contains(out, p.name) {
			t.Errorf("table lacks side %q:\n%s", p.name, out)
		}
	}
	for _, r := range rows() {
		if !strings.Contains(out, "| "+r.name+" |") {
			t.Errorf("table lacks row %q:\n%s", r.name, out)
		}
	}
}

// server returns the server's admin URL, DefaultAdminURL or MQLITE_PG_URL
// when set. No server: the test skips, or fails under
// MQLITE_REQUIRE_SERVICES=1.
func server(t *testing.T) string {
	t.Helper()
	admin := DefaultAdminURL
	if u := os.Getenv("MQLITE_PG_URL"); u != "" {
		admin = u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("MQLITE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("PostgreSQL is required (MQLITE_REQUIRE_SERVICES=1) but unavailable: %v", err)
		}
		t.Skipf("PostgreSQL unavailable: %v", err)
	}
	_ = conn.Close(context.Background())
	return admin
}

// TestRawPeekLock proves that the peek-lock baseline does the work its
// ratio claims, on a fake clock: a lease that holds keeps a message from a
// second claim (the control: the same claim once the lease lapsed takes
// it), a lapsed lease is claimed again with a new token and one more
// delivery, the stale token's completion is refused (errLockLost) while
// the live one's succeeds and its retry is answered from the receipt, a
// completion after its lease lapsed is refused, and a message past its
// most deliveries is dead-lettered, not handed out.
func TestRawPeekLock(t *testing.T) {
	admin := server(t)
	ctx := context.Background()
	db, err := createBenchDB(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.drop(); err != nil {
			t.Error(err)
		}
	})
	url, drop, err := db.schema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop() })
	now := time.UnixMilli(1_000_000_000_000)
	const leaseFor, most = 30 * time.Second, 2
	r, err := openRawWith(ctx, url, true, &lease{now: func() time.Time { return now }, duration: leaseFor, maxDeliveries: most})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.close() })
	state := func(id int64) (st string, deliveries int) {
		t.Helper()
		if err := r.db.QueryRowContext(ctx, `SELECT state, delivery_count FROM raw_messages WHERE id = $1`, id).Scan(&st, &deliveries); err != nil {
			t.Fatal(err)
		}
		return st, deliveries
	}
	claimOne := func(want int) []delivery {
		t.Helper()
		ds, err := r.claim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != want {
			t.Fatalf("claimed %d, want %d", len(ds), want)
		}
		return ds
	}

	if err := r.send(ctx, [][]byte{[]byte("a")}); err != nil {
		t.Fatal(err)
	}
	first := claimOne(1)[0]
	now = now.Add(leaseFor - time.Millisecond)
	claimOne(0) // the lease holds
	now = now.Add(time.Millisecond)
	second := claimOne(1)[0] // the control: lapsed, the same claim takes it
	if second.id != first.id || second.token == first.token || second.token == "" {
		t.Fatalf("claimed again: %+v after %+v, want the same id and a new token", second, first)
	}
	if st, n := state(first.id); st != "locked" || n != 2 {
		t.Fatalf("after the second claim: %s, %d deliveries; want locked, 2", st, n)
	}
	if err := r.complete(ctx, nil, []delivery{first}); !errors.Is(err, errLockLost) {
		t.Fatalf("the stale token's completion: %v, want errLockLost", err)
	}
	if err := r.complete(ctx, nil, []delivery{second}); err != nil {
		t.Fatalf("the live token's completion: %v", err)
	}
	if err := r.complete(ctx, nil, []delivery{second}); err != nil {
		t.Fatalf("the retried completion, answered from its receipt: %v", err)
	}
	if err := r.complete(ctx, nil, []delivery{first}); !errors.Is(err, errLockLost) {
		t.Fatalf("the stale token's completion after the live one's: %v, want errLockLost", err)
	}
	var left int
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM raw_messages WHERE id = $1`, first.id).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the completed message: %d rows left (%v), want none", left, err)
	}

	// Past the most deliveries (2): dead-lettered, not handed out; in a
	// batch, the others of the claim still are.
	if err := r.send(ctx, [][]byte{[]byte("b"), []byte("c")}); err != nil {
		t.Fatal(err)
	}
	b := claimOne(2)[0]
	now = now.Add(leaseFor)
	late := claimOne(2) // both lapsed: the second delivery of each
	slices.SortFunc(late, func(x, y delivery) int { return cmp.Compare(x.id, y.id) })
	if late[0].id != b.id {
		t.Fatalf("claimed %+v, want %d first", late, b.id)
	}
	if err := r.complete(ctx, nil, late[1:]); err != nil {
		t.Fatal(err)
	}
	// A completion whose lease lapsed is refused, its token still the row's.
	now = now.Add(leaseFor)
	if err := r.complete(ctx, nil, late[:1]); !errors.Is(err, errLockLost) {
		t.Fatalf("a completion after its lease lapsed: %v, want errLockLost", err)
	}
	if err := r.send(ctx, [][]byte{[]byte("d")}); err != nil {
		t.Fatal(err)
	}
	got := claimOne(1) // b is dead-lettered by this claim, d handed out
	if got[0].id == b.id {
		t.Fatalf("handed out %d past its most deliveries", b.id)
	}
	if st, n := state(b.id); st != "dead" || n != most+1 {
		t.Fatalf("past its most deliveries: %s, %d; want dead, %d", st, n, most+1)
	}
	if err := r.complete(ctx, nil, got); err != nil {
		t.Fatal(err)
	}
	claimOne(0)
	t.Logf("exercised: a held lease, a lapsed lease claimed again (token %s after %s), a stale token's completion refused, a retry answered from its receipt, a lapsed completion refused, a batch completion, message %d dead-lettered after %d deliveries", second.token, first.token, b.id, most)
}
