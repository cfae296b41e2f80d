package mqlite

import "context"

// RunSweeps runs every background sweep of s once, now by s's Clock, and
// returns the rows each changed: tests drive the loops with it instead of
// waiting for a tick.
func RunSweeps(ctx context.Context, s *Store) (map[string]int64, error) { return s.runSweeps(ctx) }
