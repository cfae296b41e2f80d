package replicate_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/superfly/ltx"

	"github.com/mqlite/mqlite/replicate"
)

// shipMidRestore is a standby's replica client that runs ship once, in
// the first listing after a file was opened: a shipment that lands while
// the standby is being set up, after its restore chose what to restore.
type shipMidRestore struct {
	litestream.ReplicaClient
	opened atomic.Bool
	once   sync.Once
	ship   func()
}

func (c *shipMidRestore) OpenLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, offset, size int64) (r io.ReadCloser, err error) {
	c.opened.Store(true)
	return c.ReplicaClient.OpenLTXFile(ctx, level, minTXID, maxTXID, offset, size)
}

func (c *shipMidRestore) LTXFiles(ctx context.Context, level int, seek ltx.TXID, useMetadata bool) (ltx.FileIterator, error) {
	if c.opened.Load() {
		c.once.Do(c.ship)
	}
	return c.ReplicaClient.LTXFiles(ctx, level, seek, useMetadata)
}

// TestStandbyMissesNoShipmentDuringSetup: a shipment that lands while
// StartStandby restores is applied by the follower, not skipped: the
// promoted standby holds it.
func TestStandbyMissesNoShipmentDuringSetup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	dir := t.TempDir()
	rep, err := replicate.Start(ctx, st, replicate.Config{Client: file.NewReplicaClient(dir), SyncInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close(ctx)
	send(t, st, "a")
	if err := rep.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	var shipErr error
	client := &shipMidRestore{ReplicaClient: file.NewReplicaClient(dir), ship: func() {
		send(t, st, "b")
		shipErr = rep.WaitReplicated(ctx)
	}}
	path := filepath.Join(t.TempDir(), "standby.db")
	sb, err := replicate.StartStandby(ctx, path, replicate.StandbyConfig{Client: client, FollowInterval: 10 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sb.Promote(pctx); err != nil {
		t.Fatal(err)
	}
	if shipErr != nil {
		t.Fatal(shipErr)
	}
	if got := fmt.Sprint(queueBodies(t, path)); got != "[a b]" {
		t.Fatalf("the promoted standby holds %s, want [a b]", got)
	}
}
