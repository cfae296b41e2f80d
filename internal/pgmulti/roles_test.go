package pgmulti_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// The roles a worker process plays.
const (
	roleConsume  = "consume"  // receives and completes, saying each handling's moments
	roleFence    = "fence"    // claims and completes when told
	roleDedup    = "dedup"    // sends the same MessageIDs as the others
	roleSchedule = "schedule" // runs the schedule loop, nothing else
	roleWaiter   = "waiter"   // waits in Receive, saying when each message came
	roleWaker    = "waker"    // sends when told
)

var roles = map[string]func(w *worker){
	roleConsume:  consume,
	roleFence:    fence,
	roleDedup:    dedup,
	roleSchedule: func(w *worker) { <-w.stopped().Done() },
	roleWaiter:   waiter,
	roleWaker:    waker,
}

// consume receives from the queue args[0], at most args[1] messages a
// call, handles each for up to args[2] microseconds and completes it; it
// says "h <label> <seq> <start> <end>" after the completion, start the
// moment the claim returned and end the moment before the completion
// began (wall-clock nanoseconds, which every process of the machine
// shares), label the first word of the body. It stops when the harness
// closes stdin.
func consume(w *worker) {
	ctx := w.stopped()
	queue, max, handle := w.args[0], w.arg(1), w.arg(2)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for ctx.Err() == nil {
		msgs, err := w.st.Receive(ctx, queue, mqlite.ReceiveOptions{Max: 1 + rng.IntN(max), Wait: 200 * time.Millisecond})
		start := time.Now().UnixNano()
		if ctx.Err() != nil {
			if len(msgs) > 0 {
				w.t.Errorf("Receive handed out %d messages with its context ended", len(msgs))
			}
			return
		}
		if err != nil {
			w.t.Fatalf("receive: %v", err)
		}
		for _, m := range msgs {
			time.Sleep(time.Duration(rng.IntN(handle+1)) * time.Microsecond) // the handler's work
			end := time.Now().UnixNano()
			if err := w.st.Complete(context.Background(), m.Lock()); err != nil {
				w.t.Fatalf("complete %d: %v", m.Seq, err)
			}
			label, _, _ := strings.Cut(string(m.Body), " ")
			w.say("h %s %d %d %d", label, m.Seq, start, end)
		}
	}
}

// fence claims one message of the queue args[0] on "claim" (saying
// "claimed <seq> <delivery count>", or "none"), and completes it on
// "complete" (saying "complete ok", "complete lost" for ErrLockLost, or
// "complete error ...").
func fence(w *worker) {
	queue := w.args[0]
	var held *mqlite.Message
	for cmd := range w.cmds {
		switch cmd {
		case "claim":
			msgs, err := w.st.Receive(context.Background(), queue, mqlite.ReceiveOptions{Wait: 20 * time.Second})
			if err != nil {
				w.t.Fatalf("receive: %v", err)
			}
			if len(msgs) == 0 {
				w.say("none")
				continue
			}
			held = &msgs[0]
			w.say("claimed %d %d", held.Seq, held.DeliveryCount)
		case "complete":
			switch err := w.st.Complete(context.Background(), held.Lock()); {
			case err == nil:
				w.say("complete ok")
			case errors.Is(err, mqlite.ErrLockLost):
				w.say("complete lost")
			default:
				w.say("complete error %s", strings.ReplaceAll(err.Error(), "\n", " "))
			}
		default:
			w.t.Fatalf("unknown command %q", cmd)
		}
	}
}

// dedupID is the MessageID of the i-th message every dedup worker sends.
func dedupID(i int) string { return "m" + strconv.Itoa(i) }

// dedup waits for "go", then sends args[1] messages with the MessageIDs
// dedupID(0..) to the queue args[0], in an order and batches of its own
// (its seed args[2]), each batch in a transaction of its own; it says
// "sent <id> <seq> <duplicate>" per message, then "done".
func dedup(w *worker) {
	queue, n, seed := w.args[0], w.arg(1), w.arg(2)
	if cmd := <-w.cmds; cmd != "go" {
		w.t.Fatalf("want go, got %q", cmd)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	order := rng.Perm(n)
	for len(order) > 0 {
		k := min(len(order), 1+rng.IntN(8))
		// Each process's batches hold the ids in an order of their own:
		// a send writes its dedup rows in key order, so two batches of
		// the same keys wait for each other and never deadlock.
		msgs := make([]outbox.Message, k)
		for i, x := range order[:k] {
			msgs[i] = outbox.Message{MessageID: dedupID(x), Body: []byte(dedupID(x))}
		}
		res, err := outbox.Send(context.Background(), w.st, queue, msgs...)
		if err != nil {
			w.t.Fatalf("send: %v", err)
		}
		for i, r := range res {
			if r.Err != nil {
				w.t.Fatalf("send %s: %v", msgs[i].MessageID, r.Err)
			}
			w.say("sent %s %d %t", msgs[i].MessageID, r.Seq, r.Duplicate)
		}
		order = order[k:]
	}
	w.say("done")
	for range w.cmds {
	}
}

// waiter waits in Receive on the queue args[0] (one message at a time),
// and says "got <seq> <body> <moment>" for each, the moment (wall-clock
// nanoseconds) the Receive returned, then completes it.
func waiter(w *worker) {
	ctx := w.stopped()
	queue := w.args[0]
	for {
		msgs, err := w.st.Receive(ctx, queue, mqlite.ReceiveOptions{Wait: time.Minute})
		at := time.Now().UnixNano()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.t.Fatalf("receive: %v", err)
		}
		for _, m := range msgs {
			w.say("got %d %s %d", m.Seq, m.Body, at)
			if err := w.st.Complete(context.Background(), m.Lock()); err != nil {
				w.t.Fatalf("complete %d: %v", m.Seq, err)
			}
		}
	}
}

// waker sends one message to the queue args[0] on each "send", its body
// the moment (wall-clock nanoseconds) before the send's transaction
// began, and says "sent".
func waker(w *worker) {
	queue := w.args[0]
	for cmd := range w.cmds {
		if cmd != "send" {
			w.t.Fatalf("unknown command %q", cmd)
		}
		body := fmt.Appendf(nil, "%d", time.Now().UnixNano())
		if _, err := outbox.Send(context.Background(), w.st, queue, outbox.Message{Body: body}); err != nil {
			w.t.Fatalf("send: %v", err)
		}
		w.say("sent")
	}
}
