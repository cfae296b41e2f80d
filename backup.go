package mqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// Backup writes a consistent copy of the store to the new file dst while the
// store stays in use (SQLite's VACUUM INTO): the copy is the state of the
// last commit before Backup began, compacted, and opens with Open like any
// store. Leases in the copy are released by recovery when it is opened.
//
// dst must not exist (ErrDestinationExists): a backup never overwrites a
// file. The copy is fsynced before Backup returns. Backup runs on the
// store's one connection, so other statements wait for it; cancelling ctx
// interrupts it, and a partial copy is removed.
func (s *Store) Backup(ctx context.Context, dst string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if dst == "" {
		return invalidf(ErrInvalidArgument, "empty backup path")
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("backup %s: %w", dst, ErrDestinationExists)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	if err := syncFile(dst); err != nil {
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	return nil
}

// syncFile flushes path to stable storage.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
