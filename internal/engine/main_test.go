package engine

import (
	"errors"
	"os"
	"testing"

	"github.com/mqlite/mqlite/internal/errs"
)

// TestMain gives the sentinels values of their own: package mqlite, which
// sets them in a program, cannot be imported by the engine's own tests.
func TestMain(m *testing.M) {
	errs.ErrDiskFull = errors.New("disk full")
	errs.ErrReadOnly = errors.New("read-only")
	errs.ErrClosed = errors.New("closed")
	os.Exit(m.Run())
}
