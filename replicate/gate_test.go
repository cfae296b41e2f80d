package replicate_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/benbjohnson/litestream"
	"github.com/benbjohnson/litestream/file"
	"github.com/superfly/ltx"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/replicate"
)

// heldClient is a replica whose writes the test holds: once hold is
// closed, each write says so on reached and waits for a token on release
// (or for its ctx); before that, writes go through.
type heldClient struct {
	litestream.ReplicaClient
	hold    chan struct{} // closed: writes wait from now on
	reached chan struct{} // a write is waiting
	release chan struct{} // a token lets one waiting write go; closed, all
}

func newHeldClient(dir string) *heldClient {
	return &heldClient{ReplicaClient: file.NewReplicaClient(dir),
		hold: make(chan struct{}), reached: make(chan struct{}, 64), release: make(chan struct{})}
}

func (c *heldClient) WriteLTXFile(ctx context.Context, level int, minTXID, maxTXID ltx.TXID, r io.Reader) (*ltx.FileInfo, error) {
	select {
	case <-c.hold:
		c.reached <- struct{}{}
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	default:
	}
	return c.ReplicaClient.WriteLTXFile(ctx, level, minTXID, maxTXID, r)
}

// forwarded is one batch the relay handed its sink; the sink waits on done.
type forwarded struct {
	bodies []string
	done   chan struct{}
}

// TestGateForwardsOnlyReplicated: a relay gated by the Replicator hands
// its sink a message only once a shipment made after the message's commit
// is on the replica. The replica's writes are held by the test, and the
// background shipments are an hour apart, so no timing decides it: a gate
// that let the batch through without a shipment would hand it to the sink
// while no shipment is under way, and the replica would lack it.
func TestGateForwardsOnlyReplicated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	dir := t.TempDir()
	client := newHeldClient(dir)
	rep, err := replicate.Start(ctx, st, replicate.Config{Client: client, SyncInterval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close(ctx)
	close(client.hold)
	defer close(client.release) // before Close: its last shipment goes through
	send(t, st, "a")

	batches := make(chan forwarded)
	r, err := relay.New(st, "q", sinkFunc(func(ctx context.Context, msgs []mqlite.Message) []relay.Outcome {
		f := forwarded{done: make(chan struct{})}
		for _, m := range msgs {
			f.bodies = append(f.bodies, string(m.Body))
		}
		select {
		case batches <- f:
			select {
			case <-f.done:
			case <-ctx.Done(): // the test failed on it
			}
		case <-ctx.Done():
		}
		return make([]relay.Outcome, len(msgs))
	}), relay.Config{Gate: rep, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(rctx) }()
	defer func() {
		cancel()
		<-ran
	}()

	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	// The gate asks for a shipment and waits for it: the shipment reaches
	// the replica, and the test holds it there.
	select {
	case <-client.reached:
	case f := <-batches:
		t.Fatalf("the relay forwarded %v with no shipment since its commit (the replica holds %v)", f.bodies, restored(t, dir))
	case <-timeout.C:
		t.Fatal("no shipment in a minute")
	}
	if got := restored(t, dir); slices.Contains(got, "a") {
		t.Fatalf("the replica holds %v before the held shipment", got)
	}
	client.release <- struct{}{}
	// Released: the relay forwards a, now on the replica.
	for {
		select {
		case <-client.reached: // a later shipment: let it go too
			client.release <- struct{}{}
			continue
		case f := <-batches:
			on := restored(t, dir)
			for _, b := range f.bodies {
				if !slices.Contains(on, b) {
					t.Fatalf("the relay forwarded %s, which the replica lacks (it holds %v)", b, on)
				}
			}
			close(f.done)
			if slices.Contains(f.bodies, "a") {
				return
			}
			continue
		case <-timeout.C:
			t.Fatal("the relay forwarded nothing in a minute after the shipment")
		}
	}
}
