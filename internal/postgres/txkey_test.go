package postgres_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/mqlite/mqlite/internal/driver"
)

// TestChangesKeyedByConnection: the reports of two transactions open side
// by side on the store's pool carry each its own connection's key, and
// each one's rollback or commit reports that key, so the store can keep
// their records apart; a statement on the handle itself, in autocommit,
// reports under a key of its own that it commits at once, one key per
// statement, and so does a statement on a connection taken from the handle
// with no transaction open.
func TestChangesKeyedByConnection(t *testing.T) {
	db, clock := openTest(t)
	var mu sync.Mutex
	var events []string
	names := map[driver.TxKey]string{}
	name := func(k driver.TxKey) string { // mu is held
		if k == 0 {
			return "zero"
		}
		n, ok := names[k]
		if !ok {
			n = string(rune('a' + len(names)))
			names[k] = n
		}
		return n
	}
	event := func(k driver.TxKey, format string, args ...any) {
		mu.Lock()
		events = append(events, name(k)+" "+fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	store := openTwin(t, db, clock, func(c *driver.ConnConfig) {
		c.MaxConns = 3
		c.Changed = func(k driver.TxKey, ch driver.RowChange) { event(k, "%s>%s", ch.Old, ch.New) }
		c.Created = func(k driver.TxKey, q string) { event(k, "created %s", q) }
		c.Commit = func(k driver.TxKey) { event(k, "commit") }
		c.Rollback = func(k driver.TxKey) { event(k, "rollback") }
	})
	ctx := context.Background()
	q := adminQueue("q")
	noErr(t, "create", pg.CreateQueue(ctx, store, q, clock.now()))
	send := func(db driver.DBTX) {
		t.Helper()
		if _, err := pg.Enqueue(ctx, db, "q", []driver.SendMessage{{Body: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	tx1, err := store.Begin()
	if err != nil {
		t.Fatal(err)
	}
	tx2, err := store.Begin()
	if err != nil {
		t.Fatal(err)
	}
	send(tx1)
	send(tx2)
	noErr(t, "rollback", tx2.Rollback())
	noErr(t, "commit", tx1.Commit())
	send(store)
	send(store)
	// A connection taken from the handle: in autocommit its statement is
	// committed at once, under a key of its own; in a transaction begun by
	// a statement, it waits under the connection's key.
	c, err := store.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send(c)
	for _, q := range []string{"BEGIN", "", "ROLLBACK"} {
		if q == "" {
			send(c)
			continue
		}
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// CreateQueue runs a transaction of its own, on the connection tx1 then
	// takes again: a connection keeps its key from transaction to
	// transaction, one at a time.
	want := []string{"a created q", "a commit", "a >active", "b >active", "b rollback", "a commit",
		"c >active", "c commit", "d >active", "d commit", "e >active", "e commit", "a or b >active"}
	mu.Lock()
	defer mu.Unlock()
	// The last is on the connection's own key, whichever of the two the
	// handle gave.
	if n := len(events); n > 0 && (events[n-1] == "a >active" || events[n-1] == "b >active") {
		events[n-1] = "a or b >active"
	}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("reports %q, want %q", events, want)
	}
}
