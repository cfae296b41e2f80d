package conformance

import (
	"fmt"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// lifecycleTests: closing an implementation while a transaction runs
// fences it: once Close has begun, the transaction's statements fail with
// ErrClosed and its commit fails, and nothing of it is stored
// (docs/conformance.md, "Sending"). The subtest pins that one outcome: the
// transaction goes on sending until a send fails, which proves Close has
// begun, and then asks to commit.
var lifecycleTests = []subtest{
	{"CloseDuringTransaction", func(t *testing.T, h Harness) {
		skipWithout(t, h.Features.WithoutRestart)
		k := open(t, h)
		k.queue("q", mqlite.QueueOptions{})
		inTx := make(chan struct{})
		var closedErr error // the first send refused, once Close began
		done := make(chan error, 1)
		go func() {
			done <- k.in.Tx(k.ctx, func(send SendFunc) error {
				for n := 0; ; n++ {
					if _, err := send("q", outbox.Message{Body: fmt.Appendf(nil, "m%d", n)}); err != nil {
						closedErr = err
						return nil // and commit, after Close began
					}
					if n == 0 {
						close(inTx)
					}
				}
			})
		}()
		<-inTx
		k.restart() // closes the running implementation, opens it again
		txErr := <-done
		k.wantErr(closedErr, mqlite.ErrClosed, "a send in the transaction once Close began")
		k.wantErr(txErr, mqlite.ErrClosed, "the commit of the transaction once Close began")
		if p := k.peek("q"); len(p) != 0 {
			t.Fatalf("the transaction failed (%v), but the store holds seqs %v", txErr, seqs(p))
		}
	}},
}
