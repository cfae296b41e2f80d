package forgetfs

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a file or folder of the mount: go-fuse's loopback node, with
// every operation that changes the folder recorded first (see FS) and
// every operation refused once the power is cut. In go-fuse the node's
// methods take precedence over the file handle's, so no write reaches the
// folder around them.
type node struct {
	*fs.LoopbackNode
	f *FS
}

// WrapChild makes every node the loopback creates (by lookup, create or
// link) a node of this file system.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), f: n.f}
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeReader         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeWrapChilder    = (*node)(nil)
)

// path is the node's path in the backing folder.
func (n *node) path() string { return filepath.Join(n.f.backing, n.Path(n.Root())) }

// handle is an open file of the mount. It keeps the loopback's file for
// release, flush, attributes and seeks, and deliberately offers no
// passthrough descriptor (fs.FilePassthroughFder): with one, the kernel
// would read and write the backing file itself.
type handle struct {
	lf *fs.LoopbackFile
	fd int
}

var (
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)
)

func newHandle(fh fs.FileHandle) (*handle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		lf.Release(context.Background())
		return nil, syscall.EBADF
	}
	return &handle{lf: lf, fd: fd}, 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

func fdOf(f fs.FileHandle) (int, syscall.Errno) {
	h, ok := f.(*handle)
	if !ok {
		return -1, syscall.EBADF
	}
	return h.fd, 0
}

// Lookup finds a name, while the power is on.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	errno = n.f.read(func() syscall.Errno {
		ch, errno = n.LoopbackNode.Lookup(ctx, name, out)
		return errno
	})
	return ch, errno
}

// Getattr reads attributes, while the power is on.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return n.f.read(func() syscall.Errno { return n.LoopbackNode.Getattr(ctx, f, out) })
}

// Open opens the file; O_TRUNC counts as a truncation to 0.
func (n *node) Open(ctx context.Context, flags uint32) (fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	open := func() syscall.Errno {
		var lf fs.FileHandle
		if lf, fuseFlags, errno = n.LoopbackNode.Open(ctx, flags&^syscall.O_TRUNC); errno != 0 {
			return errno
		}
		fh, errno = newHandle(lf)
		return errno
	}
	if flags&syscall.O_TRUNC == 0 {
		errno = n.f.read(open)
		return fh, fuseFlags, errno
	}
	errno = n.f.mutate(func() syscall.Errno {
		if errno := open(); errno != 0 {
			return errno
		}
		h := fh.(*handle)
		if err := n.f.recordTruncate(h.fd, 0); err != nil {
			return fs.ToErrno(err)
		}
		return fs.ToErrno(syscall.Ftruncate(h.fd, 0))
	})
	if errno != 0 && fh != nil {
		fh.(*handle).Release(ctx)
		fh = nil
	}
	return fh, fuseFlags, errno
}

// Create creates a file: a new name in the folder, and a new file whose
// synced content is empty.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (ch *fs.Inode, fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	errno = n.f.mutate(func() syscall.Errno {
		dir := n.path()
		if err := n.f.touchDir(dir); err != nil {
			return fs.ToErrno(err)
		}
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(dir, name), &st) == nil {
			return syscall.EEXIST // the kernel asks Create only for a missing name
		}
		var lf fs.FileHandle
		if ch, lf, fuseFlags, errno = n.LoopbackNode.Create(ctx, name, flags&^syscall.O_TRUNC, mode, out); errno != 0 {
			return errno
		}
		fh, errno = newHandle(lf)
		return errno
	})
	return ch, fh, fuseFlags, errno
}

// Read reads from the file as the processes left it, synced or not.
func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (res fuse.ReadResult, errno syscall.Errno) {
	errno = n.f.read(func() syscall.Errno {
		fd, errno := fdOf(f)
		if errno != 0 {
			return errno
		}
		got := 0
		for got < len(dest) {
			k, err := syscall.Pread(fd, dest[got:], off+int64(got))
			if err != nil {
				return fs.ToErrno(err)
			}
			if k == 0 {
				break
			}
			got += k
		}
		res = fuse.ReadResultData(dest[:got])
		return 0
	})
	return res, errno
}

// Write writes through, after noting what it replaces.
func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (written uint32, errno syscall.Errno) {
	errno = n.f.mutate(func() syscall.Errno {
		fd, errno := fdOf(f)
		if errno != 0 {
			return errno
		}
		if err := n.f.recordWrite(fd, off, data); err != nil {
			return fs.ToErrno(err)
		}
		k, err := syscall.Pwrite(fd, data, off)
		written = uint32(k)
		return fs.ToErrno(err)
	})
	return written, errno
}

// Fsync (and fdatasync) makes the file's content durable: its record goes.
// The folder's names that lead to it are not synced by it.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	return n.f.mutate(func() syscall.Errno {
		var st syscall.Stat_t
		var err error
		if fd, errno := fdOf(f); errno == 0 {
			err = syscall.Fstat(fd, &st)
		} else {
			err = syscall.Stat(n.path(), &st)
		}
		if err != nil {
			return fs.ToErrno(err)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			n.f.syncDirIno(st.Ino)
		} else {
			n.f.syncFile(st.Ino)
		}
		return 0
	})
}

// Setattr changes attributes; a new size counts as a truncation.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, ok := in.GetSize()
	if !ok {
		return n.f.read(func() syscall.Errno { return n.LoopbackNode.Setattr(ctx, f, in, out) })
	}
	return n.f.mutate(func() syscall.Errno {
		fd, errno := fdOf(f)
		if errno != 0 {
			// A truncate(2) by name: open the backing file for it.
			ffd, err := syscall.Open(n.path(), syscall.O_RDWR, 0)
			if err != nil {
				return fs.ToErrno(err)
			}
			defer syscall.Close(ffd)
			fd = ffd
		}
		if err := n.f.recordTruncate(fd, int64(size)); err != nil {
			return fs.ToErrno(err)
		}
		if err := syscall.Ftruncate(fd, int64(size)); err != nil {
			return fs.ToErrno(err)
		}
		rest := *in // the other attributes, set by name
		rest.Valid &^= fuse.FATTR_SIZE
		return n.LoopbackNode.Setattr(ctx, f, &rest, out)
	})
}

// Allocate grows the file (mode 0) or reserves space (FALLOC_FL_KEEP_SIZE);
// punching or zeroing ranges is refused.
func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	const keepSize = 0x01
	if mode&^keepSize != 0 {
		return syscall.EOPNOTSUPP
	}
	return n.f.mutate(func() syscall.Errno {
		fd, errno := fdOf(f)
		if errno != 0 {
			return errno
		}
		if err := n.f.recordWrite(fd, int64(off), nil); err != nil {
			return fs.ToErrno(err)
		}
		return fs.ToErrno(syscall.Fallocate(fd, mode, int64(off), int64(size)))
	})
}

// CopyFileRange is refused, so that the kernel copies by reads and writes.
func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Unlink removes a name. The file goes to the grave, not away: a cut puts
// a synced name back.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.f.mutate(func() syscall.Errno {
		dir := n.path()
		p := filepath.Join(dir, name)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return fs.ToErrno(err)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return syscall.EISDIR
		}
		if err := n.f.touchDir(dir); err != nil {
			return fs.ToErrno(err)
		}
		return fs.ToErrno(n.f.bury(p))
	})
}

// Rename moves a file's name; a file it replaces goes to the grave.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	const noReplace = 0x1 // RENAME_NOREPLACE
	to, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^noReplace != 0 {
		return syscall.EOPNOTSUPP
	}
	return n.f.mutate(func() syscall.Errno {
		from, dst := filepath.Join(n.path(), name), filepath.Join(to.path(), newName)
		var st syscall.Stat_t
		if err := syscall.Lstat(from, &st); err != nil {
			return fs.ToErrno(err)
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return syscall.EOPNOTSUPP
		}
		for _, dir := range []string{n.path(), to.path()} {
			if err := n.f.touchDir(dir); err != nil {
				return fs.ToErrno(err)
			}
		}
		var old syscall.Stat_t
		if syscall.Lstat(dst, &old) == nil {
			if flags&noReplace != 0 {
				return syscall.EEXIST
			}
			if old.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				return syscall.EISDIR
			}
			if old.Ino == st.Ino {
				return 0 // two names of one file: rename(2) does nothing
			}
			if err := n.f.bury(dst); err != nil {
				return fs.ToErrno(err)
			}
		}
		return fs.ToErrno(syscall.Rename(from, dst))
	})
}

// Link adds a name to a file.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	errno = n.f.mutate(func() syscall.Errno {
		if err := n.f.touchDir(n.path()); err != nil {
			return fs.ToErrno(err)
		}
		ch, errno = n.LoopbackNode.Link(ctx, target, name, out)
		return errno
	})
	return ch, errno
}

// OpendirHandle opens the folder for listing and for fsync.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	errno = n.f.read(func() syscall.Errno {
		ds, errno := fs.NewLoopbackDirStream(n.path())
		if errno != 0 {
			return errno
		}
		fh = &dirHandle{DirStream: ds, n: n}
		return 0
	})
	return fh, 0, errno
}

// dirHandle is an open folder: a listing, and fsync of its names.
type dirHandle struct {
	fs.DirStream
	n *node
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !d.HasNext() {
		return nil, 0
	}
	e, errno := d.Next()
	if errno != 0 {
		return nil, errno
	}
	return &e, 0
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) { d.Close() }

// Fsyncdir makes the folder's names durable.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, nil, flags)
}

// Mkdir is refused: only regular files are tracked.
func (n *node) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EOPNOTSUPP
}

// Rmdir is refused: only regular files are tracked.
func (n *node) Rmdir(context.Context, string) syscall.Errno { return syscall.EOPNOTSUPP }

// Symlink is refused: only regular files are tracked.
func (n *node) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EOPNOTSUPP
}

// Mknod is refused: only regular files are tracked.
func (n *node) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EOPNOTSUPP
}

// Tmpfile (O_TMPFILE) is refused: the loopback's handle would write around
// the record.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}
