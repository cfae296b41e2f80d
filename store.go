package mqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/groupcommit"
	"github.com/mqlite/mqlite/internal/handoff"
	"github.com/mqlite/mqlite/internal/notify"
	"github.com/mqlite/mqlite/internal/receivers"
	"github.com/mqlite/mqlite/internal/tally"
	"github.com/mqlite/mqlite/schema"
)

// Store is an open mqlite file: the queues, the messages, and the one
// connection every statement of the process goes through. A Store is safe
// for concurrent use. Close it when done.
type Store struct {
	id      int64         // unique in the process: mqlite_store_id() on its connection
	eng     driver.Driver // the engine: every statement of the store goes through it
	layout  layout        // the engine's mqlite objects: check, version, migrate
	db      *sql.DB
	release func()
	lock    fileLock
	opts    Config
	path    string
	notify  *notify.Notifier
	bounds  *driver.DueBounds // until when nothing of a queue is due
	queues  queueCache
	loops   loops
	tally   tally.Tally // the counts of Metrics
	// receivers is the live registry of Receivers, and of the settlements
	// inside a caller's transaction that its commit applies.
	receivers *receivers.Registry[ReceiverTag, Message]
	// handoffs are the sleeping Receives a commit claims for.
	handoffs handoff.Registry[Message, ReceiveOptions]
	// group runs the callers of Tx in group commits.
	group *groupcommit.Committer[func(tx *Tx) error, stepMark]
	// txAlone: each call of Tx runs in a transaction of its own on the
	// caller's goroutine (a pool's engine, txAloneOnPool), not in a group.
	txAlone bool

	migration Migration // what open did to the file's layout
	// readOnly: the store's sessions cannot write (a PostgreSQL role or
	// URL whose transactions are READ ONLY, or a standby). Open then
	// neither creates nor migrates (as with Config.ExistingOnly), no
	// background loop runs, and the operator reads do not catch a queue up
	// (catchUp).
	readOnly bool

	scheduleWake chan struct{} // a schedule changed (see scheduleLoop)

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error

	// The file lock is released once Close has begun and the connection has
	// closed, whichever comes last (see Close).
	conns     atomic.Int64 // open connections: 0 or 1
	unlock    sync.Once
	unlocked  chan struct{}
	unlockErr error
}

// Open opens (creating when missing, with mode 0600) the mqlite file at path.
//
// It takes an advisory lock on "<path>.lock" and one on the file itself,
// keyed on the canonical path so that every spelling of the file (relative,
// absolute, through a symlink) collides: a second Open of the same file, in
// this process or another, fails at once with ErrDBLocked, even if the
// sidecar was deleted or renamed meanwhile; with Config.WaitForLock it waits
// for the other store to go instead (a hot standby). It then checks the schema guard
// (a file written by an incompatible mqlite, or a foreign file with a table
// of a name mqlite uses, is refused with ErrSchemaVersionMismatch and left
// untouched), puts the file in WAL mode, and applies the embedded
// migrations. Every lease left in the file by an earlier process is then
// released (recovery: back to active, or dead-lettered when it was the last
// allowed delivery), and the background loops of Config start.
//
// The store holds one connection: database/sql queues every statement onto
// it, which is what makes each claim atomic without locks. Cancelling ctx
// abandons the open, a wait for the lock included.
func Open(ctx context.Context, path string, opts Config) (*Store, error) {
	if path == "" {
		return nil, fmt.Errorf("open: %w", errors.Join(ErrInvalidArgument, errors.New("empty path")))
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	if IsPostgresURL(path) {
		return openPostgres(ctx, path, opts)
	}
	canon, err := canonicalPath(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if opts.ExistingOnly {
		if err := probe(ctx, canon); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	lock, err := lockFile(ctx, canon, opts)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := newStore(sqlite, sqliteLayout, canon, opts)
	s.lock, s.bounds = lock, driver.NewDueBounds()
	return s.start(ctx, path)
}

// openPostgres opens the store on the PostgreSQL database at url. No file
// lock: any number of stores, in any number of processes, share one
// database. On sessions that cannot write (default_transaction_read_only,
// a standby) the store only reads (Store.readOnly).
func openPostgres(ctx context.Context, url string, opts Config) (*Store, error) {
	return newStore(postgresql, postgresLayout, url, opts).start(ctx, redactURL(url))
}

// newStore is a store on eng not yet opened.
func newStore(eng driver.Driver, l layout, path string, opts Config) *Store {
	s := &Store{id: storeIDs.Add(1), eng: eng, layout: l, opts: opts, path: path, closed: make(chan struct{}), notify: notify.New(),
		unlocked: make(chan struct{}), scheduleWake: make(chan struct{}, 1)}
	s.queues.eng, s.queues.shared = s.eng, s.eng.Shared()
	s.receivers = receivers.New[ReceiverTag](s.now, ReceiverGrace, leaseOf)
	s.group = groupcommit.New[func(tx *Tx) error, stepMark](txHooks{s})
	if s.queues.shared {
		// A pool: Store.Tx runs up to its size of transactions at once.
		s.group.Parallel(poolSize(opts))
		s.txAlone = txAloneOnPool
	}
	return s
}

// start opens the database and starts the loops; name is how errors name
// the store.
func (s *Store) start(ctx context.Context, name string) (*Store, error) {
	if err := s.open(ctx); err != nil {
		close(s.closed)
		_ = s.closeResources()
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	if s.eng.Shared() {
		s.path = name // never the password
	}
	if !s.readOnly {
		s.startLoops()
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	clock := s.opts.Clock
	db, release, err := s.eng.Open(s.oneKey(driver.ConnConfig{
		Path:            s.path,
		StoreID:         s.id,
		SyncFull:        s.opts.Sync == SyncFull,
		BusyTimeoutMS:   s.opts.BusyTimeout.Milliseconds(),
		MaxMessageBytes: int64(s.opts.MaxMessageBytes),
		AttemptHistory:  max(s.opts.AttemptHistory, 0),
		Now:             func() int64 { return millis(clock.Now()) },
		Claimable:       s.notify.Mark,
		Due:             s.notify.Due,
		Commit:          s.committed,
		Rollback:        s.rolledBack,
		Settling:        s.settling,
		Changed:         s.changed,
		Created:         func(k driver.TxKey, q string) { s.tally.Create(uint64(k), q) },
		Dropped:         func(k driver.TxKey, q string) { s.tally.Drop(uint64(k), q) },
		Woken:           s.notify.Wake,
		MaxConns:        s.opts.MaxConns,
		Closing:         s.isClosed,
		Bounds:          s.bounds,
		Opened:          func() { s.conns.Add(1) },
		Closed:          s.connClosed,
	}))
	if err != nil {
		return err
	}
	s.db, s.release = db, release
	state, err := s.layout.check(ctx, db)
	if err != nil {
		return err
	}
	if s.layout.readOnly != nil {
		if s.readOnly, err = s.layout.readOnly(ctx, db); err != nil {
			return err
		}
	}
	existingOnly := s.opts.ExistingOnly || s.readOnly
	if err := (Config{ExistingOnly: existingOnly}).refuse(state, s.layout.token); err != nil {
		return err
	}
	if s.migration.From, err = s.layout.version(ctx, db); err != nil {
		return err
	}
	if err := s.eng.Prepare(ctx, db, state == schema.Fresh); err != nil {
		return err
	}
	// With ExistingOnly (or a session that cannot write) the store is up
	// to date (refuse): the migrator
	// would find nothing to do, so it does not run at all, and takes no
	// lock (on PostgreSQL, its session lock would wait behind another
	// process migrating).
	if !existingOnly {
		if err := s.layout.apply(ctx, db); err != nil {
			return err
		}
	}
	s.migration.To = s.layout.latest
	if err := s.recover(ctx); err != nil {
		return err
	}
	return s.seedTally(ctx, db)
}

// storeIDs numbers the stores of the process, for mqlite_store_id().
var storeIDs atomic.Int64

// refuse returns the error of a store that Config.ExistingOnly does not
// let Open create or migrate; token is the layout this binary needs.
func (o Config) refuse(state schema.State, token string) error {
	switch {
	case !o.ExistingOnly:
		return nil
	case state == schema.Fresh && token == schema.PostgresToken:
		return fmt.Errorf("%w: the database has no mqlite schema", ErrNoStore)
	case state == schema.Fresh:
		return fmt.Errorf("%w: the file has no mqlite schema", ErrNoStore)
	case state == schema.Outdated:
		return fmt.Errorf("%w: the store's layout is older than this binary's (%s)", ErrMigrationNeeded, token)
	}
	return nil
}

// probe checks, before Open takes any lock, that path holds a store that
// Config.ExistingOnly lets Open use, without creating or writing anything:
// a missing file is ErrNoStore with no file left behind, and a SQLite file
// without mqlite's schema is ErrNoStore with its bytes untouched. The
// connection is read-write but query-only, so that on close SQLite removes
// the -wal and -shm files it made for a file in WAL mode; a read-only one
// would leave them.
func probe(ctx context.Context, path string) error {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: no file at %s", ErrNoStore, path)
		}
		return err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=query_only(1)")
	if err != nil {
		return err
	}
	defer db.Close()
	state, err := schema.Check(ctx, db)
	if err != nil {
		return err
	}
	return Config{ExistingOnly: true}.refuse(state, schema.Token)
}

// Migration is what Open did to the file's layout, in goose versions of
// package schema: From is the version the file had (0 for a file without a
// store), To the version it has now. From == To: it was up to date.
type Migration struct {
	From, To int64
}

// Created reports whether Open created the store: the file held none.
func (m Migration) Created() bool { return m.From == 0 }

// Migration returns what Open did to the file's layout: created the store,
// upgraded it, or nothing.
func (s *Store) Migration() Migration { return s.migration }

// Migrate brings the store at path to this binary's layout, creating it
// when the file holds none, and reports what it did. It is Open followed by
// Close, with opts (ExistingOnly must be false), so it takes the file's lock
// (ErrDBLocked while a store has the file open) and runs the crash recovery
// as Open does. An upgrade runs in one transaction: on failure (ErrMigration,
// with the step) or a crash the file keeps its earlier layout.
func Migrate(ctx context.Context, path string, opts Config) (Migration, error) {
	if opts.ExistingOnly {
		return Migration{}, invalidf(ErrInvalidArgument, "Migrate with Config.ExistingOnly")
	}
	opts.ReaperInterval, opts.SchedulerInterval, opts.TTLInterval = -1, -1, -1
	opts.JanitorInterval, opts.RetentionInterval, opts.ScheduleInterval = -1, -1, -1
	st, err := Open(ctx, path, opts)
	if err != nil {
		return Migration{}, err
	}
	return st.migration, st.Close()
}

// canonicalPath resolves path to an absolute path with every symlink
// followed, so all spellings of one file lock the same sidecar. The file may
// not exist yet; its folder must.
func canonicalPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// Close stops the store's background loops (interrupting a sweep in flight,
// which rolls back whole) and waits for them, closes the connection and
// releases the file locks.
//
// A transaction in flight when Close begins (a Store.Tx callback, or the
// caller's own transaction on Store.DB()) cannot commit any more: its
// statements that need the store fail with ErrClosed and its commit rolls
// back and fails (Store.Tx returns ErrClosed). The connection closes when
// that transaction ends, and only then are the file locks released, so no
// second store can open the file while a transaction of this one is still
// open, and nothing commits after the locks are gone. Close waits for that up
// to Config.BusyTimeout, then returns; the locks then go as soon as the
// transaction ends (Close called from inside a Tx callback returns that way).
// It is safe to call more than once; later calls return the first call's
// result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed) // from here on no commit is allowed
		s.notify.WakeAll()
		s.stopLoops() // before the connection goes: a sweep may be running
		s.closeErr = s.closeResources()
	})
	return s.closeErr
}

// closeResources closes the connection (now when it is idle, when its
// transaction ends otherwise) and waits, up to the busy timeout, for the
// file locks to follow it; s.closed must be closed.
func (s *Store) closeResources() error {
	var errDB error
	if s.db != nil {
		errDB = s.db.Close()
	}
	if s.conns.Load() == 0 {
		s.releaseLock()
	}
	t := time.NewTimer(s.opts.BusyTimeout)
	defer t.Stop()
	select {
	case <-s.unlocked:
		return errors.Join(errDB, s.unlockErr)
	case <-t.C:
		return errDB
	}
}

// connClosed is called after the store's connection closed. Once Close has
// begun, the last connection to go releases the file locks.
func (s *Store) connClosed() {
	if s.conns.Add(-1) == 0 && s.isClosed() {
		s.releaseLock()
	}
}

// releaseLock drops what the store holds of the file: its SQL functions'
// hold on the store, then the file locks. It runs once.
func (s *Store) releaseLock() {
	s.unlock.Do(func() {
		if s.release != nil {
			s.release()
		}
		s.unlockErr = s.lock.unlock()
		close(s.unlocked)
	})
}

// fileLock is the store's two advisory locks on its file.
type fileLock struct{ sidecar, file *flock.Flock }

// lockRetry is how often a store waiting for the file lock
// (Config.WaitForLock) tries it again: the most a takeover lags the death
// of the holder. flock(2) offers no wait that ctx could interrupt, and a
// goroutine blocked in one would outlive a cancelled Open, so the wait
// polls; one non-blocking flock call per lockRetry costs nothing worth
// measuring. The wait is on the operating system, not on the store's data,
// so it runs on real time rather than Config.Clock.
const lockRetry = 10 * time.Millisecond

// lockFile takes the store's advisory locks on canon: one on the sidecar
// "<canon>.lock" and one on the file itself, or neither. Either held by
// another store is ErrDBLocked, unless opts.WaitForLock: then it waits for
// both until ctx ends. The two cover each other's blind spot: the file's own
// lock still holds when the sidecar is deleted or renamed, the sidecar's
// when the file is replaced under its name. Taking the file's lock creates
// a missing file, 0600: it holds every body and key hash, and SQLite gives
// its WAL and shared-memory files the file's mode.
func lockFile(ctx context.Context, canon string, opts Config) (fileLock, error) {
	l := fileLock{sidecar: flock.New(canon + ".lock"), file: flock.New(canon, flock.SetPermissions(0o600))}
	logged := false
	for _, f := range []*flock.Flock{l.sidecar, l.file} {
		ok, err := f.TryLock()
		if err == nil && !ok && opts.WaitForLock {
			if !logged {
				opts.Logger.InfoContext(ctx, "mqlite: file locked by another store; waiting for it (standby)", "path", canon)
				logged = true
			}
			ok, err = f.TryLockContext(ctx, lockRetry)
		}
		if err == nil && !ok {
			err = ErrDBLocked
		}
		if err != nil {
			_ = l.unlock()
			if !errors.Is(err, ErrDBLocked) {
				err = fmt.Errorf("lock: %w", err)
			}
			return fileLock{}, err
		}
	}
	if logged {
		opts.Logger.InfoContext(ctx, "mqlite: file lock taken; recovering and serving on", "path", canon)
	}
	return l, nil
}

func (l fileLock) unlock() error {
	if l.file == nil {
		return nil // a PostgreSQL store takes no file lock
	}
	return errors.Join(l.file.Unlock(), l.sidecar.Unlock())
}

// DB returns the store's *sql.DB for the application's own tables. On
// SQLite it is the same single connection the store uses, so a transaction
// on it can carry both business rows and outbox messages. On PostgreSQL it
// is the store's pool (Config.MaxConns); there a transaction of any handle
// on the database carries the outbox too (the application's own pgx pool).
// Do not change its pool settings.
func (s *Store) DB() *sql.DB { return s.db }

// Path returns the canonical path of the store's file, or the URL of its
// PostgreSQL database without the password.
func (s *Store) Path() string { return s.path }

// Clock returns the store's clock, Config.Clock: every timestamp of the
// store is read from it. consumer.Loop asks for it (consumer.Store.Clock) so
// that its lease arithmetic agrees with the store's.
func (s *Store) Clock() Clock { return s.opts.Clock }

// now is the store's clock in epoch milliseconds.
func (s *Store) now() int64 { return millis(s.opts.Clock.Now()) }

func (s *Store) checkOpen() error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
		return nil
	}
}

// inTx runs fn in one transaction of the store (Store.Tx), handing it the
// statement context and the *sql.Tx: the preamble every store method shares.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.Tx(ctx, func(tx *Tx) error { return fn(tx.Context(), tx.SQL()) })
}

// queueCache keeps queue settings in memory: the claim path reads them on
// every call. The store is the only writer of a SQLite file, so the cache
// is invalidated by the store's own queue administration; on a shared
// database (PostgreSQL), where another process may change a queue, it
// keeps nothing and every call reads. There the claim and the
// settlements read the settings in their own statement (claimShared), so
// the message path needs no cache: a cache forgotten on a notification of
// another process's change would hand out leases of the old settings, or
// claim from a queue just paused, until the notification came.
type queueCache struct {
	eng    driver.Executor // reads a queue the cache does not hold
	shared bool
	mu     sync.Mutex
	m      map[string]driver.Queue
}

func (c *queueCache) get(ctx context.Context, db driver.DBTX, name string) (driver.Queue, error) {
	c.mu.Lock()
	q, ok := c.m[name]
	c.mu.Unlock()
	if ok {
		return q, nil
	}
	q, err := c.eng.GetQueue(ctx, db, name)
	if err != nil || c.shared {
		return q, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]driver.Queue{}
	}
	c.m[name] = q
	c.mu.Unlock()
	return q, nil
}

func (c *queueCache) forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

// TracerProvider returns the provider of the store's spans:
// Config.TracerProvider, or otel.GetTracerProvider() (read at each call)
// when that is nil. consumer.Loop and the relay ask for it
// (consumer.Store.TracerProvider), so one setting traces a whole process.
func (s *Store) TracerProvider() trace.TracerProvider {
	if s.opts.TracerProvider != nil {
		return s.opts.TracerProvider
	}
	return otel.GetTracerProvider()
}

// millis is how mqlite stores time: epoch milliseconds.
func millis(t time.Time) int64 { return t.UnixMilli() }

// fromMillis turns stored epoch milliseconds back into a time.Time; 0 is the
// zero time.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// isClosed reports whether Close has begun.
func (s *Store) isClosed() bool { return s.checkOpen() != nil }

// Clock is the source of "now" for every timestamp mqlite writes: leases,
// schedules, TTLs, dedup windows and receipts. Tests inject a fake clock and
// move it instead of sleeping. Implementations must be safe for concurrent
// use.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock; it is the default Clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
