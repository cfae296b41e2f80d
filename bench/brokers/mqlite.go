package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/outbox"
)

// serveEnv, set to a store's path, runs this program (or its test binary)
// as the mqlite broker process: that store, the default broker.Config, on a
// free loopback port printed as "BROKER <url>", until SIGTERM or its stdin
// closes.
const serveEnv = "MQLITE_BENCH_SERVE"

// profileEnv, set to a file's path, has the broker process write a CPU
// profile of its whole life there (go tool pprof reads it).
const profileEnv = "MQLITE_BENCH_CPUPROFILE"

const brokerPrefix = "BROKER "

func serveMQLite(path string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }() // the parent went away
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	srv, err := broker.New(broker.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if path := os.Getenv(profileEnv); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	fmt.Fprintf(stdout, "%shttp://%s\n", brokerPrefix, ln.Addr())
	if err := srv.Serve(ctx, ln); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// mqBroker is the broker process the mqlite sides share.
type mqBroker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dir   string
	url   string
	key   string
}

func startMQBroker(ctx context.Context) (*mqBroker, error) {
	dir, err := os.MkdirTemp("", "mqlite-brokers-*")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "bench.db")
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
	if err != nil {
		return nil, err
	}
	_, key, err := keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serveEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &mqBroker{cmd: cmd, stdin: stdin, dir: dir, key: key}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), brokerPrefix); ok {
			b.url = u
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return b, nil
		}
	}
	b.close()
	return nil, errors.New("the broker process printed no address")
}

func (b *mqBroker) close() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.stdin.Close()
	_ = b.cmd.Wait()
	_ = os.RemoveAll(b.dir)
}

// consumeMode is how an mqlite side consumes.
type consumeMode int

const (
	// receiveComplete: a receive, then a complete (or complete-batch):
	// two round trips and two commits.
	receiveComplete consumeMode = iota
	// completeReceive: one complete-receive request completes the last
	// message and claims the next: one round trip and one commit.
	completeReceive
	// stream: consumer.Loop over the client's stream (one at a time:
	// Concurrency 1, the rest of the window prefetched); in batches, a
	// stream of 100 whose batches complete on it.
	stream
)

// mq is one mqlite side: the broker process and a client consuming in one
// mode. The first (receiveComplete) also owns the broker and runs the
// produce scenarios; the others consume only.
type mq struct {
	b    *mqBroker
	c    *client.Client
	mode consumeMode
	sz   Sizes
	owns bool
}

// openMQLite starts a broker and opens one side for each mode.
func openMQLite(ctx context.Context, sz Sizes, modes ...consumeMode) ([]Side, error) {
	b, err := startMQBroker(ctx)
	if err != nil {
		return nil, err
	}
	var sides []Side
	for _, mode := range modes {
		c, err := client.New(client.Config{URL: b.url, Key: b.key})
		if err != nil {
			b.close()
			return nil, err
		}
		sides = append(sides, &mq{b: b, c: c, mode: mode, sz: sz, owns: mode == receiveComplete})
	}
	return sides, nil
}

func (m *mq) Name() string {
	switch m.mode {
	case stream:
		return "mqlite stream"
	case completeReceive:
		return "mqlite complete-receive"
	default:
		return "mqlite receive+complete"
	}
}

func (m *mq) Settings() string {
	common := "the broker as its own process (broker.Config defaults), the store's defaults (WAL, synchronous NORMAL), client.Client over loopback HTTP/1.1 with keep-alive"
	switch m.mode {
	case stream:
		return common + fmt.Sprintf("; consume one at a time: consumer.Loop over the client (Concurrency 1, Prefetch %d: a stream with a window of %d, completions on it); in batches: a stream with a window of 100, each batch of 100 completed on it in one line; latency: the same Loop", loopPrefetch(m.sz.Window), m.sz.Window)
	case completeReceive:
		return common + "; consume: CompleteAndReceive, completing the last claim (one message, or 100) and claiming the next in one request and one commit"
	default:
		return common + "; consume: Receive (Max 1, or 100) then Complete (or CompleteBatch): two requests and two commits per claim" +
			fmt.Sprintf("; consume → produce: consumer.LoopTx over the client (Concurrency 1, Prefetch %d, claims by receive), one POST /v1/commit per message with its onward send and its completion (atomic)", m.sz.Window-1)
	}
}

func (m *mq) Produces() bool { return m.owns }

func (m *mq) CPU() time.Duration { return procCPU(m.b.cmd.Process.Pid) }

func (m *mq) Prepare(ctx context.Context, queue string) error {
	if err := m.c.DeleteQueue(ctx, queue); err != nil && !errors.Is(err, mqlite.ErrQueueNotFound) {
		return err
	}
	return m.c.CreateQueue(ctx, queue, mqlite.QueueOptions{LockDuration: 30 * time.Second})
}

func (m *mq) ProduceOne(ctx context.Context, queue string, bodies [][]byte) error {
	for _, b := range bodies {
		if _, err := m.c.Send(ctx, queue, outbox.Message{Body: b}); err != nil {
			return err
		}
	}
	return nil
}

func (m *mq) ProduceBatch(ctx context.Context, queue string, bodies [][]byte, batch int) error {
	msgs := make([]outbox.Message, 0, batch)
	for i := 0; i < len(bodies); i += batch {
		msgs = msgs[:0]
		for _, b := range bodies[i:min(i+batch, len(bodies))] {
			msgs = append(msgs, outbox.Message{Body: b})
		}
		res, err := m.c.SendBatch(ctx, queue, msgs)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
	}
	return nil
}

// loop runs consumer.Loop over the client on queue, one message at a time
// with the rest of the window prefetched, until handle has seen n.
func (m *mq) loop(ctx context.Context, queue string, n int, handle func()) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var seen atomic.Int64
	err := consumer.Loop(lctx, m.c, queue, func(context.Context, mqlite.Message) error {
		if handle != nil {
			handle()
		}
		if seen.Add(1) == int64(n) {
			cancel()
		}
		return nil
	}, consumer.LoopConfig{Concurrency: 1, Prefetch: loopPrefetch(m.sz.Window), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	if seen.Load() < int64(n) {
		return ctx.Err()
	}
	return nil
}

// loopPrefetch is the Prefetch of a Loop with Concurrency 1 whose stream
// has a window of window: -1 (none) for a window of one, since 0 would
// mean Loop's default of one more.
func loopPrefetch(window int) int {
	if window <= 1 {
		return -1
	}
	return window - 1
}

// streamBatches consumes n messages from a stream of batch, completing each
// batch on it.
func (m *mq) streamBatches(ctx context.Context, queue string, n, batch int) error {
	s, err := m.c.Stream(ctx, queue, batch)
	if err != nil {
		return err
	}
	defer s.Close()
	var locks []mqlite.Lock
	for got := 0; got < n; {
		msgs, err := s.Receive(ctx)
		if err != nil {
			return err
		}
		for _, msg := range msgs {
			locks = append(locks, msg.Lock())
		}
		got += len(msgs)
		if len(locks) < batch && got < n {
			continue
		}
		res, err := s.CompleteBatch(ctx, locks)
		if err != nil {
			return err
		}
		for _, e := range res {
			if e != nil {
				return e
			}
		}
		locks = locks[:0]
	}
	return nil
}

// Move runs consumer.LoopTx over the client from from, one message at a
// time with the rest of the window prefetched: each message's onward send
// and its completion go in one commit request (POST /v1/commit), atomic.
// Only the side that owns the broker runs it.
func (m *mq) Move(ctx context.Context, from, to string, n int) error {
	if !m.owns {
		return errNotApplicable
	}
	if n == 0 {
		return nil
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var seen atomic.Int64
	err := consumer.LoopTx(lctx, m.c, from, func(_ context.Context, msg mqlite.Message) (consumer.TxStep, error) {
		return func(ctx context.Context, tx consumer.Tx) error {
			return tx.Send(ctx, to, outbox.Message{Body: msg.Body})
		}, nil
	}, consumer.LoopConfig{Concurrency: 1, Prefetch: max(m.sz.Window-1, -1), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: movedObserver{seen: &seen, n: int64(n), done: cancel}})
	if err != nil {
		return err
	}
	if seen.Load() < int64(n) {
		return ctx.Err()
	}
	return nil
}

// movedObserver counts the messages LoopTx moved and calls done at n.
type movedObserver struct {
	consumer.NopObserver
	seen *atomic.Int64
	n    int64
	done func()
}

func (o movedObserver) Completed(mqlite.Message, time.Duration) {
	if o.seen.Add(1) == o.n {
		o.done()
	}
}

func (m *mq) ConsumeOne(ctx context.Context, queue string, n int) error {
	if m.mode == stream {
		return m.loop(ctx, queue, n, nil)
	}
	if m.mode == completeReceive {
		return m.completeReceive(ctx, queue, n, 1)
	}
	for got := 0; got < n; {
		msgs, err := m.c.Receive(ctx, queue, mqlite.ReceiveOptions{Max: 1, Wait: time.Second})
		if err != nil {
			return err
		}
		for _, msg := range msgs {
			if err := m.c.Complete(ctx, msg.Lock()); err != nil {
				return err
			}
			got++
		}
	}
	return nil
}

// completeReceive consumes n messages batch at a time, each request
// completing the previous claim and making the next.
func (m *mq) completeReceive(ctx context.Context, queue string, n, batch int) error {
	var locks []mqlite.Lock
	for got := 0; got < n || len(locks) > 0; {
		opts := mqlite.ReceiveOptions{Max: batch, Wait: time.Second}
		if got >= n {
			opts = mqlite.ReceiveOptions{Max: 1} // the last completions; the queue is empty
		}
		res, msgs, err := m.c.CompleteAndReceive(ctx, queue, locks, opts)
		if err != nil {
			return err
		}
		for _, e := range res {
			if e != nil {
				return e
			}
		}
		locks = locks[:0]
		for _, msg := range msgs {
			locks = append(locks, msg.Lock())
		}
		got += len(msgs)
		if got >= n && len(msgs) == 0 {
			break
		}
	}
	return nil
}

func (m *mq) ConsumeBatch(ctx context.Context, queue string, n, batch int) error {
	if m.mode == stream {
		return m.streamBatches(ctx, queue, n, batch)
	}
	if m.mode == completeReceive {
		return m.completeReceive(ctx, queue, n, batch)
	}
	locks := make([]mqlite.Lock, 0, batch)
	for got := 0; got < n; {
		msgs, err := m.c.Receive(ctx, queue, mqlite.ReceiveOptions{Max: batch, Wait: time.Second})
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			continue
		}
		locks = locks[:0]
		for _, msg := range msgs {
			locks = append(locks, msg.Lock())
		}
		res, err := m.c.CompleteBatch(ctx, locks)
		if err != nil {
			return err
		}
		for _, e := range res {
			if e != nil {
				return e
			}
		}
		got += len(msgs)
	}
	return nil
}

func (m *mq) Latency(ctx context.Context, queue string, bodies [][]byte) ([]time.Duration, error) {
	arrived := make(chan time.Time, 1)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	if m.mode == stream {
		go func() { done <- m.loop(cctx, queue, len(bodies), func() { arrived <- time.Now() }) }()
		out, err := sendAndWait(ctx, bodies, arrived, done, func(b []byte) error {
			_, err := m.c.Send(ctx, queue, outbox.Message{Body: b})
			return err
		})
		cancel()
		<-done
		return out, err
	}
	go func() {
		done <- func() error {
			var locks []mqlite.Lock
			for got := 0; got < len(bodies); {
				var msgs []mqlite.Message
				var err error
				opts := mqlite.ReceiveOptions{Max: 1, Wait: 5 * time.Second}
				if m.mode == completeReceive {
					_, msgs, err = m.c.CompleteAndReceive(cctx, queue, locks, opts)
				} else {
					msgs, err = m.c.Receive(cctx, queue, opts)
				}
				if err != nil {
					return err
				}
				locks = locks[:0]
				for _, msg := range msgs {
					arrived <- time.Now()
					got++
					if m.mode == completeReceive {
						locks = append(locks, msg.Lock())
					} else if err := m.c.Complete(cctx, msg.Lock()); err != nil {
						return err
					}
				}
			}
			return nil
		}()
	}()
	return sendAndWait(ctx, bodies, arrived, done, func(b []byte) error {
		_, err := m.c.Send(ctx, queue, outbox.Message{Body: b})
		return err
	})
}

func (m *mq) Close() error {
	_ = m.c.Close()
	if m.owns {
		m.b.close()
	}
	return nil
}

// sendAndWait sends each body once the previous one reached its consumer
// (which reports arrivals on arrived, and its end on done) and returns each
// body's time from the send's start to its arrival.
func sendAndWait(ctx context.Context, bodies [][]byte, arrived <-chan time.Time, done <-chan error, send func([]byte) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, len(bodies))
	for _, b := range bodies {
		start := time.Now()
		if err := send(b); err != nil {
			return nil, err
		}
		select {
		case at := <-arrived:
			out = append(out, at.Sub(start))
		case err := <-done:
			select {
			case at := <-arrived: // its last arrival, raced with its end
				out = append(out, at.Sub(start))
				continue
			default:
			}
			return nil, fmt.Errorf("the consumer stopped: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return nil, errors.New("a message did not reach its consumer in 30s")
		}
	}
	return out, nil
}
