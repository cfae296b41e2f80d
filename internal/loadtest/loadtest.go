// Package loadtest is the client load of the broker's failure tests (a
// broker SIGKILLed and restarted, a primary SIGKILLed and its standby
// taking over): producers and consumers through a broker client, and the
// ledger of what the broker acknowledged to them, to check that nothing
// acknowledged was lost; and StartProcess, which runs the broker processes.
// Test code only.
package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// Client is what the load needs of a broker client; *client.Client is one.
type Client interface {
	SendBatch(ctx context.Context, queue string, msgs []outbox.Message) ([]outbox.Result, error)
	Receive(ctx context.Context, queue string, opts mqlite.ReceiveOptions) ([]mqlite.Message, error)
	CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error)
}

// Ledger records what the load's clients were told. Every message's body
// is its MessageID. It is safe for concurrent use.
type Ledger struct {
	mu          sync.Mutex
	acked       map[string]bool // sends answered 2xx
	completed   map[string]int  // completions answered 2xx, per message
	redelivered int             // deliveries after a message's first
	comeBack    int             // deliveries of a message already completed (answered 2xx)
	progress    chan struct{}   // a consumer completed a batch
}

// New returns an empty Ledger.
func New() *Ledger {
	return &Ledger{acked: map[string]bool{}, completed: map[string]int{}, progress: make(chan struct{}, 1)}
}

// Produce sends n messages to queue, "<prefix>-<i>" each, batch at a time,
// and records those acknowledged. It returns the first failed batch's
// error.
func (l *Ledger) Produce(ctx context.Context, c Client, queue, prefix string, n, batch int) error {
	for i := 0; i < n; i += batch {
		msgs := make([]outbox.Message, min(batch, n-i))
		for j := range msgs {
			id := fmt.Sprintf("%s-%d", prefix, i+j)
			msgs[j] = outbox.Message{Body: []byte(id), MessageID: id}
		}
		res, err := c.SendBatch(ctx, queue, msgs)
		if err != nil {
			return fmt.Errorf("producer %s: %w", prefix, err)
		}
		l.mu.Lock()
		for j, r := range res {
			if r.Err == nil {
				l.acked[msgs[j].MessageID] = true
			}
		}
		l.mu.Unlock()
	}
	return nil
}

// Consume receives from queue with opts and completes what it got, in one
// batch per receive, until done is closed (nil) or a call fails (its
// error).
func (l *Ledger) Consume(ctx context.Context, c Client, queue string, opts mqlite.ReceiveOptions, done <-chan struct{}) error {
	for {
		select {
		case <-done:
			return nil
		default:
		}
		msgs, err := c.Receive(ctx, queue, opts)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		if len(msgs) == 0 {
			continue
		}
		locks := make([]mqlite.Lock, len(msgs))
		l.mu.Lock()
		for i, m := range msgs {
			locks[i] = m.Lock()
			if l.completed[string(m.Body)] > 0 {
				l.comeBack++
			}
			if m.DeliveryCount > 1 {
				l.redelivered++
			}
		}
		l.mu.Unlock()
		errs, err := c.CompleteBatch(ctx, locks)
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		l.mu.Lock()
		for i, m := range msgs {
			if errs[i] == nil {
				l.completed[string(m.Body)]++
			}
		}
		l.mu.Unlock()
		select {
		case l.progress <- struct{}{}:
		default:
		}
	}
}

// WaitCompleted waits, up to timeout, until every acknowledged send has
// been completed, and returns how many have not.
func (l *Ledger) WaitCompleted(timeout time.Duration) int {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		missing := l.Counts().Missing
		if missing == 0 {
			return 0
		}
		select {
		case <-deadline.C:
			return missing
		case <-l.progress:
		}
	}
}

// WaitCompletedOrEmpty is WaitCompleted that also returns, without
// waiting for timeout, as soon as left (how many messages the queue still
// holds that a consumer could get: active, scheduled, locked, deferred)
// says 0 while acknowledged sends are missing: nothing can complete them
// any more, and a test fails at once rather than at its timeout. A
// completion that committed and whose answer a consumer has not recorded
// yet counts as missing here: stop the consumers, then read Counts. An
// error of left counts as messages left.
func (l *Ledger) WaitCompletedOrEmpty(timeout time.Duration, left func() (int64, error)) int {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond) // left changes without a completion: a lease ends, a redrive
	defer tick.Stop()
	for {
		missing := l.Counts().Missing
		if missing == 0 {
			return 0
		}
		if n, err := left(); err == nil && n == 0 {
			return missing
		}
		select {
		case <-deadline.C:
			return missing
		case <-l.progress:
		case <-tick.C:
		}
	}
}

// WaitAcked waits until at least n sends were acknowledged, or ctx ends
// (its error). A test's kill waits with it for a moment under load.
func (l *Ledger) WaitAcked(ctx context.Context, n int) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		l.mu.Lock()
		acked := len(l.acked)
		l.mu.Unlock()
		if acked >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d sends acknowledged, waiting for %d: %w", acked, n, ctx.Err())
		case <-tick.C:
		}
	}
}

// Counts is a summary of a Ledger.
type Counts struct {
	Acked       int // sends acknowledged
	Missing     int // acknowledged sends not completed
	Duplicates  int // completions past a message's first
	Redelivered int // deliveries past a message's first
	ComeBack    int // deliveries of a message whose completion was acknowledged
}

// Counts returns the ledger's summary.
func (l *Ledger) Counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Counts{Acked: len(l.acked), Redelivered: l.redelivered, ComeBack: l.comeBack}
	for id := range l.acked {
		if l.completed[id] == 0 {
			c.Missing++
		}
	}
	for _, n := range l.completed {
		c.Duplicates += n - 1
	}
	return c
}

// StartProcess starts cmd (its stderr is the test's) and returns the first
// line it prints to stdout that starts with prefix (a broker's address, for
// one); the rest of its output is read and dropped until it exits. A
// process that exits without printing one is killed and fails the test.
func StartProcess(t testing.TB, cmd *exec.Cmd, prefix string) string {
	t.Helper()
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			go func() { _, _ = io.Copy(io.Discard, out) }() // ends with the process
			return line
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Fatalf("%s printed no line starting with %q", cmd, prefix)
	return ""
}
