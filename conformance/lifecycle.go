package conformance

import (
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// lifecycleTests: closing an implementation while a transaction runs
// either waits for it or fails it; nothing commits half-way or after the
// implementation let go of its data (docs/conformance.md, "Sending").
var lifecycleTests = []subtest{
	{"CloseDuringTransaction", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		inTx, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- k.in.Tx(k.ctx, func(send SendFunc) error {
				close(inTx)
				<-release
				_, err := send("q", outbox.Message{Body: []byte{}})
				return err
			})
		}()
		<-inTx
		// Let the close begin while the transaction is open. The outcome
		// is checked for consistency whichever ran first, so this bounded
		// wait can make the subtest weaker, never wrong.
		go func() {
			<-time.After(50 * time.Millisecond)
			close(release)
		}()
		k.restart() // closes the running implementation, opens it again
		txErr := <-done
		p := k.peek("q")
		switch {
		case txErr == nil && len(p) != 1:
			t.Fatalf("the transaction committed, but the store holds %d messages", len(p))
		case txErr == nil && !p[0].EnqueuedAt.Equal(k.clock.Now()):
			t.Fatalf("the message committed with EnqueuedAt %v, want %v: it was written after the store closed",
				p[0].EnqueuedAt, k.clock.Now())
		case txErr != nil && len(p) != 0:
			t.Fatalf("the transaction failed (%v), but the store holds seqs %v", txErr, seqs(p))
		}
	}},
}
