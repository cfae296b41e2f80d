package mqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
)

// folderFiles is what a test compares of a folder before and after a call:
// each file's name, bytes and modification time.
type folderFiles map[string]fileState

type fileState struct {
	data  []byte
	mtime time.Time
}

func folderState(t *testing.T, dir string) folderFiles {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := folderFiles{}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fileState{data: data, mtime: fi.ModTime()}
	}
	return out
}

// writeForeign makes path a SQLite file of the application's own, with one
// table and one row, in the given journal mode, and closes it.
func writeForeign(t *testing.T, path, journal string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{`PRAGMA journal_mode = ` + journal, `CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)`,
		`INSERT INTO orders (note) VALUES ('first')`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestExistingOnlyWritesNothing: Open with Config.ExistingOnly on a path
// without a store is ErrNoStore and leaves the folder exactly as it was:
// no file, no lock file, no -wal or -shm, the same bytes and modification
// times. Open without it on the same path creates the store (the control).
func TestExistingOnlyWritesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"missing file", func(*testing.T, string) {}},
		{"empty file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"SQLite file without the layout", func(t *testing.T, path string) { writeForeign(t, path, "delete") }},
		{"SQLite file in WAL mode without the layout", func(t *testing.T, path string) { writeForeign(t, path, "wal") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "app.db")
			tc.setup(t, path)
			before := folderState(t, dir)
			// A modification time the file system can tell apart from a
			// write during the test.
			old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
			for name := range before {
				if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
					t.Fatal(err)
				}
			}
			before = folderState(t, dir)
			st, err := mqlite.Open(ctx, path, mqlite.Config{ExistingOnly: true})
			if err == nil {
				_ = st.Close()
			}
			if !errors.Is(err, mqlite.ErrNoStore) {
				t.Fatalf("Open(ExistingOnly): %v, want ErrNoStore", err)
			}
			after := folderState(t, dir)
			for _, name := range slices.Sorted(maps.Keys(after)) {
				b, ok := before[name]
				if !ok {
					t.Errorf("%s was created", name)
					continue
				}
				if a := after[name]; !bytes.Equal(a.data, b.data) || !a.mtime.Equal(b.mtime) {
					t.Errorf("%s changed: %d bytes modified %v, was %d bytes modified %v", name, len(a.data), a.mtime, len(b.data), b.mtime)
				}
			}
			if len(after) != len(before) {
				t.Errorf("%d files after, %d before", len(after), len(before))
			}
			// The control: Open without ExistingOnly makes the path a
			// store, which Open with ExistingOnly then takes.
			for _, opts := range []mqlite.Config{{}, {ExistingOnly: true}} {
				st, err := mqlite.Open(ctx, path, opts)
				if err != nil {
					t.Fatalf("Open(ExistingOnly: %v): %v", opts.ExistingOnly, err)
				}
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
