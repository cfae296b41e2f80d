package engine

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"time"

	"modernc.org/sqlite"
)

// checkpointInterval is the least time between two background checkpoints:
// the WAL grows for that long at most before its pages are copied into the
// file, and the copy (with its fsyncs) runs at most that often.
const checkpointInterval = 100 * time.Millisecond

// walBackstopPages is the store connection's wal_autocheckpoint: a
// checkpoint inside a commit happens only when the WAL passes 4 MiB, that
// is when the background checkpointer falls behind.
const walBackstopPages = 4096

// checkpointer copies the WAL into the database file from a second
// connection of its own, off the store's connection: SQLite's automatic
// checkpoint runs inside the commit that crosses the threshold, so one
// commit in every few hundred (a send, a claim, a sweep's batch) paid for
// copying a MiB and two fsyncs, which made the latency tail and the longest
// hold of the connection. A PASSIVE checkpoint never blocks the writer and
// never waits for it. The commit hook kicks it; it runs at most once per
// checkpointInterval, and never when nothing was committed.
type checkpointer struct {
	dsn  string
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	waiting []chan struct{} // wait calls waiting for the next pass
	hurry   chan struct{}   // a wait call came: cut the interval short
}

// checkpointers maps each open store handle to its checkpointer, for
// WaitCheckpoint.
var checkpointers sync.Map // *sql.DB → *checkpointer

func newCheckpointer(dsn string) *checkpointer {
	c := &checkpointer{dsn: dsn, kick: make(chan struct{}, 1), hurry: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// commit reports a commit; it never blocks (it runs inside SQLite's commit
// hook).
func (c *checkpointer) commit() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// wait waits for a checkpoint pass that begins after the call: the
// frames committed before it are then in the database file. It returns
// early when ctx ends or the checkpointer stops.
func (c *checkpointer) wait(ctx context.Context) error {
	ch := make(chan struct{})
	c.mu.Lock()
	c.waiting = append(c.waiting, ch)
	c.mu.Unlock()
	select {
	case c.hurry <- struct{}{}:
	default:
	}
	c.commit()
	select {
	case <-ch:
		return nil
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops the checkpointer and closes its connection, which is then
// the last one to the file when the store's has closed: SQLite checkpoints
// the whole WAL and removes it, as it did with one connection.
func (c *checkpointer) close() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
}

func (c *checkpointer) run() {
	defer close(c.done)
	var conn driver.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	var last time.Time
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		// A WaitCheckpoint call cuts the interval short (hurry).
		if wait := checkpointInterval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-c.stop:
				t.Stop()
				return
			case <-t.C:
			case <-c.hurry:
				t.Stop()
			}
		}
		last = time.Now()
		select { // this pass serves every wait call registered so far
		case <-c.hurry:
		default:
		}
		c.mu.Lock()
		waiting := c.waiting
		c.waiting = nil
		c.mu.Unlock()
		conn = c.pass(conn)
		for _, ch := range waiting {
			close(ch)
		}
	}
}

// pass runs one PASSIVE checkpoint on conn, opened at the first pass (so
// that a file Open refuses is never opened twice; a plain driver: no
// hooks, no functions), and returns the connection for the next pass. When
// it cannot open one, the backstop checkpoint keeps the WAL bounded.
func (c *checkpointer) pass(conn driver.Conn) driver.Conn {
	if conn == nil {
		var err error
		if conn, err = (&sqlite.Driver{}).Open(c.dsn); err != nil {
			return nil
		}
	}
	if ex, ok := conn.(driver.ExecerContext); ok {
		_, _ = ex.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)", nil)
	}
	return conn
}

// WaitCheckpoint waits until the checkpointer of the store handle db has
// copied into the database file every frame committed before the call, so
// that the next commit starts the WAL over. Bulk background work calls it
// between its statements: without it the WAL of a long run of commits
// never starts over (the checkpointer never finds it idle), and once it
// passes walBackstopPages, SQLite's backstop checkpoint runs inside one of
// those commits, copying and syncing megabytes on the store's connection.
// The wait holds no connection. A db with no checkpointer returns at once.
func WaitCheckpoint(ctx context.Context, db *sql.DB) error {
	if c, ok := checkpointers.Load(db); ok {
		return c.(*checkpointer).wait(ctx)
	}
	return nil
}

// CheckpointEvery returns a stop function for the batched sweeps that
// calls WaitCheckpoint on db after every n-th batch, then asks stop (which
// may be nil).
func CheckpointEvery(ctx context.Context, db *sql.DB, n int, stop func() bool) func() bool {
	batches := 0
	return func() bool {
		if batches++; batches%n == 0 {
			_ = WaitCheckpoint(ctx, db)
		}
		return stop != nil && stop()
	}
}
