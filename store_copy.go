package mqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/mqlite/mqlite/schema"
)

// CopyReport is what Copy copied: the rows of each table, the messages by
// state, and whether the target held this very copy already.
type CopyReport = schema.CopyReport

// CopyOptions tunes Copy.
type CopyOptions struct {
	// Progress, when set, is called after each batch of rows written into
	// the target, with the table and how many of its rows are written so
	// far. The batches are inside the copy's one transaction: nothing is
	// visible in the target before the copy commits.
	Progress func(table string, rows int64)
}

// Copy copies the store in the SQLite file from into the PostgreSQL
// database at the URL to, for moving an application from one to the
// other: its queues and their settings, its messages in every state (with
// their leases, delivery counts and bodies), its schedules, topics,
// subscriptions and access keys, and the records that answer retries
// (dedup entries, settlement receipts, receive attempts, commit records),
// so that a producer or a consumer that retries across the move is
// answered as the file would have answered it. Then a store opened on to
// (Open with the URL) takes up where the file left off, and no send
// reuses an id the file gave.
//
// Copy takes the file's locks as Open does: while a store has the file
// open it fails with ErrDBLocked, so that nothing is sent into the file
// after the copy read it (stop the application first). It reads the file
// in one read transaction and never changes what it holds (closing the
// read may fold the file's write-ahead log back into it, as closing a
// store does); the file must hold a store of this binary's layout
// (ErrNoStore, ErrMigrationNeeded: run Migrate first). The database gets mqlite's layout when it has none, and the
// copy is one transaction on it: a failure, a cancelled ctx or a killed
// process leaves it without a row. A database that already holds a
// queue, a message, a topic, a schedule or an access key is refused
// (ErrTargetNotEmpty, nothing written), but for one that holds this very
// copy: running Copy again with the same file, after a success or after
// an error that left the outcome unknown, answers the report of the copy
// that committed, with AlreadyCopied set, and writes nothing.
func Copy(ctx context.Context, from, to string, opts CopyOptions) (CopyReport, error) {
	switch {
	case from == "" || IsPostgresURL(from):
		return CopyReport{}, invalidf(ErrInvalidArgument, "copy: the source must be the path of a SQLite file")
	case !IsPostgresURL(to):
		return CopyReport{}, invalidf(ErrInvalidArgument, "copy: the target must be a PostgreSQL URL (postgres://...)")
	}
	canon, err := canonicalPath(from)
	if err != nil {
		return CopyReport{}, fmt.Errorf("copy %s: %w", from, err)
	}
	// Taking the lock would create a missing file.
	if _, err := os.Stat(canon); errors.Is(err, fs.ErrNotExist) {
		return CopyReport{}, fmt.Errorf("copy %s: %w: no file there", from, ErrNoStore)
	} else if err != nil {
		return CopyReport{}, fmt.Errorf("copy %s: %w", from, err)
	}
	lock, err := lockFile(ctx, canon, Config{})
	if err != nil {
		return CopyReport{}, fmt.Errorf("copy %s: %w", from, err)
	}
	defer func() { _ = lock.unlock() }()
	// Read-write but query-only, as probe's: SQLite then removes on close
	// the -wal and -shm files it made.
	src, err := sql.Open("sqlite", "file:"+canon+"?mode=rw&_pragma=query_only(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		return CopyReport{}, fmt.Errorf("copy %s: %w", from, err)
	}
	defer src.Close()
	src.SetMaxOpenConns(1)
	dst, err := openPostgresURL(to)
	if err != nil {
		return CopyReport{}, err
	}
	defer dst.Close()
	rep, err := schema.CopyToPostgres(ctx, src, dst, schema.CopyOptions{
		Source: canon, Now: millis(SystemClock{}.Now()), Progress: opts.Progress,
	})
	if err != nil {
		return CopyReport{}, fmt.Errorf("copy %s into %s: %w", from, redactURL(to), err)
	}
	return rep, nil
}
