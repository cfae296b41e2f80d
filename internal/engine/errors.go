package engine

import (
	"errors"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mqlite/mqlite/internal/errs"
)

// coded is a driver error with SQLite's extended result code.
type coded interface {
	error
	Code() int
}

// translate gives the driver errors that callers must tell apart a sentinel
// of their own (the original stays wrapped, for its text and code): a full
// disk or quota is errs.ErrDiskFull, a file that cannot be written
// errs.ErrReadOnly, a statement run on a store being closed errs.ErrClosed.
// It is the one place that reads SQLite's result codes; every statement of
// the store's connection passes through it.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var se coded // *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff { // the primary result code
	case sqlite3.SQLITE_FULL:
		return fmt.Errorf("%w: %w", errs.ErrDiskFull, err)
	case sqlite3.SQLITE_READONLY:
		return fmt.Errorf("%w: %w", errs.ErrReadOnly, err)
	case sqlite3.SQLITE_CONSTRAINT:
		if se.Code() == sqlite3.SQLITE_CONSTRAINT_COMMITHOOK {
			return fmt.Errorf("%w: the commit was refused and rolled back: %w", errs.ErrClosed, err)
		}
	}
	return err
}
