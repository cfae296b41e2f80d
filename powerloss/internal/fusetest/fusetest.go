// Package fusetest mounts a forgetful file system for a test: it skips the
// test where FUSE cannot mount, except under MQLITE_REQUIRE_SERVICES=1
// (CI), where that fails it.
package fusetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqlite/mqlite/powerloss/forgetfs"
)

// Mount mounts a forgetful view of backing on a new folder and unmounts it
// when the test ends (unless the test did). It returns the file system and
// its mountpoint.
func Mount(t testing.TB, backing string) (*forgetfs.FS, string) {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := forgetfs.Mount(context.Background(), forgetfs.Config{Backing: backing, Mountpoint: mnt})
	if errors.Is(err, forgetfs.ErrUnavailable) && os.Getenv("MQLITE_REQUIRE_SERVICES") != "1" {
		t.Skipf("no FUSE here: %v", err)
	}
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.Unmount(ctx); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f, mnt
}
