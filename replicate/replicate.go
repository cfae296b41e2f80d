// Package replicate ships an mqlite store's file to another machine with
// Litestream, and brings a standby up from the copy. It is a module of its
// own (github.com/mqlite/mqlite/replicate), so that mqlite's module does
// not depend on Litestream.
//
// Replication is asynchronous: a commit returns once it is in the local
// file, and Litestream ships the WAL to the replica every
// Config.SyncInterval (1s by default). What a lost machine takes with it is
// what was committed since the last shipment: the loss window (RPO) is
// about one SyncInterval plus the time one shipment takes. Three calls
// shorten it where it matters:
//
//   - Replicator.WaitReplicated returns once everything committed before
//     the call is on the replica: a send that must survive the loss of the
//     machine waits for it after its commit (Replicator.Tx does both);
//   - Replicator is a relay.Gate: a relay given it (relay.Config.Gate)
//     forwards only messages already replicated, so that a failover can
//     never leave the far side holding an event whose business rows were
//     lost with the machine;
//   - a Standby follows the replica into a file of its own, and Promote
//     catches up with the replica's last shipment before the file is opened.
//
// Fencing the old primary is the operator's job: a standby promoted while
// the primary still runs gives two writers of two diverging files (a split
// brain), and nothing in a replica can prevent it. See docs/operations.md,
// "A standby on another machine".
package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/litestream"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/setting"
)

// Defaults of Config's zero-valued fields.
const (
	DefaultSyncInterval = time.Second
	DefaultRetry        = time.Second
)

// ErrInvalidConfig is matched, together with mqlite.ErrInvalidArgument, by
// the errors of Start and StartStandby for a bad Config.
var ErrInvalidConfig = errors.New("replicate: invalid config")

// ErrClosed is returned by WaitReplicated after Close.
var ErrClosed = errors.New("replicate: replicator closed")

// Config configures a Replicator. Zero values mean the defaults.
type Config struct {
	// Client is the replica: a Litestream ReplicaClient, such as
	// file.NewReplicaClient(dir) (package
	// github.com/benbjohnson/litestream/file) for a folder on another
	// disk or a network mount, or Litestream's S3, GCS, Azure, SFTP and
	// NATS clients. Required.
	Client litestream.ReplicaClient
	// SyncInterval is how often new commits are shipped to the replica
	// without anyone waiting: the bound of the loss window. Defaults to 1s.
	SyncInterval time.Duration
	// Retry spaces the attempts of a WaitReplicated whose shipment
	// failed (the replica unreachable): it keeps trying until its ctx
	// ends. Defaults to 1s.
	Retry time.Duration
	// Logger receives replication errors and Litestream's own logs.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Client == nil {
		return c, invalid("nil Client")
	}
	var err error
	if c.SyncInterval, err = setting.Default("SyncInterval", c.SyncInterval, DefaultSyncInterval); err != nil {
		return c, invalid("%v", err)
	}
	if c.Retry, err = setting.Default("Retry", c.Retry, DefaultRetry); err != nil {
		return c, invalid("%v", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Replicator ships one store's file to its replica. It is safe for
// concurrent use.
type Replicator struct {
	cfg Config
	db  *litestream.DB
	log *slog.Logger

	kick chan struct{} // a waiter asks for a shipment
	stop chan struct{}
	done chan struct{} // closed when the shipping goroutine has returned

	mu      sync.Mutex
	started uint64        // shipments started
	shipped uint64        // the last shipment that succeeded
	changed chan struct{} // closed and replaced when shipped or lastErr changes
	lastErr error         // of the last shipment, nil after a success
	closed  bool

	syncs, failures atomic.Int64
	lastOK          atomic.Int64 // unix nanoseconds of the last successful shipment
}

// Start starts replicating st's file to cfg.Client and returns once
// Litestream watches the file (the first shipment follows within a
// SyncInterval). It validates cfg (errors match mqlite.ErrInvalidArgument).
// Litestream reads the file through a connection of its own, holds a read
// transaction on it between its checkpoints, and adds two small tables of
// its own (_litestream_seq, _litestream_lock) beside mqlite's. Close it
// before closing st.
func Start(ctx context.Context, st *mqlite.Store, cfg Config) (*Replicator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, invalid("nil Store")
	}
	db := litestream.NewDB(st.Path())
	db.SetLogger(cfg.Logger.With("litestream", st.Path()))
	db.MonitorInterval = cfg.SyncInterval
	r := litestream.NewReplicaWithClient(db, cfg.Client)
	r.SyncInterval = cfg.SyncInterval
	db.Replica = r
	if err := db.Open(); err != nil {
		return nil, fmt.Errorf("replicate: open: %w", err)
	}
	rp := &Replicator{
		cfg: cfg, db: db, log: cfg.Logger,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		changed: make(chan struct{}),
	}
	go rp.run()
	// The first shipment creates Litestream's tables and its snapshot;
	// waiting for it here makes a Start that cannot replicate say so.
	if err := rp.WaitReplicated(ctx); err != nil {
		_ = rp.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return rp, nil
}

// run ships on request and every SyncInterval until Close. Litestream's
// own monitor ships too; these shipments are the ones WaitReplicated
// counts, so that a waiter knows its commit was in one.
func (r *Replicator) run() {
	defer close(r.done)
	tick := time.NewTicker(r.cfg.SyncInterval)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-r.stop
		cancel()
	}()
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
		case <-tick.C:
		}
		r.mu.Lock()
		r.started++
		n := r.started
		r.mu.Unlock()
		err := r.db.SyncAndWait(ctx)
		if ctx.Err() != nil {
			return
		}
		r.syncs.Add(1)
		r.mu.Lock()
		if err == nil {
			r.shipped, r.lastErr = n, nil
			r.lastOK.Store(time.Now().UnixNano())
		} else {
			if r.lastErr == nil {
				r.log.Error("replicate: shipping to the replica failed; commits since the last shipment are on this machine only",
					"err", err)
			}
			r.lastErr = err
			r.failures.Add(1)
		}
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// WaitReplicated blocks until everything committed before the call is on
// the replica, and returns nil; or until ctx ends, and returns ctx's error
// (joined with the last shipment's error, if the replica is failing).
// Waiters share shipments: many calls at once cost one shipment. A failed
// shipment is retried every Config.Retry while anyone waits.
func (r *Replicator) WaitReplicated(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	want := r.started + 1 // a shipment that starts after this call
	r.mu.Unlock()
	retryDue := false
	for {
		r.mu.Lock()
		shipped, lastErr, changed, closed := r.shipped, r.lastErr, r.changed, r.closed
		r.mu.Unlock()
		switch {
		case shipped >= want:
			return nil
		case closed:
			return ErrClosed
		}
		// After a failed shipment, ask again only once Retry has passed:
		// the replica is not hammered while it is down.
		var retry <-chan time.Time
		if lastErr == nil || retryDue {
			select {
			case r.kick <- struct{}{}:
			default: // a shipment is asked for already
			}
		}
		if retryDue = false; lastErr != nil {
			retry = time.After(r.cfg.Retry)
		}
		select {
		case <-changed:
		case <-retry:
			retryDue = true
		case <-ctx.Done():
			return errors.Join(ctx.Err(), lastErr)
		}
	}
}

// Wait makes a Replicator a relay.Gate: it returns once msgs (which the
// relay claimed, so they were committed before the call) are replicated,
// as WaitReplicated.
func (r *Replicator) Wait(ctx context.Context, _ []mqlite.Message) error {
	return r.WaitReplicated(ctx)
}

// Tx runs fn in a transaction of st (Store.Tx) and, once it committed,
// waits until it is replicated: the per-call choice of a send that must
// survive the loss of the machine. A nil error means committed and
// replicated; an error from the wait means committed but maybe not
// replicated (the send is in the local file either way).
func (r *Replicator) Tx(ctx context.Context, st *mqlite.Store, fn func(tx *mqlite.Tx) error) error {
	if err := st.Tx(ctx, fn); err != nil {
		return err
	}
	if err := r.WaitReplicated(ctx); err != nil {
		return fmt.Errorf("replicate: committed, not known to be replicated: %w", err)
	}
	return nil
}

// Stats is a snapshot of a Replicator, for logs and metrics.
type Stats struct {
	Shipments int64     // shipments WaitReplicated's loop made
	Failures  int64     // of which failed
	LastOK    time.Time // the end of the last successful shipment; zero before the first
	LastErr   error     // the last shipment's error, nil after a success
}

// Stats returns the counts so far.
func (r *Replicator) Stats() Stats {
	r.mu.Lock()
	lastErr := r.lastErr
	r.mu.Unlock()
	s := Stats{Shipments: r.syncs.Load(), Failures: r.failures.Load(), LastErr: lastErr}
	if ns := r.lastOK.Load(); ns != 0 {
		s.LastOK = time.Unix(0, ns)
	}
	return s
}

// Close makes a last shipment (bounded by ctx), stops replicating and
// releases Litestream's hold on the file. Waiters get ErrClosed. It is
// idempotent.
func (r *Replicator) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	if err := r.db.Close(ctx); err != nil {
		return fmt.Errorf("replicate: close: %w", err)
	}
	return nil
}

func invalid(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}
