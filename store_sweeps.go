package mqlite

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
)

// A sweep is one kind of background upkeep. Its run reads "now" as an
// argument (from the store's Clock), writes through the store's one
// connection, and writes nothing when there is nothing to do.
type sweep struct {
	name     string
	interval time.Duration // 0: the loop is off
	run      func(ctx context.Context, now int64) (int64, error)
}

// sweeps returns the store's sweeps in the order runSweeps applies them:
// leases and schedules first, so that the TTL sweep sees the messages they
// hand back.
func (s *Store) sweeps() []sweep {
	o := s.opts
	return []sweep{
		{"reaper", o.ReaperInterval, func(ctx context.Context, now int64) (int64, error) {
			s.receivers.Prune(now) // the registry's lapsed leases and gone receivers
			return s.eng.Reap(ctx, s.db, now, s.sweepStop(ctx))
		}},
		{"scheduler", o.SchedulerInterval, func(ctx context.Context, now int64) (int64, error) {
			return s.eng.Promote(ctx, s.db, now, s.sweepStop(ctx))
		}},
		{"ttl", o.TTLInterval, func(ctx context.Context, now int64) (int64, error) {
			return s.eng.Expire(ctx, s.db, now, s.sweepStop(ctx))
		}},
		{"janitor", o.JanitorInterval, s.janitor},
		{"retention", o.RetentionInterval, s.retain},
	}
}

// sweepStop is what a sweep asks between its batches: whether the store
// is closing. Every few batches it first waits for the checkpointer
// (driver.Driver.CheckpointEvery), so that a long pass never grows the WAL
// to the backstop checkpoint, which would run inside one of its commits.
func (s *Store) sweepStop(ctx context.Context) func() bool {
	return s.eng.CheckpointEvery(ctx, s.db, driver.SweepCheckpointEvery, s.isClosed)
}

// janitor turns the completed rows of completed messages into receipt rows, a
// batch per transaction, then deletes what has outlived its replay window.
// Its transactions are plain ones on the connection, as the other sweeps'
// statements are, so that a Close waits for none of them.
func (s *Store) janitor(ctx context.Context, now int64) (int64, error) {
	stop := s.sweepStop(ctx)
	var total int64
	for !s.isClosed() {
		n, err := s.compactReceipts(ctx, now)
		total += n
		if err != nil {
			return total, err
		}
		if n < driver.ReceiptBatch || stop() {
			break
		}
	}
	n, err := s.eng.Janitor(ctx, s.db, now, stop)
	return total + n, err
}

// compactReceipts runs the engine's CompactReceipts in a transaction
// of its own, begun under ctx itself: InTx and Store.Tx begin without
// ctx's cancellation, and a janitor waiting there for the connection would
// keep a Close called inside a caller's transaction waiting for it
// (TestCloseInsideTxWithLoopsWaiting).
func (s *Store) compactReceipts(ctx context.Context, now int64) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	n, err := s.eng.CompactReceipts(ctx, tx, now)
	if err != nil {
		_ = tx.Rollback()
		return 0, err
	}
	return n, tx.Commit()
}

// retain applies every queue's dead-letter retention.
func (s *Store) retain(ctx context.Context, now int64) (int64, error) {
	qs, err := s.eng.ListQueues(ctx, s.db)
	if err != nil {
		return 0, err
	}
	stop := s.sweepStop(ctx)
	var total int64
	for _, q := range qs {
		if s.isClosed() {
			break
		}
		n, err := s.eng.Retain(ctx, s.db, q, now, stop)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// runSweeps runs every sweep once, now, whether its loop is on or off, and
// returns the rows each changed. Tests call it (through export_test.go) to
// drive the loops deterministically on a fake clock.
func (s *Store) runSweeps(ctx context.Context) (map[string]int64, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var errs []error
	for _, sw := range s.sweeps() {
		n, err := sw.run(context.WithoutCancel(ctx), s.now())
		out[sw.name] = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// loops owns the background goroutines of a store.
type loops struct {
	wg     sync.WaitGroup
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
}

// startLoops starts one goroutine per sweep whose interval is on, and the
// schedule loop unless Config.ScheduleInterval turns it off. Each stops
// when the store closes; Close waits for them (stopLoops) before it closes
// the connection.
func (s *Store) startLoops() {
	s.loops.ctx, s.loops.cancel = context.WithCancel(context.Background())
	for _, sw := range s.sweeps() {
		if sw.interval <= 0 {
			continue
		}
		s.loops.wg.Go(func() { s.loop(sw) })
	}
	if s.opts.ScheduleInterval > 0 {
		s.loops.wg.Go(s.scheduleLoop)
	}
}

// stopLoops stops every loop and waits for it to return; s.closed must be
// closed.
func (s *Store) stopLoops() {
	if s.loops.cancel != nil {
		s.loops.cancel()
	}
	s.loops.wg.Wait()
}

// loop runs sw every interval until the store closes. A failed sweep is
// reported to the Logger and tried again at the next tick.
//
// Its statements run with a context that Close cancels. A sweep waiting for
// the store's connection then gives up at once, so that Close never waits
// behind a caller who holds the connection (Close called inside a Tx
// callback would otherwise deadlock). A sweep statement already running is
// interrupted and rolled back whole: each is its own autocommit
// transaction, and the connection is closed right after, so the interrupt
// leaves nothing half-done behind. The batched sweeps also stop between
// batches once the store is closing.
func (s *Store) loop(sw sweep) {
	t := time.NewTicker(sw.interval)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
		n, err := sw.run(s.loops.ctx, s.now())
		switch {
		case err != nil && s.isClosed():
			return // cut short by Close
		case err != nil:
			s.opts.Logger.Error("mqlite: sweep failed", "sweep", sw.name, "path", s.path, "err", err)
		case n > 0:
			s.opts.Logger.Debug("mqlite: sweep", "sweep", sw.name, "path", s.path, "rows", n)
		}
	}
}

// recover releases the leases an earlier process left in the file (see
// driver.Driver.Recover). Open runs it after the schema is in place and
// before the store is handed out, so nothing can claim in between.
func (s *Store) recover(ctx context.Context) error {
	n, err := s.eng.Recover(ctx, s.db, s.now())
	if err != nil {
		return err
	}
	if n > 0 {
		s.opts.Logger.Info("mqlite: recovered orphaned leases", "path", s.path, "messages", n)
	}
	return nil
}
