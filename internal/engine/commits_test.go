package engine_test

import (
	"slices"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/testdb"
)

// TestCommitRecordsInTheirOwnTable: the broker's commit records live in
// mqlite_commits, one scope's keys apart from another's, never among the
// receive attempts; TrimCommits keeps a scope's newest; the janitor deletes
// them when their replay window ends, not before.
func TestCommitRecordsInTheirOwnTable(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	db := tb.Store.DB()
	k1, k2 := "k1", "k2"
	tx := func(fn func(tx *mqlite.Tx) error) {
		t.Helper()
		if err := tb.Store.Tx(bctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	tx(func(tx *mqlite.Tx) error {
		for _, r := range []struct{ scope, key string }{{k1, "a"}, {k1, "b"}, {k2, "a"}} {
			rec := engine.CommitRecord{Request: r.scope + "/" + r.key, Result: []byte(`{}`)}
			if err := engine.RecordCommit(tx.Context(), tx.SQL(), r.scope, r.key, rec); err != nil {
				return err
			}
		}
		return nil
	})
	if n := testdb.Int(t, db, `SELECT count(*) FROM mqlite_receive_attempts`); n != 0 {
		t.Fatalf("%d commit records among the receive attempts", n)
	}
	tx(func(tx *mqlite.Tx) error {
		for _, r := range []struct{ scope, key string }{{k1, "a"}, {k1, "b"}, {k2, "a"}} {
			rec, found, err := engine.LookupCommit(tx.Context(), tx.SQL(), r.scope, r.key)
			if err != nil || !found || rec.Request != r.scope+"/"+r.key {
				t.Errorf("lookup %s %s: %+v, %v, %v", r.scope, r.key, rec, found, err)
			}
		}
		n, err := engine.TrimCommits(tx.Context(), tx.SQL(), k1, 1)
		if err != nil || n != 1 {
			t.Errorf("trim %s to 1: %d, %v", k1, n, err)
		}
		return nil
	})
	records := func() []string {
		return testdb.Strings(t, db, `SELECT scope || ' ' || idempotency_key FROM mqlite_commits ORDER BY id`)
	}
	if got, want := records(), []string{"k1 b", "k2 a"}; !slices.Equal(got, want) {
		t.Fatalf("records after the trim: %q, want %q (the newest of k1 kept)", got, want)
	}
	expires := tb.Clock.Now().UnixMilli() + engine.ReceiptTTLMS
	if _, err := engine.Janitor(bctx, db, expires-1, nil); err != nil {
		t.Fatal(err)
	}
	if got := records(); len(got) != 2 {
		t.Fatalf("records before their window ends: %q, want both", got)
	}
	if _, err := engine.Janitor(bctx, db, expires, nil); err != nil {
		t.Fatal(err)
	}
	if got := records(); len(got) != 0 {
		t.Fatalf("records after their window ends: %q, want none (the janitor's)", got)
	}
}
