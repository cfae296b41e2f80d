package forgetfs_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/powerloss/forgetfs"
	"github.com/mqlite/mqlite/powerloss/internal/fusetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// These tests use the mount from the test process itself, with plain
// reads, writes and syncs only (no mapped files; see the package comment).

// env is one mount over a backing folder that starts with the files of
// before.
type env struct {
	t       *testing.T
	fs      *forgetfs.FS
	backing string
	mnt     string
	opened  []*os.File
}

func setup(t *testing.T, before map[string]string) *env {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range before {
		if err := os.WriteFile(filepath.Join(backing, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, mnt := fusetest.Mount(t, backing)
	return &env{t: t, fs: f, backing: backing, mnt: mnt}
}

func (e *env) path(name string) string { return filepath.Join(e.mnt, name) }

func (e *env) open(name string, flag int) *os.File {
	e.t.Helper()
	f, err := os.OpenFile(e.path(name), flag, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	e.opened = append(e.opened, f)
	// Closed before the unmount even when the test fails: a process that
	// exits with a file open on the mount it serves waits on itself.
	e.t.Cleanup(func() { _ = f.Close() })
	return f
}

func (e *env) writeAt(f *os.File, s string, off int64) {
	e.t.Helper()
	if _, err := f.WriteAt([]byte(s), off); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) sync(f *os.File) {
	e.t.Helper()
	if err := f.Sync(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) syncDir() { e.sync(e.open(".", os.O_RDONLY)) }

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// read reads a file through the mount: what the processes see.
func (e *env) read(name string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.path(name))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// cut cuts the power, closes what the test left open, unmounts, and
// returns the backing folder's files with their contents.
func (e *env) cut(opts *forgetfs.CutOptions) (map[string]string, forgetfs.Report) {
	e.t.Helper()
	rep, err := e.fs.Cut(context.Background(), opts)
	if err != nil {
		e.t.Fatalf("cut: %v", err)
	}
	for _, f := range e.opened {
		_ = f.Close()
	}
	if err := e.fs.Unmount(context.Background()); err != nil {
		e.t.Fatalf("unmount: %v", err)
	}
	return files(e.t, e.backing), rep
}

func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range entries {
		b, err := os.ReadFile(filepath.Join(dir, d.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[d.Name()] = string(b)
	}
	return out
}

// TestCutDropsExactlyWhatWasNotSynced: each case runs operations on a mount
// over a folder that held the files of before, cuts the power, and finds in
// the folder exactly the synced state: after.
func TestCutDropsExactlyWhatWasNotSynced(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		before map[string]string
		run    func(e *env)
		after  map[string]string
	}{
		{"unsynced overwrite and append are lost", map[string]string{"a": "hello"},
			func(e *env) {
				f := e.open("a", os.O_RDWR)
				e.writeAt(f, "J", 0)
				e.writeAt(f, " world", 5)
			}, map[string]string{"a": "hello"}},
		{"a synced write stays, the one after it goes", map[string]string{"a": "hello"},
			func(e *env) {
				f := e.open("a", os.O_RDWR)
				e.writeAt(f, "J", 0)
				e.sync(f)
				e.writeAt(f, "ELLO", 1)
				e.writeAt(f, "!", 5)
			}, map[string]string{"a": "Jello"}},
		{"fdatasync is a sync", map[string]string{"a": "hello"},
			func(e *env) {
				f := e.open("a", os.O_RDWR)
				e.writeAt(f, "!!", 5)
				e.must(syscall.Fdatasync(int(f.Fd())))
			}, map[string]string{"a": "hello!!"}},
		{"a sync of another file syncs nothing here", map[string]string{"a": "hello", "b": "x"},
			func(e *env) {
				e.writeAt(e.open("a", os.O_RDWR), "J", 0)
				b := e.open("b", os.O_RDWR)
				e.writeAt(b, "y", 0)
				e.sync(b)
			}, map[string]string{"a": "hello", "b": "y"}},
		{"a write-only file's overwrite and truncation are undone", map[string]string{"a": "hello"},
			func(e *env) {
				f := e.open("a", os.O_WRONLY)
				e.writeAt(f, "J", 0)
				e.must(f.Truncate(3))
			}, map[string]string{"a": "hello"}},
		{"unsynced truncations are undone", map[string]string{"a": "hello", "b": "hi"},
			func(e *env) {
				e.must(os.Truncate(e.path("a"), 2))
				e.must(e.open("b", os.O_RDWR).Truncate(10))
			}, map[string]string{"a": "hello", "b": "hi"}},
		{"a truncation then a sync", map[string]string{"a": "hello"},
			func(e *env) {
				f := e.open("a", os.O_RDWR)
				e.must(f.Truncate(2))
				e.sync(f)
				e.writeAt(f, "y", 4)
			}, map[string]string{"a": "he"}},
		{"O_TRUNC is a truncation", map[string]string{"a": "hello"},
			func(e *env) {
				e.writeAt(e.open("a", os.O_RDWR|os.O_TRUNC), "x", 0)
			}, map[string]string{"a": "hello"}},
		{"a new file whose folder was not synced is gone, synced data or not", nil,
			func(e *env) {
				f := e.open("new", os.O_RDWR|os.O_CREATE|os.O_EXCL)
				e.writeAt(f, "data", 0)
				e.sync(f)
			}, map[string]string{}},
		{"a new file whose folder was synced but not its data is empty", nil,
			func(e *env) {
				f := e.open("new", os.O_RDWR|os.O_CREATE|os.O_EXCL)
				e.writeAt(f, "data", 0)
				e.syncDir()
			}, map[string]string{"new": ""}},
		{"a new file with data and folder synced stays whole", nil,
			func(e *env) {
				f := e.open("new", os.O_RDWR|os.O_CREATE|os.O_EXCL)
				e.writeAt(f, "data", 0)
				e.sync(f)
				e.syncDir()
				e.writeAt(f, "more", 4)
			}, map[string]string{"new": "data"}},
		{"an unsynced unlink is undone, with the content", map[string]string{"a": "hello"},
			func(e *env) {
				e.must(os.Remove(e.path("a")))
			}, map[string]string{"a": "hello"}},
		{"an unlink then a folder sync holds", map[string]string{"a": "hello", "b": "b"},
			func(e *env) {
				e.must(os.Remove(e.path("a")))
				e.syncDir()
				e.must(os.Remove(e.path("b")))
			}, map[string]string{"b": "b"}},
		{"a write to an unlinked file is undone with the unlink", map[string]string{"a": "hello"},
			func(e *env) {
				f := e.open("a", os.O_RDWR)
				e.must(os.Remove(e.path("a")))
				e.writeAt(f, "J", 0)
			}, map[string]string{"a": "hello"}},
		{"an unsynced rename over a file is undone", map[string]string{"a": "new", "b": "old"},
			func(e *env) {
				e.must(os.Rename(e.path("a"), e.path("b")))
				if got := e.read("b"); got != "new" {
					e.t.Fatalf("after rename b reads %q", got)
				}
			}, map[string]string{"a": "new", "b": "old"}},
		{"a synced rename over a file holds", map[string]string{"a": "new", "b": "old"},
			func(e *env) {
				e.must(os.Rename(e.path("a"), e.path("b")))
				e.syncDir()
			}, map[string]string{"b": "new"}},
		{"write, sync, link, folder sync, unlink: the rename-into-place of a backup", nil,
			func(e *env) {
				f := e.open(".tmp", os.O_RDWR|os.O_CREATE|os.O_EXCL)
				e.writeAt(f, "copy", 0)
				e.sync(f)
				e.must(os.Link(e.path(".tmp"), e.path("dst")))
				e.syncDir()
				e.must(os.Remove(e.path(".tmp")))
			}, map[string]string{".tmp": "copy", "dst": "copy"}},
		{"an unsynced link is undone", map[string]string{"a": "a"},
			func(e *env) {
				e.must(os.Link(e.path("a"), e.path("b")))
			}, map[string]string{"a": "a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, c.before)
			c.run(e)
			got, _ := e.cut(nil)
			if !equal(got, c.after) {
				t.Fatalf("after the cut the folder holds %q, want %q", got, c.after)
			}
		})
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestReadsSeeUnsyncedWrites: before the cut, the processes read what they
// wrote, as from a page cache.
func TestReadsSeeUnsyncedWrites(t *testing.T) {
	t.Parallel()
	e := setup(t, map[string]string{"a": "hello"})
	f := e.open("a", os.O_RDWR)
	e.writeAt(f, "J", 0)
	e.writeAt(f, " world", 5)
	n := e.open("n", os.O_RDWR|os.O_CREATE)
	e.writeAt(n, "new", 0)
	if got := e.read("a"); got != "Jello world" {
		t.Fatalf("read %q before the cut", got)
	}
	if got := e.read("n"); got != "new" {
		t.Fatalf("read %q before the cut", got)
	}
	got, rep := e.cut(nil)
	if !equal(got, map[string]string{"a": "hello"}) {
		t.Fatalf("after the cut: %q", got)
	}
	if rep.Files != 2 || rep.Writes != 3 || rep.Bytes != 10 || rep.Entries != 1 {
		t.Fatalf("report %+v, want 2 files, 3 writes of 10 bytes, 1 entry", rep)
	}
}

// TestAfterTheCutEverythingFails: the power is out; nothing more reaches the
// folder.
func TestAfterTheCutEverythingFails(t *testing.T) {
	t.Parallel()
	e := setup(t, map[string]string{"a": "hello"})
	f := e.open("a", os.O_RDWR)
	if _, err := e.fs.Cut(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after the cut: %v, want EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync after the cut: %v, want EIO", err)
	}
	if _, err := os.ReadFile(e.path("a")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read after the cut: %v, want EIO", err)
	}
	if err := os.WriteFile(e.path("b"), nil, 0o644); !errors.Is(err, syscall.EIO) {
		t.Fatalf("create after the cut: %v, want EIO", err)
	}
	got, _ := e.cut(nil)
	if !equal(got, map[string]string{"a": "hello"}) {
		t.Fatalf("after the cut: %q", got)
	}
}

// TestCutAfter: an armed cut happens right after the n-th mutating
// operation: it returned, and was lost unless it was a sync.
func TestCutAfter(t *testing.T) {
	t.Parallel()
	e := setup(t, map[string]string{"a": ""})
	f := e.open("a", os.O_RDWR)
	e.fs.CutAfter(3, nil)
	e.writeAt(f, "1", 0)
	e.sync(f)
	e.writeAt(f, "2", 1) // the third: returns, then the power goes
	select {
	case <-e.fs.Done():
	default:
		t.Fatal("no cut after the third operation")
	}
	if _, err := f.WriteAt([]byte("3"), 2); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fourth operation: %v, want EIO", err)
	}
	got, _ := e.cut(nil)
	if !equal(got, map[string]string{"a": "1"}) {
		t.Fatalf("after the cut: %q", got)
	}
}

// TestTear: with CutOptions.Tear, a file keeps a prefix of its unsynced
// writes, the last one possibly torn at a sector boundary, and nothing
// else: every outcome over many seeds is one of those the model allows,
// and the seeds reach torn writes, whole prefixes and total loss.
func TestTear(t *testing.T) {
	t.Parallel()
	const synced = 3 * forgetfs.SectorSize
	base := bytes.Repeat([]byte{'s'}, synced)
	writes := []struct {
		off int64
		b   []byte
	}{
		{100, bytes.Repeat([]byte{'a'}, 1500)},                     // overwrites, spans sectors
		{synced, bytes.Repeat([]byte{'b'}, 2*forgetfs.SectorSize)}, // appends
		{700, bytes.Repeat([]byte{'c'}, 10)},                       // inside one sector: never torn
	}
	// allowed lists every content the folder may hold: the synced base
	// with writes[:k] applied and writes[k] applied up to a boundary.
	allowed := map[string]string{}
	state := append([]byte(nil), base...)
	for _, w := range writes {
		allowed[string(state)] = "prefix"
		for b := (w.off/forgetfs.SectorSize + 1) * forgetfs.SectorSize; b < w.off+int64(len(w.b)); b += forgetfs.SectorSize {
			allowed[string(applyAt(append([]byte(nil), state...), w.off, w.b[:b-w.off]))] = "torn"
		}
		state = applyAt(state, w.off, w.b)
	}
	allowed[string(state)] = "prefix"
	seen := map[string]int{}
	for seed := range uint64(24) {
		e := setup(t, map[string]string{"f": string(base)})
		f := e.open("f", os.O_RDWR)
		for _, w := range writes {
			e.writeAt(f, string(w.b), w.off)
		}
		got, rep := e.cut(&forgetfs.CutOptions{Tear: true, Rand: rand.New(rand.NewPCG(seed, 1))})
		kind, ok := allowed[got["f"]]
		if !ok {
			t.Fatalf("seed %d: the torn file (%d bytes) is no prefix of the writes; report %+v", seed, len(got["f"]), rep)
		}
		if (kind == "torn") != (rep.Torn == 1) {
			t.Fatalf("seed %d: outcome %s, report %+v", seed, kind, rep)
		}
		switch {
		case kind == "torn":
			seen["torn"]++
		case got["f"] == string(base):
			seen["none kept"]++
		default:
			seen["whole prefix"]++
		}
	}
	if seen["torn"] == 0 || seen["none kept"] == 0 || seen["whole prefix"] == 0 {
		t.Fatalf("24 seeds reached only %v", seen)
	}
	t.Logf("24 torn cuts: %v", seen)
}

// TestMountRefusesBadConfig: a Mount without its folders is an invalid
// argument, and mounts nothing.
func TestMountRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []forgetfs.Config{{}, {Backing: t.TempDir()}, {Mountpoint: t.TempDir()}} {
		if _, err := forgetfs.Mount(context.Background(), cfg); !errors.Is(err, mqlite.ErrInvalidArgument) {
			t.Fatalf("Mount(%+v): %v, want ErrInvalidArgument", cfg, err)
		}
	}
}
