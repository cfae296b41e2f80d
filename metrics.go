package mqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/tally"
)

// QueueCounters counts the events of one queue since the store was opened.
// Each counts committed changes only: a transaction that rolls back counts
// nothing.
type QueueCounters struct {
	// Sent is the messages written to the queue: by a send (the outbox's,
	// in the caller's transaction, or the broker's) or by a topic's
	// fan-out. A resend collapsed by de-duplication is not counted.
	Sent int64
	// Received is the deliveries: a peek-lock claim (Receive or
	// ReceiveDeferred) or a receive-and-delete.
	Received int64
	// Completed is the deliveries settled by Complete or CompleteBatch. A
	// replayed settlement is not counted again.
	Completed int64
	// Abandoned is the deliveries given back by Abandon or Release, dead-lettered
	// ones (the last allowed delivery) included.
	Abandoned int64
	// Rejected is the deliveries dead-lettered by Reject.
	Rejected int64
	// DeadLettered is the messages that became dead letters, for any
	// reason: Reject, Abandon or a lease expiring on the last allowed
	// delivery, an expired time to live, a spent deferred message.
	DeadLettered int64
	// LockLost is the leases that ended with no settlement: a delivery
	// whose lock expired and that the reaper, a claim or Stats put back
	// (or dead-lettered). A Complete that arrives late is refused with
	// ErrLockLost; the counter moves when the row is put back, which
	// happens at the next sweep, claim or Stats of the queue.
	LockLost int64
	// Redelivered is the deliveries of a message that was delivered
	// before (a delivery count above 1): the part of Received that is a
	// retry.
	Redelivered int64
}

// QueueMetrics is one queue's counts as Store.Metrics keeps them in
// memory: its messages per state as of the last commit, its counters and
// its claim and settle durations since Open.
type QueueMetrics struct {
	Queue string
	// Messages per state. Unlike Stats, nothing is brought up to date
	// first: a lease past its end is still Locked, a due scheduled
	// message still Scheduled, until a sweep, a claim or Stats moves it.
	Active, Scheduled, Locked, Deferred, DeadLettered int64
	// Bytes is the sum of the body lengths of the queue's messages, dead
	// letters included, as of the last commit (QueueStats.Bytes, kept in
	// memory).
	Bytes int64
	// Consumers is how many receivers of the queue are live (Receivers);
	// Waiting how many Receive calls of the queue run now; Locks how many
	// leases its receivers hold.
	Consumers, Waiting, Locks int64
	// Paused reports whether the queue is paused (Store.PauseQueue).
	Paused bool
	// Counters are the queue's events since Open.
	Counters QueueCounters
	// Claim is the duration of the claim transactions of Receive (one per
	// attempt, empty ones included), from asking for the connection to
	// the commit. Settle is that of each settlement (Complete, Abandon, Release,
	// Reject, Defer; each lock of a CompleteBatch counts once, with the
	// batch's duration).
	Claim, Settle DurationHistogram
}

// DurationBuckets returns the upper bounds of the buckets of every
// DurationHistogram, in increasing order: 100µs to 10s. The slice is a
// copy.
func DurationBuckets() []time.Duration {
	b := tally.Buckets
	return b[:]
}

// DurationHistogram is a histogram of durations over fixed buckets
// (DurationBuckets), the shape of a Prometheus histogram.
type DurationHistogram struct {
	// Buckets[i] is the number of observations at most
	// DurationBuckets()[i]: cumulative, like Prometheus buckets.
	Buckets []uint64
	// Count is the number of observations; Sum their total.
	Count uint64
	Sum   time.Duration
}

// Metrics returns every queue's counts, sorted by queue name. They are
// kept in memory from the rows each commit writes (seeded from the state
// indexes once, at Open), so Metrics reads no table, never waits for the
// connection and costs the same on a million-message queue as on an empty
// one: it is meant for a scraper polling every few seconds. Stats counts
// from the indexes and brings the queue up to date first; use it when the
// numbers must be exact to the millisecond.
//
// The counts cover every write made through the store's connection (the
// store's methods, outbox sends on Store.DB() transactions, the sweeps).
// Two things they cannot see: a ROLLBACK TO SAVEPOINT inside a caller's
// transaction that then commits (the rows written before the savepoint
// was rolled back stay counted), and a statement that failed halfway inside
// a transaction that commits anyway. Both leave the state counts off until
// the next Stats of the queue, which takes the counts it reads from the
// indexes as the tally's, or the next Open; the event counters keep them
// (a send undone that way stays in Sent). Every path of mqlite itself rolls
// back the whole transaction on an error.
//
// On PostgreSQL, where other processes write the same database, the state
// counts are read from the database at each call (a Stats per queue); the
// event counters are this process's.
//
// It is safe for concurrent use. It returns ErrClosed once the store is
// closed; ctx bounds the reads of a PostgreSQL store.
func (s *Store) Metrics(ctx context.Context) ([]QueueMetrics, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if s.eng.Shared() {
		// Other processes write the database too: what the store's own
		// statements reported is not all there is, so read the counts.
		seeds, err := s.readCounts(ctx, s.db)
		if err != nil {
			return nil, err
		}
		s.tally.Refresh(seeds)
	}
	out := queueMetrics(s.tally.Snapshot())
	live := s.listReceivers()
	for i := range out {
		for _, r := range receiversOf(live, out[i].Queue) {
			out[i].Consumers++
			out[i].Waiting += int64(r.Waiting)
			out[i].Locks += int64(r.Locks)
		}
	}
	return out, nil
}

// QueueAges is how old the oldest waiting work of one queue is, by the
// store's Clock.
type QueueAges struct {
	Queue string
	// OldestActive is the age of the queue's claimable message of lowest
	// sequence number (sequence order is send order; a redriven or
	// abandoned message keeps its sequence number): how long the head of
	// the backlog has waited since it was sent. 0 when nothing is
	// claimable.
	OldestActive time.Duration
	// OldestDeadLetter is how long ago the dead letter of lowest sequence
	// number was dead-lettered. 0 when there is none.
	OldestDeadLetter time.Duration
}

// Ages returns every queue's QueueAges, sorted by queue name. Each queue
// costs two index seeks (the first entry of its claimable and of its
// dead-letter index) and nothing else, so a scrape costs the same on a
// million-message queue as on an empty one; unlike Metrics it does wait for
// the store's connection. Like Metrics it does not bring a queue up to date
// first (a due scheduled message is not counted until it is promoted).
func (s *Store) Ages(ctx context.Context) ([]QueueAges, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	names := s.tally.Names()
	out := make([]QueueAges, 0, len(names))
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := s.now()
		age := func(ms int64) time.Duration {
			if ms <= 0 || ms > now {
				return 0
			}
			return time.Duration(now-ms) * time.Millisecond
		}
		for _, q := range names {
			active, dead, err := s.eng.Oldest(ctx, tx, q)
			if err != nil {
				return err
			}
			out = append(out, QueueAges{Queue: q, OldestActive: age(active), OldestDeadLetter: age(dead)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// queueMetrics turns the tally's snapshot into QueueMetrics.
func queueMetrics(qs []tally.Queue) []QueueMetrics {
	out := make([]QueueMetrics, len(qs))
	for i, q := range qs {
		out[i] = QueueMetrics{
			Queue: q.Name, Active: q.Active, Scheduled: q.Scheduled, Locked: q.Locked,
			Deferred: q.Deferred, DeadLettered: q.DeadLettered, Bytes: q.Bytes, Paused: q.Paused,
			Counters: QueueCounters(q.Counters), Claim: DurationHistogram(q.Claim), Settle: DurationHistogram(q.Settle),
		}
	}
	return out
}

// exactOf sums the engine's Stats' figures into the tally's counts.
func exactOf(per map[string]driver.StateStats) tally.Exact {
	var e tally.Exact
	for state, v := range per {
		e.Put(state, v.Count, v.Bytes)
	}
	return e
}

// seedTally counts the messages of every queue once, from the state
// indexes (Executor.Stats), and turns the tally on. It runs inside Open,
// before any other statement can run on the connection.
func (s *Store) seedTally(ctx context.Context, db driver.DBTX) error {
	seeds, err := s.readCounts(ctx, db)
	if err != nil {
		return err
	}
	s.tally.Seed(seeds)
	return nil
}

// readCounts reads every queue's counts from the state indexes.
func (s *Store) readCounts(ctx context.Context, db driver.DBTX) ([]tally.Seed, error) {
	qs, err := s.eng.ListQueues(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("read counts: %w", err)
	}
	seeds := make([]tally.Seed, 0, len(qs))
	for _, q := range qs {
		per, err := s.eng.Stats(ctx, db, q.Name)
		if err != nil {
			return nil, fmt.Errorf("read counts: %w", err)
		}
		seeds = append(seeds, tally.Seed{Queue: q.Name, Counts: exactOf(per), Paused: q.PausedAt != 0})
	}
	return seeds, nil
}
