package groupcommit

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// fn is the callback type of the tests' committer.
type fn = func(ctx context.Context, tx *sql.Tx) error

var errClosed = errors.New("closed")

// hooks is a store of one connection over a plain database/sql handle.
type hooks struct {
	db     *sql.DB
	closed atomic.Bool
	marks  atomic.Int64
	mu     sync.Mutex
	undone []int64 // the marks UndoStep was given
}

func (h *hooks) Begin() (*sql.Tx, error)                         { return h.db.BeginTx(context.Background(), nil) }
func (h *hooks) Run(ctx context.Context, tx *sql.Tx, f fn) error { return f(ctx, tx) }
func (h *hooks) MarkStep(*sql.Tx) int64                          { return h.marks.Add(1) }
func (h *hooks) Commit(tx *sql.Tx) error                         { return tx.Commit() }

func (h *hooks) UndoStep(_ *sql.Tx, m int64) {
	h.mu.Lock()
	h.undone = append(h.undone, m)
	h.mu.Unlock()
}

func (h *hooks) Closed() error {
	if h.closed.Load() {
		return errClosed
	}
	return nil
}

func newCommitter(t *testing.T) (*Committer[fn, int64], *hooks) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "g.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec("CREATE TABLE t (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	h := &hooks{db: db}
	return New[fn, int64](h), h
}

func insert(x int) fn {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (?)", x)
		return err
	}
}

func rows(t *testing.T, h *hooks) []int {
	t.Helper()
	r, err := h.db.Query("SELECT x FROM t ORDER BY x")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []int
	for r.Next() {
		var x int
		if err := r.Scan(&x); err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}

// gate is a callback that blocks the group until release, so that the
// callers after it queue up.
type gate struct {
	entered, release chan struct{}
}

func newGate() gate { return gate{make(chan struct{}), make(chan struct{})} }

func (g gate) fn(then fn) fn {
	return func(ctx context.Context, tx *sql.Tx) error {
		close(g.entered)
		<-g.release
		return then(ctx, tx)
	}
}

// waitQueued spins until n callers wait for their turn.
func waitQueued(c *Committer[fn, int64], n int) {
	for c.Waiting() < n {
		runtime.Gosched()
	}
}

func TestLoneCallerCommits(t *testing.T) {
	c, h := newCommitter(t)
	if o := c.Do(context.Background(), insert(1)); o.Err != nil || o.Panicked != nil {
		t.Fatalf("outcome %+v", o)
	}
	if got := rows(t, h); !slices.Equal(got, []int{1}) {
		t.Fatalf("rows %v", got)
	}
	if c.Commits() != 1 {
		t.Fatalf("commits %d", c.Commits())
	}
}

// TestCallerBound: 130 callers queued behind a running one commit in
// groups of at most MaxCallers: 64, 64, 2.
func TestCallerBound(t *testing.T) {
	c, h := newCommitter(t)
	g := newGate()
	var wg sync.WaitGroup
	errs := make(chan error, 130)
	wg.Add(1)
	go func() { defer wg.Done(); errs <- c.Do(context.Background(), g.fn(insert(0))).Err }()
	<-g.entered
	for i := 1; i < 130; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- c.Do(context.Background(), insert(i)).Err }()
	}
	waitQueued(c, 129)
	close(g.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := len(rows(t, h)); got != 130 {
		t.Fatalf("%d rows, want 130", got)
	}
	if c.Commits() != 3 {
		t.Fatalf("commits %d, want 3 (64+64+2)", c.Commits())
	}
}

// TestByteBound: a step that wrote MaxBytes ends its group; the callers
// waiting go to the next one.
func TestByteBound(t *testing.T) {
	c, h := newCommitter(t)
	g := newGate()
	var wg sync.WaitGroup
	wg.Add(4)
	go func() {
		defer wg.Done()
		c.Do(context.Background(), g.fn(func(ctx context.Context, tx *sql.Tx) error {
			c.Wrote(MaxBytes)
			return insert(0)(ctx, tx)
		}))
	}()
	<-g.entered
	for i := 1; i < 4; i++ {
		go func() { defer wg.Done(); c.Do(context.Background(), insert(i)) }()
	}
	waitQueued(c, 3)
	close(g.release)
	wg.Wait()
	if got := len(rows(t, h)); got != 4 || c.Commits() != 2 {
		t.Fatalf("%d rows, %d commits; want 4, 2", got, c.Commits())
	}
}

// TestStepOutcomes: in one group, a caller's error, panic and Goexit roll
// back that caller's step only (and its hook records, UndoStep), and the
// others commit.
func TestStepOutcomes(t *testing.T) {
	c, h := newCommitter(t)
	g := newGate()
	boom := errors.New("boom")
	type result struct {
		name string
		o    Outcome
	}
	results := make(chan result, 5)
	var wg sync.WaitGroup
	do := func(name string, f fn) {
		defer wg.Done()
		o := Outcome{Err: errors.New("goexit never returned")}
		defer func() { results <- result{name, o} }()
		o = c.Do(context.Background(), f)
	}
	wg.Add(5)
	go do("first", g.fn(insert(1)))
	<-g.entered
	go do("error", func(ctx context.Context, tx *sql.Tx) error { _ = insert(2)(ctx, tx); return boom })
	waitQueued(c, 1)
	go do("panic", func(ctx context.Context, tx *sql.Tx) error { _ = insert(3)(ctx, tx); panic("p") })
	waitQueued(c, 2)
	go do("goexit", func(ctx context.Context, tx *sql.Tx) error { _ = insert(4)(ctx, tx); runtime.Goexit(); return nil })
	waitQueued(c, 3)
	go do("last", insert(5))
	waitQueued(c, 4)
	close(g.release)
	wg.Wait()
	close(results)
	for r := range results {
		var ok bool
		switch r.name {
		case "first", "last":
			ok = r.o.Err == nil && r.o.Panicked == nil
		case "error":
			ok = errors.Is(r.o.Err, boom)
		case "panic":
			ok = r.o.Panicked == "p" && r.o.Err == nil
		case "goexit":
			ok = r.o.Err != nil && strings.Contains(r.o.Err.Error(), "Goexit")
		}
		if !ok {
			t.Errorf("%s: outcome %+v", r.name, r.o)
		}
	}
	if got := rows(t, h); !slices.Equal(got, []int{1, 5}) {
		t.Fatalf("rows %v, want [1 5]", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.undone, []int64{2, 3, 4}) {
		t.Fatalf("undone marks %v, want [2 3 4]", h.undone)
	}
}

// TestBareStepRollsBack: the first step of a group has no savepoint; when
// it fails, the transaction is rolled back whole and the next caller
// begins another.
func TestBareStepRollsBack(t *testing.T) {
	c, h := newCommitter(t)
	boom := errors.New("boom")
	if o := c.Do(context.Background(), func(ctx context.Context, tx *sql.Tx) error { _ = insert(1)(ctx, tx); return boom }); !errors.Is(o.Err, boom) {
		t.Fatalf("outcome %+v", o)
	}
	if o := c.Do(context.Background(), insert(2)); o.Err != nil {
		t.Fatal(o.Err)
	}
	if got := rows(t, h); !slices.Equal(got, []int{2}) {
		t.Fatalf("rows %v", got)
	}
}

// TestCancelWaiting: a caller whose ctx ends before its turn leaves the
// queue; its callback never runs.
func TestCancelWaiting(t *testing.T) {
	c, h := newCommitter(t)
	g := newGate()
	done := make(chan Outcome)
	go func() { done <- c.Do(context.Background(), g.fn(insert(1))) }()
	<-g.entered
	ctx, cancel := context.WithCancel(context.Background())
	ran := false
	waited := make(chan Outcome)
	go func() {
		waited <- c.Do(ctx, func(ctx context.Context, tx *sql.Tx) error { ran = true; return nil })
	}()
	waitQueued(c, 1)
	cancel()
	o := <-waited
	if !errors.Is(o.Err, context.Canceled) || !strings.Contains(o.Err.Error(), "waiting for the connection") {
		t.Fatalf("outcome %+v", o)
	}
	close(g.release)
	if o := <-done; o.Err != nil {
		t.Fatal(o.Err)
	}
	if ran || c.Waiting() != 0 {
		t.Fatalf("ran %v, waiting %d", ran, c.Waiting())
	}
	if got := rows(t, h); !slices.Equal(got, []int{1}) {
		t.Fatalf("rows %v", got)
	}
}

// TestBeginFailsClosed: a BEGIN that fails once the store is closed fails
// with the store's closed error.
func TestBeginFailsClosed(t *testing.T) {
	c, h := newCommitter(t)
	h.closed.Store(true)
	_ = h.db.Close()
	if o := c.Do(context.Background(), insert(1)); !errors.Is(o.Err, errClosed) {
		t.Fatalf("outcome %+v", o)
	}
}

// TestParallelGroups: with Parallel(n) on a pool of n connections, n
// groups run at once: n callbacks are inside their transactions together
// (each waits for the others before it returns), and every one commits.
// The control, Parallel(1), runs one group at a time: the callbacks never
// meet, and each gives up waiting for the others.
func TestParallelGroups(t *testing.T) {
	for _, parallel := range []int{3, 1} {
		c, h := newCommitter(t)
		h.db.SetMaxOpenConns(3)
		c.Parallel(parallel)
		var inside sync.WaitGroup
		inside.Add(3)
		met := make(chan struct{})
		go func() { inside.Wait(); close(met) }()
		var cur, most atomic.Int32
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := c.Do(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
					var n int
					if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
						return err
					}
					n32 := cur.Add(1)
					defer cur.Add(-1)
					for m := most.Load(); n32 > m && !most.CompareAndSwap(m, n32); m = most.Load() {
					}
					inside.Done()
					wait, cancel := context.WithTimeout(context.Background(), waitOthers(parallel))
					defer cancel()
					select {
					case <-met:
					case <-wait.Done():
					}
					return nil
				})
				if o.Err != nil {
					t.Errorf("caller %d: %v", i, o.Err)
				}
			}()
		}
		wg.Wait()
		t.Logf("Parallel(%d): at most %d of 3 callbacks inside their transactions at once", parallel, most.Load())
		if most.Load() != int32(parallel) {
			t.Errorf("Parallel(%d): at most %d callbacks at once, want %d", parallel, most.Load(), parallel)
		}
	}
}

// waitOthers is how long a callback of TestParallelGroups waits for the
// others: long when they should come (a loaded machine), short for the
// control, where they cannot.
func waitOthers(parallel int) time.Duration {
	if parallel > 1 {
		return 30 * time.Second
	}
	return 50 * time.Millisecond
}
