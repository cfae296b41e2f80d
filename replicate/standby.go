package replicate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/superfly/ltx"
)

// DefaultFollowInterval is how often a Standby looks for new shipments
// when StandbyConfig.FollowInterval is zero.
const DefaultFollowInterval = time.Second

// StandbyConfig configures a Standby. Zero values mean the defaults.
type StandbyConfig struct {
	// Client is the replica to follow (the primary's Config.Client, seen
	// from this machine). Required.
	Client litestream.ReplicaClient
	// FollowInterval is how often the standby applies new shipments.
	// Defaults to 1s.
	FollowInterval time.Duration
	// Logger receives Litestream's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Standby is a copy of a store's file that follows the replica: restored
// once, then updated with every shipment. Nothing may open the file until
// Promote returned. It is safe for concurrent use.
type Standby struct {
	cfg    StandbyConfig
	path   string
	rep    *litestream.Replica
	cancel context.CancelFunc
	done   chan struct{} // closed when following stopped
	err    error         // following's error, set before done closes
}

// StartStandby restores the replica's latest state into path, which must
// not exist, and keeps applying new shipments to it in the background
// until Promote or Close. It returns once the first restore is done.
func StartStandby(ctx context.Context, path string, cfg StandbyConfig) (*Standby, error) {
	if cfg.Client == nil {
		return nil, invalid("nil Client")
	}
	switch {
	case cfg.FollowInterval == 0:
		cfg.FollowInterval = DefaultFollowInterval
	case cfg.FollowInterval < 0:
		return nil, invalid("negative FollowInterval %v", cfg.FollowInterval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Restore once first, so that a replica that has nothing (or cannot
	// be read) is an error here and not a log line of the follower.
	rep := litestream.NewReplicaWithClient(nil, cfg.Client)
	// The position first, then a restore up to it: a shipment that lands
	// in between is the follower's to apply. Read after the restore, the
	// position could pass what the restore applied, and the follower
	// would skip the shipments between.
	txid, err := maxTXID(ctx, rep)
	if err != nil {
		return nil, err
	}
	opt := litestream.NewRestoreOptions()
	opt.OutputPath, opt.TXID = path, ltx.TXID(txid)
	if err := rep.Restore(ctx, opt); err != nil {
		return nil, fmt.Errorf("replicate: restore %s: %w", path, err)
	}
	// The follower resumes from the TXID file of a restored path.
	if err := litestream.WriteTXIDFile(path, ltx.TXID(txid)); err != nil {
		return nil, fmt.Errorf("replicate: %w", err)
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Standby{cfg: cfg, path: path, rep: rep, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		fopt := litestream.NewRestoreOptions()
		fopt.OutputPath, fopt.Follow, fopt.FollowInterval = path, true, cfg.FollowInterval
		s.err = rep.Restore(fctx, fopt)
	}()
	return s, nil
}

// maxTXID returns the newest transaction id the replica holds, over every
// level.
func maxTXID(ctx context.Context, rep *litestream.Replica) (uint64, error) {
	var m uint64
	for level := 0; level <= litestream.SnapshotLevel; level++ {
		info, err := rep.MaxLTXFileInfo(ctx, level)
		if err != nil {
			return 0, fmt.Errorf("replicate: replica position: %w", err)
		}
		m = max(m, uint64(info.MaxTXID))
	}
	return m, nil
}

// Applied returns the transaction id of the last shipment applied to the
// standby's file.
func (s *Standby) Applied() (uint64, error) {
	txid, err := litestream.ReadTXIDFile(s.path)
	return uint64(txid), err
}

// Promote waits until the standby has applied everything the replica
// holds now, stops following and returns: the file at the standby's path
// is then ready for mqlite.Open, whose recovery releases the leases the
// old primary held. Call it only once the old primary is fenced (stopped,
// or cut off from the replica): what it ships after Promote read the
// replica's position is not in the standby. ctx bounds the catch-up.
func (s *Standby) Promote(ctx context.Context) error {
	want, err := maxTXID(ctx, s.rep)
	if err != nil {
		return err
	}
	tick := time.NewTicker(s.cfg.FollowInterval / 4)
	defer tick.Stop()
	for {
		got, err := s.Applied()
		if err == nil && got >= want {
			break
		}
		select {
		case <-tick.C:
		case <-s.done:
			return fmt.Errorf("replicate: the standby stopped following: %w", errors.Join(s.err, err))
		case <-ctx.Done():
			return fmt.Errorf("replicate: promote: applied %d of %d: %w", got, want, ctx.Err())
		}
	}
	return s.Close()
}

// Close stops following and waits for the follower to return. The file
// stays as it is. It is idempotent.
func (s *Standby) Close() error {
	s.cancel()
	<-s.done
	return s.err
}
