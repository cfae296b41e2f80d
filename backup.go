package mqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Backup writes a consistent copy of the store to the new file dst while the
// store stays in use (SQLite's VACUUM INTO): the copy is the state of the
// last commit before Backup began, compacted, and opens with Open like any
// store. Leases in the copy are released by recovery when it is opened.
//
// dst must not exist (ErrDestinationExists): a backup never overwrites a
// file. The copy holds every body and key hash, so it is created 0600. It
// is written to a temporary file in dst's folder (named
// ".<base of dst>.mqlite-backup-*"), fsynced, and only then linked into place
// under dst, and the folder fsynced: dst either does not exist or holds a
// whole backup, even if the process dies half-way (a temporary file may then
// be left behind; remove it). Backup runs on the store's one connection, so
// other statements wait for it; cancelling ctx interrupts it and removes the
// temporary file.
func (s *Store) Backup(ctx context.Context, dst string) error {
	if err := s.ready(ctx); err != nil {
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
	dir := filepath.Dir(dst)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".mqlite-backup-*")
	if err != nil {
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	tmpPath := tmp.Name()
	defer os.Remove(tmpPath) // after a successful link it is a second name only
	// VACUUM INTO writes into an empty file as into a new one, and keeps
	// its mode: the copy is 0600 (CreateTemp's) from its first byte on.
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	if err := s.eng.Backup(ctx, s.db, tmpPath); err != nil {
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	if err := syncPath(tmpPath); err != nil {
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	// A hard link, unlike a rename, fails when dst appeared meanwhile.
	if err := os.Link(tmpPath, dst); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("backup %s: %w", dst, ErrDestinationExists)
		}
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	if err := syncPath(dir); err != nil {
		return fmt.Errorf("backup %s: %w", dst, err)
	}
	return nil
}

// syncPath flushes a file, or a folder's entries, to stable storage.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}
