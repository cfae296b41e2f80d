package mqlite

import "context"

// RunSweeps runs every background sweep of s once, now by s's Clock, and
// returns the rows each changed: tests drive the loops with it instead of
// waiting for a tick.
func RunSweeps(ctx context.Context, s *Store) (map[string]int64, error) { return s.runSweeps(ctx) }

// FireSchedules sends every period of every schedule due by s's Clock and
// returns the messages sent: tests drive the schedule loop with it.
func FireSchedules(ctx context.Context, s *Store) (int64, error) {
	n, _, err := s.fireSchedules(ctx)
	return n, err
}

// ReceiversKept returns how many receivers and held leases s's registry
// keeps, without pruning it as Receivers does.
func ReceiversKept(s *Store) (live, locks int) { return s.receivers.Size() }

// WaitHandoff registers on s a Receive of queue that sleeps for a message,
// as Receive does before it sleeps, without one: leave unregisters it and
// returns what a commit claimed for it.
func WaitHandoff(s *Store, queue string, opts ReceiveOptions) (leave func() []Message) {
	h := s.handoffs.Wait(queue, opts)
	return func() []Message { return s.handoffs.Leave(h) }
}

// HandoffWaiters returns how many sleeping Receives s's commits may claim for.
func HandoffWaiters(s *Store) int { return s.handoffs.Waiting() }

// SetHandoff turns s's hand-off on or off; off, a commit only wakes the
// sleeping Receives, which claim in transactions of their own.
func SetHandoff(s *Store, on bool) { s.handoffs.SetOff(!on) }

// GroupWaiting returns how many callers of s.Tx wait for their turn in a
// group commit.
func GroupWaiting(s *Store) int {
	return s.group.Waiting()
}

// GroupCommits returns how many group commits s has committed.
func GroupCommits(s *Store) int64 { return s.group.Commits() }

// TallyCounts returns s's in-process counts per queue (what Metrics reports
// on SQLite, without reading a table): active, scheduled, locked, deferred,
// dead letters, bytes.
func TallyCounts(s *Store) map[string][6]int64 {
	out := map[string][6]int64{}
	for _, q := range s.tally.Snapshot() {
		out[q.Name] = [6]int64{q.Active, q.Scheduled, q.Locked, q.Deferred, q.DeadLettered, q.Bytes}
	}
	return out
}

// TableCounts reads the same counts from s's tables.
func TableCounts(ctx context.Context, s *Store) (map[string][6]int64, error) {
	seeds, err := s.readCounts(ctx, s.db)
	if err != nil {
		return nil, err
	}
	out := map[string][6]int64{}
	for _, q := range seeds {
		st := q.Counts.States
		out[q.Queue] = [6]int64{st[0], st[1], st[2], st[3], st[4], q.Counts.Bytes}
	}
	return out, nil
}

// PendingRecords returns how many transactions hold records s's tally and
// registry have neither applied nor dropped.
func PendingRecords(s *Store) (tally, settled int) {
	return s.tally.Pending(), s.receivers.PendingInTx()
}

// SetOneKey makes the stores opened next hear every transaction's reports
// under one key (on) or each under its connection's (off): the control of
// the tests of per-transaction records.
func SetOneKey(on bool) { oneKeyForTests = on }

// SetNoOps makes the stores opened next drop what each change says made it
// (on): the control of the tests of the event counters.
func SetNoOps(on bool) { noOpsForTests = on }

// SetTxAlone makes s's Tx run each call in a transaction of its own (on) or
// in group commits (off).
func SetTxAlone(s *Store, on bool) { s.txAlone = on }

// SetTxParallel lets up to n of s's group commits run at once.
func SetTxParallel(s *Store, n int) { s.group.Parallel(n) }
