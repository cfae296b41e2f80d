package engine

import (
	"errors"
	"testing"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mqlite/mqlite/internal/errs"
)

// TestTranslate: each SQLite result code callers tell apart maps to its
// sentinel and keeps the original error; every other error is unchanged.
func TestTranslate(t *testing.T) {
	t.Parallel()
	full, readonly, closed := errs.ErrDiskFull, errs.ErrReadOnly, errs.ErrClosed
	plain := errors.New("plain")
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"not a driver error", plain, plain},
		{"disk full", codeError(sqlite3.SQLITE_FULL), full},
		{"read-only", codeError(sqlite3.SQLITE_READONLY), readonly},
		{"read-only file moved", codeError(sqlite3.SQLITE_READONLY_DBMOVED), readonly},
		{"commit vetoed", codeError(sqlite3.SQLITE_CONSTRAINT_COMMITHOOK), closed},
		{"other constraint", codeError(sqlite3.SQLITE_CONSTRAINT_UNIQUE), nil},
		{"busy", codeError(sqlite3.SQLITE_BUSY), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := translate(tc.err)
			if tc.want == nil {
				if got != tc.err {
					t.Fatalf("translate(%v) = %v, want it unchanged", tc.err, got)
				}
				return
			}
			if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
				t.Fatalf("translate(%v) = %v, want it to match %v and the original", tc.err, got, tc.want)
			}
		})
	}
}

// codeError is a driver error with SQLite's result code c, as *sqlite.Error.
type codeError int

func (c codeError) Error() string { return "sqlite error" }
func (c codeError) Code() int     { return int(c) }
