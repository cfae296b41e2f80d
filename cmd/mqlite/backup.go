package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite/internal/wire"
)

func backupCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "backup DEST", Short: "write a consistent copy of the store to a new file", Args: exactArgs(1),
		Long: `backup writes a consistent copy of the store to DEST, which must not exist.
Through a broker (--url) DEST is a plain file name in the folder the broker
was started with (mqlite serve --backup-dir); without one the broker refuses.
On a terminal a bar shows the bytes written so far (of a local file) or the
time taken.`,
		Example: `  mqlite backup app-2026-01-02.db --db app.db
  mqlite backup app-2026-01-02.db --url http://127.0.0.1:7420 --key $ADMIN_KEY`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.read(cmd.Context(), func(b backend) error {
				stop := g.backupBar(args[0])
				err := b.Backup(cmd.Context(), args[0])
				stop()
				if err != nil {
					return err
				}
				return g.emit(wire.BackupRequest{Path: args[0]}, func(w io.Writer) { fmt.Fprintf(w, "backed up to %s\n", args[0]) })
			})
		},
	}
}

// backupBar draws the progress of a backup into dst while it runs, until
// the returned stop is called. Of a local file it counts the bytes of the
// copy being written (Store.Backup writes it beside dst under a temporary
// name) against the size of the store's file; through a broker it can only
// show the time taken.
func (g *globals) backupBar(dst string) (stop func()) {
	size := int64(-1)
	if fi, err := os.Stat(g.db); err == nil && g.url == "" {
		size = fi.Size()
	}
	bar := g.bar(size, "backing up", "bytes")
	if size < 0 || !g.barShown() {
		return func() { _ = bar.Finish() }
	}
	done, finished := make(chan struct{}), make(chan struct{})
	pattern := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".mqlite-backup-*")
	go func() {
		defer close(finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			names, _ := filepath.Glob(pattern)
			for _, n := range names {
				if fi, err := os.Stat(n); err == nil {
					_ = bar.Set64(min(fi.Size(), size))
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		_ = bar.Finish()
	}
}
