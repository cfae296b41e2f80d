// Package forgetfs is a file system for tests that forgets what was not
// synced, as a machine does when its power goes.
//
// It is a FUSE passthrough over a backing folder: every operation goes
// through to the folder at once, so the processes using the mount read
// their own writes, unsynced or not, as they would from a page cache. What
// it adds is a record of what each write destroyed: the bytes a write or a
// truncation replaced and the size before it, per file, since the file's
// last fsync or fdatasync; and the names of each folder, as of the
// folder's last fsync, before its first create, unlink, rename or link
// since. Cut is the power cut: it rolls the folder back to what was synced
// (every file to its content at its last sync, every folder to its names
// at its last sync; a file no synced name leads to is gone), and from then
// on every operation fails with EIO. With CutOptions.Tear, each file keeps
// instead a random prefix of its unsynced writes and maybe the first
// sectors of the next one, as a disk that lost power half-way through may
// leave it. With CutOptions.Reorder, each file keeps any subset of its
// unsynced writes, put down in any order, as a disk that reorders its
// write cache may leave it.
//
// SQLite as mqlite opens it maps only the -shm file into memory (its
// mmap_size is 0): the kernel writes those pages back as ordinary writes,
// and nothing syncs them, so a cut takes them; SQLite rebuilds that index
// from the WAL when the file is next opened.
//
// The mount's view when it starts, the backing folder as it is, counts as
// synced. Only regular files are tracked: creating or removing folders,
// symlinks and device nodes is refused (ENOTSUP), and so is O_TMPFILE.
// Locks (flock, fcntl) are the kernel's own on the mount, so they vanish
// with the processes that held them and with the mount.
//
// A process must not use the mount it serves: a page fault on a mapped
// file of the mount (SQLite's -shm) would wait for a server goroutine that
// the stopped world cannot run. The tests run their stores in child
// processes.
package forgetfs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/mqlite/mqlite"
)

// ErrUnavailable is the error of a Mount that FUSE cannot serve here (no
// /dev/fuse, no permission to mount): a test skips on it.
var ErrUnavailable = errors.New("forgetfs: FUSE is not available")

// SectorSize is the unit a torn write is cut at (CutOptions.Tear).
const SectorSize = 512

// Config configures Mount.
type Config struct {
	// Backing is the folder the mount shows; it must exist. Its contents
	// when Mount is called count as synced.
	Backing string
	// Mountpoint is an empty folder to mount on.
	Mountpoint string
	// Debug logs every FUSE request. Defaults to false.
	Debug bool
}

// CutOptions are the options of one power cut; nil means the defaults.
type CutOptions struct {
	// Tear keeps, of each file's unsynced writes, a random prefix (none,
	// some or all of them) and, of the write after it, the part up to a
	// random SectorSize boundary inside it (when it spans one), or none.
	// Defaults to false: every unsynced write is lost.
	Tear bool
	// Reorder keeps instead any subset of each file's unsynced writes and
	// truncations, each kept or lost on its own, and puts the kept ones
	// down in a random order: a disk's write cache promises no order
	// before a sync. With Tear too, a kept write that spans a sector
	// boundary may keep any subset of its sectors. Defaults to false.
	Reorder bool
	// Rand chooses the prefixes and tears. Defaults to a random source.
	Rand *rand.Rand
}

// Report is what a cut took away.
type Report struct {
	Files     int   // files rolled back to their synced content
	Writes    int   // unsynced writes and truncations undone in whole
	Torn      int   // writes kept in part (Tear)
	Kept      int   // unsynced writes kept in whole (Tear, Reorder)
	Reordered int   // kept writes put down before an earlier write of their file, or without it (Reorder)
	Bytes     int64 // bytes of undone writes
	Entries   int   // folder entries removed or put back
}

// FS is a mounted forgetful file system. Its methods are safe for
// concurrent use.
type FS struct {
	backing string
	grave   string // unlinked and replaced files wait here until a cut or the unmount
	server  *fuse.Server

	unmount   sync.Mutex
	unmounted bool

	mu      sync.RWMutex
	ops     int               // mutating operations so far
	armAt   int               // cut after this many ops; 0: not armed
	armOpts *CutOptions       // the armed cut's options
	files   map[uint64]*undos // per backing inode: what its unsynced writes replaced
	dirs    map[uint64]map[string]uint64
	graves  int
	down    bool // the power is cut
	report  Report
	cutErr  error
	cutDone chan struct{} // closed by the cut
}

// undos is one file's record since its last sync, oldest first.
type undos []undo

// undo restores what one write or truncation replaced: the file's size
// before it, and the bytes it overwrote (old, from off) within that size.
// It keeps what the write put (data) too, for a cut that reorders.
type undo struct {
	off   int64 // where the write began; the new size of a truncation
	n     int64 // bytes written; 0 for a truncation or an allocation
	old   []byte
	size  int64
	data  []byte // the bytes written
	trunc bool
}

// Mount mounts a forgetful view of cfg.Backing on cfg.Mountpoint. It fails
// with ErrUnavailable when FUSE cannot mount here, and with
// mqlite.ErrInvalidArgument without a Backing or a Mountpoint. Unmount it
// when done.
func Mount(ctx context.Context, cfg Config) (*FS, error) {
	if cfg.Backing == "" || cfg.Mountpoint == "" {
		return nil, fmt.Errorf("forgetfs: %w: Backing and Mountpoint are required", mqlite.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	backing, err := filepath.Abs(cfg.Backing)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("forgetfs: backing folder: %w", err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	// Beside the backing folder: on its file system, so renames into it
	// keep the inode, and out of the mount's view.
	grave, err := os.MkdirTemp(filepath.Dir(backing), "."+filepath.Base(backing)+".forgetfs-*")
	if err != nil {
		return nil, err
	}
	f := &FS{backing: backing, grave: grave, files: map[uint64]*undos{}, dirs: map[uint64]map[string]uint64{},
		cutDone: make(chan struct{})}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.RootNode = &node{LoopbackNode: &fs.LoopbackNode{RootData: root}, f: f} // its children: node.WrapChild
	zero := time.Duration(0)
	server, err := fs.Mount(cfg.Mountpoint, root.RootNode, &fs.Options{
		// No kernel caching of names or attributes: after a cut and a
		// remount nothing stale can be served, and every lookup reaches
		// the folder as it is.
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName: "forgetfs", Name: "forgetfs", DirectMountStrict: true, Debug: cfg.Debug,
			DisableXAttrs: true,
		},
	})
	if err != nil {
		_ = os.RemoveAll(grave)
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	f.server = server
	return f, nil
}

// Ops returns how many mutating operations (writes, truncations, syncs,
// creates, unlinks, renames, links) the mount has served.
func (f *FS) Ops() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.ops
}

// CutAfter arms a cut: it happens right after the n-th mutating operation
// from now returns to its caller (n ≥ 1), with opts. The operation that
// follows fails with EIO. Done tells when it has happened.
func (f *FS) CutAfter(n int, opts *CutOptions) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armAt, f.armOpts = f.ops+max(n, 1), opts
}

// Done is closed once the power has been cut (by Cut or an armed cut).
func (f *FS) Done() <-chan struct{} { return f.cutDone }

// Cut cuts the power now: it rolls the backing folder back to what was
// synced and fails every later operation with EIO. It returns what it
// took away; a second Cut returns the first one's report.
func (f *FS) Cut(ctx context.Context, opts *CutOptions) (Report, error) {
	if err := ctx.Err(); err != nil {
		return Report{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutLocked(opts)
	return f.report, f.cutErr
}

// Result returns the report of the cut that happened (zero before one).
func (f *FS) Result() (Report, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.report, f.cutErr
}

// Unmount unmounts the file system. Without a cut before it, what was
// written stays, synced or not (a clean shutdown). The processes using the
// mount must have closed their files (or died) first: it retries until
// they have, or ctx ends. Once it has succeeded, later calls do nothing.
func (f *FS) Unmount(ctx context.Context) error {
	f.unmount.Lock()
	defer f.unmount.Unlock()
	if f.unmounted {
		return nil
	}
	var err error
	for {
		if err = f.server.Unmount(); err == nil {
			break
		}
		// The kernel lets go of a dead process's files a moment after
		// its exit is seen.
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("forgetfs: unmount: %w (%w)", err, ctx.Err())
		case <-t.C:
		}
	}
	f.server.Wait()
	f.unmounted = true
	return os.RemoveAll(f.grave)
}

// mutate runs fn as one mutating operation: refused with EIO once the
// power is cut, counted, and followed by the armed cut when it is due.
func (f *FS) mutate(fn func() syscall.Errno) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return syscall.EIO
	}
	errno := fn()
	if errno == 0 {
		f.ops++
		if f.armAt > 0 && f.ops >= f.armAt {
			f.cutLocked(f.armOpts)
		}
	}
	return errno
}

// read runs fn as an operation that changes nothing.
func (f *FS) read(fn func() syscall.Errno) syscall.Errno {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.down {
		return syscall.EIO
	}
	return fn()
}

// recordWrite notes what writing data at off to the file open as fd is
// about to replace; data is nil for an allocation.
func (f *FS) recordWrite(fd int, off int64, data []byte) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	n := int64(len(data))
	u := undo{off: off, n: n, size: st.Size, data: slices.Clone(data)}
	if end := min(off+n, st.Size); end > off {
		u.old = make([]byte, end-off)
		if err := readAt(fd, u.old, off); err != nil {
			return err
		}
	}
	f.push(st.Ino, u)
	return nil
}

// readAt fills b from the file open as fd at off. A file opened write-only
// is read through a second descriptor of the same inode, which works for an
// unlinked file too.
func readAt(fd int, b []byte, off int64) error {
	for done := 0; done < len(b); {
		n, err := syscall.Pread(fd, b[done:], off+int64(done))
		if errors.Is(err, syscall.EBADF) {
			r, oerr := os.Open("/proc/self/fd/" + strconv.Itoa(fd))
			if oerr != nil {
				return err
			}
			defer r.Close()
			_, err = r.ReadAt(b[done:], off+int64(done))
			return err
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return errors.New("forgetfs: the file is shorter than its size")
		}
		done += n
	}
	return nil
}

// recordTruncate notes what setting the size of the file open as fd to
// size is about to replace.
func (f *FS) recordTruncate(fd int, size int64) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	u := undo{off: size, size: st.Size, trunc: true}
	if size < st.Size {
		u.old = make([]byte, st.Size-size)
		if err := readAt(fd, u.old, size); err != nil {
			return err
		}
	}
	f.push(st.Ino, u)
	return nil
}

func (f *FS) push(ino uint64, u undo) {
	l := f.files[ino]
	if l == nil {
		l = &undos{}
		f.files[ino] = l
	}
	*l = append(*l, u)
}

// syncFile makes the file's content durable: its record goes.
func (f *FS) syncFile(ino uint64) { delete(f.files, ino) }

// touchDir records the names of the folder at path as synced, unless a
// change since its last sync already did.
func (f *FS) touchDir(path string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return err
	}
	if _, ok := f.dirs[st.Ino]; ok {
		return nil
	}
	names, err := listDir(path)
	if err != nil {
		return err
	}
	f.dirs[st.Ino] = names
	return nil
}

// syncDirIno makes the names of the folder with inode ino durable.
func (f *FS) syncDirIno(ino uint64) { delete(f.dirs, ino) }

// bury moves the file at path out of the mount's view instead of deleting
// it: a cut may need its inode back under a synced name.
func (f *FS) bury(path string) error {
	f.graves++
	return os.Rename(path, filepath.Join(f.grave, strconv.Itoa(f.graves)))
}

// listDir maps each name in the folder to its inode.
func listDir(path string) (map[string]uint64, error) {
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	names := make(map[string]uint64, len(entries))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		names[e.Name()] = info.Sys().(*syscall.Stat_t).Ino
	}
	return names, nil
}

// cutLocked is the power cut; f.mu is held.
func (f *FS) cutLocked(opts *CutOptions) {
	if f.down {
		return
	}
	f.down = true
	defer close(f.cutDone)
	if opts == nil {
		opts = &CutOptions{}
	}
	rng := opts.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	f.cutErr = f.rollBack(opts, rng)
}

// rollBack puts the backing folder back as it was synced: file contents
// first, while every inode still has a name somewhere (in the folder or in
// the grave), then the folders' names.
func (f *FS) rollBack(opts *CutOptions, rng *rand.Rand) error {
	where, err := f.inodes()
	if err != nil {
		return err
	}
	for ino, l := range f.files {
		paths := where[ino]
		if len(paths) == 0 || len(*l) == 0 {
			continue
		}
		undo := f.undoFile
		if opts.Reorder {
			undo = f.reorderFile
		}
		if err := undo(paths[0], *l, opts.Tear, rng); err != nil {
			return err
		}
	}
	// Names first taken away (to the grave, where a synced name elsewhere
	// can find the inode), then the synced names put back.
	for dino, synced := range f.dirs {
		dir := where[dino][0]
		now, err := listDir(dir)
		if err != nil {
			return err
		}
		for name, ino := range now {
			if was, ok := synced[name]; ok && was == ino {
				continue
			}
			from := filepath.Join(dir, name)
			if err := f.bury(from); err != nil {
				return err
			}
			where[ino] = replace(where[ino], from, filepath.Join(f.grave, strconv.Itoa(f.graves)))
			f.report.Entries++
		}
	}
	for dino, synced := range f.dirs {
		dir := where[dino][0]
		for name, ino := range synced {
			to := filepath.Join(dir, name)
			if _, err := os.Lstat(to); err == nil {
				continue
			}
			if len(where[ino]) == 0 {
				return fmt.Errorf("forgetfs: the inode of synced name %s is gone", to)
			}
			if err := os.Link(where[ino][0], to); err != nil {
				return err
			}
			where[ino] = append(where[ino], to)
			f.report.Entries++
		}
	}
	f.files, f.dirs = map[uint64]*undos{}, map[uint64]map[string]uint64{}
	if err := os.RemoveAll(f.grave); err != nil {
		return err
	}
	return os.Mkdir(f.grave, 0o700)
}

func replace(paths []string, old, with string) []string {
	for i, p := range paths {
		if p == old {
			paths[i] = with
		}
	}
	return paths
}

// inodes maps every inode of the backing folder and the grave to its
// paths.
func (f *FS) inodes() (map[uint64][]string, error) {
	where := map[uint64][]string{}
	for _, top := range []string{f.backing, f.grave} {
		err := filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			ino := info.Sys().(*syscall.Stat_t).Ino
			where[ino] = append(where[ino], path)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return where, nil
}

// undoFile undoes the unsynced writes l of the file at path, newest first.
// With tear, a random prefix of them stays, its last write torn at a
// sector boundary when it spans one.
func (f *FS) undoFile(path string, l undos, tear bool, rng *rand.Rand) error {
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer file.Close()
	keep := 0
	if tear {
		keep = rng.IntN(len(l) + 1)
	}
	f.report.Files++
	f.report.Kept += keep
	for i := len(l) - 1; i >= keep; i-- {
		u := l[i]
		cut := int64(0) // bytes of the write kept, from u.off
		if tear && i == keep && u.n > 0 {
			// Keep the write up to a sector boundary strictly inside it,
			// or none of it.
			first := (u.off/SectorSize + 1) * SectorSize
			if first < u.off+u.n {
				bounds := (u.off+u.n-1-first)/SectorSize + 1
				if k := rng.Int64N(bounds + 1); k > 0 {
					cut = first + (k-1)*SectorSize - u.off
					f.report.Torn++
				}
			}
		}
		if cut == 0 {
			f.report.Writes++
			f.report.Bytes += u.n
		}
		if err := putBack(file, u, cut); err != nil {
			return err
		}
	}
	return nil
}

// putBack undoes one write or truncation of file, all but its first cut
// bytes (from u.off).
func putBack(file *os.File, u undo, cut int64) error {
	size := u.size
	if cut > 0 {
		size = max(size, u.off+cut)
	}
	if err := file.Truncate(size); err != nil {
		return err
	}
	if int64(len(u.old)) > cut {
		if _, err := file.WriteAt(u.old[cut:], u.off+cut); err != nil {
			return err
		}
	}
	return nil
}
