package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/wire"
)

// ErrStreamClosed is the error of a call on a stream that ended: closed,
// broken, or ended by the broker (its shutdown). The deliveries it handed
// out still settle through the Client's own calls until their leases end.
var ErrStreamClosed = errors.New("client: stream closed")

var _ consumer.Streamer = (*Client)(nil)

// maxStreamEvent bounds one line the broker writes on a stream: its
// messages are bounded by the answer's byte budget (4 MiB by default, as
// base64 a third more).
const maxStreamEvent = 64 << 20

// Stream is an open streaming receive (POST /v1/queues/{queue}/stream):
// the broker keeps up to its window of messages handed out and unsettled,
// and the settlements written on the stream flow back while messages flow
// out; the settlements that reach the broker together commit together,
// with the claim of the messages they make room for. It is safe for
// concurrent use. Close it when done: what it handed out and was not
// settled comes back when its lease ends.
type Stream struct {
	queue  string
	cancel context.CancelFunc
	pw     *io.PipeWriter
	body   io.ReadCloser
	done   chan struct{} // closed when the reader ends

	wmu  sync.Mutex // orders the lines written and their numbers
	line int64

	mu      sync.Mutex
	msgs    []mqlite.Message
	ready   chan struct{} // signalled when msgs grows
	waiters map[int64]chan []wire.ItemResult
	err     error // why the stream ended
}

// OpenStream opens a stream of queue's messages with a prefetch window of
// window (1 to 1000; the broker bounds it by its max batch). It is
// consumer.Streamer's method: consumer.Loop over the client opens one.
// The stream lives until Close, ctx's end, or the broker's shutdown.
func (c *Client) OpenStream(ctx context.Context, queue string, window int) (consumer.Stream, error) {
	return c.Stream(ctx, queue, window)
}

// Stream is OpenStream with its concrete type.
func (c *Client) Stream(ctx context.Context, queue string, window int) (*Stream, error) {
	if err := checkQueue(queue); err != nil {
		return nil, err
	}
	if window < 1 || window > mqlite.MaxReceiveBatch {
		return nil, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument,
			Detail: fmt.Sprintf("window %d, want 1 to %d", window, mqlite.MaxReceiveBatch)}
	}
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(sctx, http.MethodPost,
		fmt.Sprintf("%s%s?window=%d", c.base, qpath(queue, "/stream"), window), pr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(wire.ClientHeader, c.name) // the broker counts this client as one receiver
	if c.cfg.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Key)
	}
	tctx, stop := context.WithTimeout(sctx, c.cfg.Timeout)
	defer stop()
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := c.http.Do(req)
		got <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-tctx.Done():
		cancel()
		_ = pw.Close()
		a = <-got
		if a.err == nil {
			a.resp.Body.Close()
		}
		return nil, fmt.Errorf("%w: opening a stream: %w", ErrUnavailable, tctx.Err())
	}
	if a.err != nil {
		cancel()
		_ = pw.Close()
		return nil, fmt.Errorf("%w: opening a stream: %w", ErrUnavailable, a.err)
	}
	if a.resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(a.resp.Body, 1<<20))
		a.resp.Body.Close()
		cancel()
		_ = pw.Close()
		e := errorFrom(a.resp.StatusCode, data)
		if e.Reason == wire.ReasonNoRoute || a.resp.StatusCode == http.StatusMethodNotAllowed {
			return nil, fmt.Errorf("%w: %w", consumer.ErrNoStream, e) // a broker without streams
		}
		return nil, e
	}
	s := &Stream{queue: queue, cancel: cancel, pw: pw, body: a.resp.Body, done: make(chan struct{}),
		ready: make(chan struct{}, 1), waiters: map[int64]chan []wire.ItemResult{}}
	go s.read()
	return s, nil
}

// read is the stream's reader goroutine: it sorts the broker's lines into
// messages and results until the answer ends.
func (s *Stream) read() {
	defer close(s.done)
	sc := bufio.NewScanner(s.body)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamEvent)
	err := ErrStreamClosed
	for sc.Scan() {
		ev, ok := wire.ParseStreamEvent(sc.Bytes())
		if !ok {
			if jerr := json.Unmarshal(sc.Bytes(), &ev); jerr != nil {
				err = fmt.Errorf("%w: a line that is not an event: %v", ErrStreamClosed, jerr)
				break
			}
		}
		if ev.Error != nil {
			err = fmt.Errorf("%w: %w", ErrStreamClosed, &Error{Status: wire.Status(ev.Error.Code), Code: ev.Error.Code,
				Reason: ev.Error.Reason, Message: ev.Error.Message, err: ev.Error.Err()})
			break
		}
		s.mu.Lock()
		if ev.Line > 0 {
			if w, ok := s.waiters[ev.Line]; ok {
				delete(s.waiters, ev.Line)
				w <- ev.Results
			}
		}
		if len(ev.Messages) > 0 {
			s.msgs = append(s.msgs, wire.Messages(ev.Messages)...)
			select {
			case s.ready <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
	}
	if sc.Err() != nil {
		err = fmt.Errorf("%w: %w", ErrStreamClosed, sc.Err())
	}
	s.mu.Lock()
	s.err = err
	for line, w := range s.waiters {
		delete(s.waiters, line)
		close(w)
	}
	s.mu.Unlock()
	_ = s.body.Close()
	_ = s.pw.CloseWithError(err)
}

// Receive waits for the messages the stream handed out since the last
// call, until ctx ends (ctx's error) or the stream does (an error matching
// ErrStreamClosed).
func (s *Stream) Receive(ctx context.Context) ([]mqlite.Message, error) {
	for {
		s.mu.Lock()
		msgs := s.msgs
		s.msgs = nil
		err := s.err
		s.mu.Unlock()
		if len(msgs) > 0 {
			return msgs, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-s.ready:
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// send writes one line and waits for its results (one per settlement).
func (s *Stream) send(ctx context.Context, l wire.StreamSettle) ([]wire.ItemResult, error) {
	b, err := wire.AppendStreamSettle(make([]byte, 0, 128), l)
	if err != nil {
		return nil, fmt.Errorf("client: encode a stream line: %w", err)
	}
	w := make(chan []wire.ItemResult, 1)
	s.wmu.Lock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		s.wmu.Unlock()
		return nil, err
	}
	s.line++
	line := s.line
	s.waiters[line] = w
	s.mu.Unlock()
	_, err = s.pw.Write(append(b, '\n'))
	s.wmu.Unlock()
	if err != nil {
		s.mu.Lock()
		delete(s.waiters, line)
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrStreamClosed, err)
	}
	select {
	case res, ok := <-w:
		if !ok {
			s.mu.Lock()
			defer s.mu.Unlock()
			return nil, s.err
		}
		if len(res) != l.Items()-len(l.Release) {
			return nil, fmt.Errorf("client: stream: %d results for %d settlements", len(res), l.Items()-len(l.Release))
		}
		return res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// checkLocks refuses the locks of another queue than the stream's.
func (s *Stream) checkLocks(locks ...mqlite.Lock) error {
	for _, l := range locks {
		if l.Queue != s.queue {
			return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument,
				Detail: fmt.Sprintf("a lock of queue %q on a stream of %q", l.Queue, s.queue)}
		}
	}
	return nil
}

// CompleteBatch completes locks on the stream: with the other settlements
// that reach the broker meanwhile, in one commit. Each lock gets its own
// result; err is for the stream's end.
func (s *Stream) CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error) {
	if err := s.checkLocks(locks...); err != nil {
		return nil, err
	}
	l := wire.StreamSettle{Complete: make([]wire.LockRequest, len(locks))}
	for i, lk := range locks {
		l.Complete[i] = lockOf(lk)
	}
	res, err := s.send(ctx, l)
	if err != nil {
		return nil, err
	}
	out := make([]error, len(res))
	for i, r := range res {
		out[i] = r.Error.Err()
	}
	return out, nil
}

// Complete completes one delivery on the stream.
func (s *Stream) Complete(ctx context.Context, l mqlite.Lock) error {
	res, err := s.CompleteBatch(ctx, []mqlite.Lock{l})
	if err != nil {
		return err
	}
	return res[0]
}

// Abandon gives a delivery back on the stream, claimable after delay.
func (s *Stream) Abandon(ctx context.Context, l mqlite.Lock, delay time.Duration) error {
	if err := s.checkLocks(l); err != nil {
		return err
	}
	if delay < 0 {
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative delay"}
	}
	res, err := s.send(ctx, wire.StreamSettle{Abandon: []wire.AbandonRequest{{Seq: l.Seq, Token: l.Token, DelayMS: delay.Milliseconds()}}})
	if err != nil {
		return err
	}
	return res[0].Error.Err()
}

// Reject dead-letters a delivery on the stream.
func (s *Stream) Reject(ctx context.Context, l mqlite.Lock, reason, description string) error {
	if err := s.checkLocks(l); err != nil {
		return err
	}
	res, err := s.send(ctx, wire.StreamSettle{Reject: []wire.RejectRequest{{Seq: l.Seq, Token: l.Token, Reason: reason, Description: description}}})
	if err != nil {
		return err
	}
	return res[0].Error.Err()
}

// Release frees the places in the window of deliveries the caller gives
// up on without settling them (a lease lost, a delivery settled through
// the Client's own calls): the broker hands out as many more.
func (s *Stream) Release(ctx context.Context, locks ...mqlite.Lock) error {
	if err := s.checkLocks(locks...); err != nil {
		return err
	}
	l := wire.StreamSettle{Release: make([]int64, len(locks))}
	for i, lk := range locks {
		l.Release[i] = lk.Seq
	}
	_, err := s.send(ctx, l)
	return err
}

// Close ends the stream and waits for its reader. What it handed out and
// was not settled stays locked until its lease ends (or is settled through
// the Client's own calls).
func (s *Stream) Close() error {
	_ = s.pw.Close() // the broker sees the end of the lines and ends its answer
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	s.cancel()
	<-s.done
	return nil
}
