package engine

import (
	"context"
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
}

func newCheckpointer(dsn string) *checkpointer {
	c := &checkpointer{dsn: dsn, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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
		if wait := checkpointInterval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-c.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		last = time.Now()
		if conn == nil {
			// Opened at the first commit, so that a file Open refuses is
			// never opened twice. A plain driver: no hooks, no functions.
			var err error
			if conn, err = (&sqlite.Driver{}).Open(c.dsn); err != nil {
				conn = nil
				continue // the backstop checkpoint keeps the WAL bounded
			}
		}
		if ex, ok := conn.(driver.ExecerContext); ok {
			_, _ = ex.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)", nil)
		}
	}
}
