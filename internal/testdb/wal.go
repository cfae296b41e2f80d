package testdb

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"
)

// WALCounter counts the WAL frames the store's commits append, with
// automatic checkpoints on: it reads the wal-index header in the -shm file
// (mxFrame, the frames in the current WAL, and the salt that changes each
// time a checkpoint restarts the WAL from its start). Call Step after every
// commit; Frames is the total appended since NewWALCounter. A commit that
// restarts the WAL counts the frames it wrote from the start.
type WALCounter struct {
	f      *os.File
	max    uint32
	salt   uint64
	Frames int64
}

// NewWALCounter opens the counter of the database file path for a test
// or benchmark and closes it when t ends.
func NewWALCounter(t testing.TB, path string) *WALCounter {
	t.Helper()
	c, err := OpenWALCounter(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// OpenWALCounter opens the -shm file of the database file path (it must be
// open in WAL mode) and reads its header. Close releases the file.
func OpenWALCounter(path string) (*WALCounter, error) {
	f, err := os.Open(path + "-shm")
	if err != nil {
		return nil, fmt.Errorf("open shm: %w", err)
	}
	c := &WALCounter{f: f}
	c.max, c.salt = c.read()
	return c, nil
}

// Close closes the -shm file.
func (c *WALCounter) Close() error { return c.f.Close() }

// read returns mxFrame and the salts of the wal-index header (native byte
// order, offsets 16 and 32 of the first copy of the header).
func (c *WALCounter) read() (uint32, uint64) {
	var hdr [48]byte
	if _, err := c.f.ReadAt(hdr[:], 0); err != nil {
		return c.max, c.salt
	}
	return binary.NativeEndian.Uint32(hdr[16:]), binary.NativeEndian.Uint64(hdr[32:])
}

// Step adds the frames appended since the last call.
func (c *WALCounter) Step() {
	m, s := c.read()
	if s != c.salt || m < c.max {
		c.Frames += int64(m) // the WAL restarted: everything in it is new
	} else {
		c.Frames += int64(m - c.max)
	}
	c.max, c.salt = m, s
}
