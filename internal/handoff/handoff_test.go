package handoff

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	_ "modernc.org/sqlite"
)

type reg = Registry[int, string]

func all(string) bool { return true }

// TestReserveEnd: a commit gives each reserved waiter what was claimed for
// it and unregisters it; a rollback gives nothing and the waiter sleeps on.
func TestReserveEnd(t *testing.T) {
	var r reg
	a := r.Wait("q", "opts-a")
	b := r.Wait("q", "opts-b")
	c := r.Wait("other", "")
	if r.Waiting() != 3 {
		t.Fatalf("waiting %d", r.Waiting())
	}
	res := r.Reserve(func(q string) bool { return q == "q" })
	if len(res) != 1 || res[0] != a {
		t.Fatalf("reserved %v, want the first waiter of q", res)
	}
	if again := r.Reserve(func(q string) bool { return q == "q" }); len(again) != 1 || again[0] != b {
		t.Fatalf("a second transaction reserved %v, want b (a is claimed for)", again)
	} else {
		r.End(again, nil, false) // rolled back: b waits on
	}
	r.End(res, []Claim[int, string]{{w: a, msgs: []int{7}}}, true)
	select {
	case <-a.Got():
	default:
		t.Fatal("a not told")
	}
	if got := r.Leave(a); !slices.Equal(got, []int{7}) {
		t.Fatalf("a got %v", got)
	}
	if r.Waiting() != 2 {
		t.Fatalf("waiting %d, want 2", r.Waiting())
	}
	if got := r.Leave(b); got != nil {
		t.Fatalf("b got %v", got)
	}
	r.Leave(c)
	if r.Waiting() != 0 {
		t.Fatalf("waiting %d", r.Waiting())
	}
}

// TestOff: with the hand-off off nothing is reserved.
func TestOff(t *testing.T) {
	var r reg
	w := r.Wait("q", "")
	r.SetOff(true)
	if res := r.Reserve(all); res != nil {
		t.Fatalf("reserved %v", res)
	}
	r.SetOff(false)
	res := r.Reserve(all)
	r.End(res, nil, true) // nothing claimed: w sleeps on
	if len(res) != 1 || r.Waiting() != 1 {
		t.Fatalf("reserved %v, waiting %d", res, r.Waiting())
	}
	r.Leave(w)
}

// TestLeaveWaitsForClaimer: a waiter that leaves while a transaction
// claims for it gets what that transaction's commit claimed.
func TestLeaveWaitsForClaimer(t *testing.T) {
	var r reg
	w := r.Wait("q", "")
	res := r.Reserve(all)
	got := make(chan []int)
	go func() { got <- r.Leave(w) }()
	r.End(res, []Claim[int, string]{{w: w, msgs: []int{1, 2}}}, true)
	if msgs := <-got; !slices.Equal(msgs, []int{1, 2}) {
		t.Fatalf("got %v", msgs)
	}
}

// TestClaimFor: each claim runs under a savepoint: a claim that fails is
// rolled back alone, the transaction's other work and claims stay.
func TestClaimFor(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE t (x TEXT)"); err != nil {
		t.Fatal(err)
	}
	var r reg
	ok, bad := r.Wait("ok", "o"), r.Wait("bad", "b")
	res := r.Reserve(all)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO t VALUES ('send')"); err != nil {
		t.Fatal(err)
	}
	claims := ClaimFor(ctx, tx, res, func(ctx context.Context, tx *sql.Tx, queue, opts string) ([]int, error) {
		if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (?)", queue+"/"+opts); err != nil {
			return nil, err
		}
		if queue == "bad" {
			return nil, errors.New("claim failed")
		}
		return []int{1}, nil
	})
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r.End(res, claims, true)
	if len(claims) != 1 || claims[0].w != ok {
		t.Fatalf("claims %+v", claims)
	}
	if got := r.Leave(ok); !slices.Equal(got, []int{1}) {
		t.Fatalf("ok got %v", got)
	}
	if got := r.Leave(bad); got != nil {
		t.Fatalf("bad got %v", got)
	}
	rows, err := db.Query("SELECT x FROM t ORDER BY x")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var xs []string
	for rows.Next() {
		var x string
		if err := rows.Scan(&x); err != nil {
			t.Fatal(err)
		}
		xs = append(xs, x)
	}
	if !slices.Equal(xs, []string{"ok/o", "send"}) {
		t.Fatalf("rows %v, want the send and the good claim only", xs)
	}
}
