package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/notify"
	"github.com/mqlite/mqlite/internal/wire"
)

// streamPattern is the route of the streaming receive. Its request body is
// a stream of lines, bounded one line at a time (MaxStreamLine), not by
// Config.MaxBodyBytes as a whole.
const streamPattern = "POST /v1/queues/{queue}/stream"

// MaxStreamLine bounds one line a client writes on a stream; a longer one
// ends the stream with 413 too_large.
const MaxStreamLine = 1 << 20

// maxReadAhead bounds the bytes of a stream's client lines read and not
// yet answered: the reader stops reading past it until a commit answers
// lines, so that a client that writes faster than its lines commit, or
// does not read the answers (a write that waits holds every line behind
// it), holds at most this much of the broker's memory, besides one line
// (MaxStreamLine) being read.
const maxReadAhead = MaxStreamLine

// maxKeptOut bounds the buffer a stream keeps for its next write (enough
// for one message of a few KiB and its result), so that many idle streams
// hold little: a larger one is left to the garbage collector.
const maxKeptOut = 16 << 10

// maxLinesPerCommit bounds the client lines one commit of a stream
// settles; Config.MaxBatch bounds their settlements.
const maxLinesPerCommit = 64

// stream is the streaming receive: the answer is newline-delimited JSON
// (chunked over HTTP/1.1, a stream over HTTP/2) that hands out messages
// while fewer than window of them are unsettled, and the request body is
// the client's settlements, one JSON object per line, which flow back
// while messages flow out. The settlements that arrive together commit
// together, with the claim of the messages they make room for. The key is
// checked against the queue at the open; a revocation of the key ends the
// stream (an error line) and gives back what it held; the broker's
// shutdown ends it. A stream that breaks leaves its unsettled messages
// locked: their tokens still settle them through the other endpoints,
// and their leases give them back.
func (s *Server) stream(r *http.Request) (result, error) {
	window, budget, err := s.streamOptions(r)
	if err != nil {
		return result{}, err
	}
	q := r.PathValue("queue")
	if _, err := s.st.GetQueue(r.Context(), q); err != nil {
		return result{}, err
	}
	// The open takes a place for the stream's first wait (503 when its
	// key has none left: the client long-polls instead); a stream holds
	// one only while it waits for a message.
	key := keyOf(r.Context()).ID
	if !s.polls.take(key) {
		if _, err := receiverCtx(r); err != nil {
			return result{}, err
		}
		return result{}, errBusy()
	}
	ctx, done, err := s.watch(r)
	if err != nil {
		s.polls.give(key)
		return result{}, err
	}
	return result{raw: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer done()
		st := &streamer{s: s, q: q, key: key, slot: true, window: window, budget: budget,
			inflight: map[int64]string{}, ahead: newByteBudget(maxReadAhead)}
		defer st.giveSlot()
		st.serve(ctx, w, r)
	})}, nil
}

// streamOptions reads window (1 to Config.MaxBatch, 1000 at most; 10 by
// default) and max_bytes (the byte budget of each claim) from the query.
func (s *Server) streamOptions(r *http.Request) (window int, budget int64, err error) {
	window = 10
	q := r.URL.Query()
	if v := q.Get("window"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > min(s.cfg.MaxBatch, mqlite.MaxReceiveBatch) {
			return 0, 0, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument,
				Detail: fmt.Sprintf("window %s: want 1 to %d", wire.Quote(v), min(s.cfg.MaxBatch, mqlite.MaxReceiveBatch))}
		}
		window = n
	}
	var asked int64
	if v := q.Get("max_bytes"); v != "" {
		if asked, err = strconv.ParseInt(v, 10, 64); err != nil {
			return 0, 0, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "max_bytes is not an integer"}
		}
	}
	budget, err = s.budget(asked)
	return window, budget, err
}

// streamer is one stream's state.
type streamer struct {
	s        *Server
	q        string
	key      string // the id of the stream's access key
	slot     bool   // holds one of its key's long-poll places
	window   int
	budget   int64
	inflight map[int64]string // the tokens of the seqs handed out and not yet settled or released
	pending  *inLine          // a line read that did not fit in the last commit (Config.MaxBatch)
	ahead    *byteBudget      // the bytes of the lines read and not yet answered
	// maxSettles bounds the settlements of one commit; 0 means
	// Config.MaxBatch (a benchmark sets the old, larger bound).
	maxSettles int
	lines      int64  // client lines read so far
	out        []byte // the buffer of write, kept between writes up to maxKeptOut
	w          http.ResponseWriter
	rc         *http.ResponseController
}

// inLine is a decoded client line, or the error that ends the reading.
type inLine struct {
	v    wire.StreamSettle
	size int // its bytes, counted in the stream's read-ahead until answered
	err  error
}

func (st *streamer) serve(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	st.w, st.rc = w, http.NewResponseController(w)
	_ = st.rc.EnableFullDuplex()           // HTTP/1.1: read the body while answering
	_ = st.rc.SetReadDeadline(time.Time{}) // a stream reads for as long as it lives
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if err := st.flush(); err != nil {
		return
	}
	lines := make(chan inLine, maxLinesPerCommit)
	arrived := make(chan struct{}, 1) // a line came
	ended := make(chan struct{})      // closed once lines is
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() {
		defer func() {
			close(lines)
			close(ended)
		}()
		err := readStreamLines(r.Body, MaxStreamLine, func(b []byte) error {
			// Read no further ahead of the answers than maxReadAhead:
			// a client that does not read its answers stops the
			// reading of its lines.
			if err := st.ahead.take(readCtx, len(b)); err != nil {
				return err
			}
			v, fast := parseCompleteLine(b)
			var err error
			if !fast {
				v, err = decodeBytes[wire.StreamSettle](b)
			}
			if err == nil {
				err = st.s.checkBatch(v.Items(), "settlements in one line")
			}
			if err == nil {
				err = checkStreamTokens(v)
			}
			select {
			case lines <- inLine{v: v, size: len(b), err: err}:
			case <-readCtx.Done():
				return readCtx.Err()
			}
			select {
			case arrived <- struct{}{}:
			default:
			}
			return err
		})
		if err != nil && readCtx.Err() == nil {
			select {
			case lines <- inLine{err: err}:
			case <-readCtx.Done():
			}
		}
	}()
	err := st.run(ctx, lines, arrived, ended)
	stopReading()
	st.end(ctx, r, err)
	if err != nil {
		// The client's lines did not end: stop reading them, so that the
		// reader ends now.
		_ = st.rc.SetReadDeadline(time.Now())
	}
	for range lines { // the reader has ended once lines is closed
	}
	if err != nil {
		// The rest of the client's lines are still on the connection:
		// close it rather than read them as the next request.
		panic(http.ErrAbortHandler)
	}
}

// run hands out and settles until the client ends its body (nil), or an
// error ends the stream.
func (st *streamer) run(ctx context.Context, lines <-chan inLine, arrived, ended <-chan struct{}) error {
	closed := false // the client ended its body: settle what came, claim no more
	for {
		var (
			batch []wire.StreamSettle
			items int // the settlements of batch: Config.MaxBatch at most
			size  int // the bytes of batch's lines
		)
		// A commit takes whole lines, as many as fit in Config.MaxBatch
		// settlements (one at least, which checkBatch bounded): one commit
		// holds the store's one writer for so many, and no more, while
		// every other tenant's sends wait.
		limit := min(st.s.cfg.MaxBatch, mqlite.MaxReceiveBatch) // CompleteAndReceive's bound too
		if st.maxSettles > 0 {
			limit = st.maxSettles
		}
		take := func(l inLine) bool {
			if n := l.v.Items(); len(batch) == 0 || items+n <= limit {
				batch, items, size = append(batch, l.v), items+n, size+l.size
				return true
			}
			st.pending = &l
			return false
		}
		if st.pending != nil {
			l := *st.pending
			st.pending = nil
			take(l)
		}
		// Block for a line when nothing else can be done: the window is
		// full, or the client is done.
		if len(batch) == 0 && len(st.inflight) >= st.window && !closed {
			select {
			case l, ok := <-lines:
				if !ok {
					closed = true
					break
				}
				if l.err != nil {
					return l.err
				}
				take(l)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// The lines are gathered below: a signal of them left in arrived
		// would end the next wait at once, for nothing. A line sent after
		// this signals again.
		select {
		case <-arrived:
		default:
		}
	gather:
		for len(batch) < maxLinesPerCommit && st.pending == nil && !closed {
			select {
			case l, ok := <-lines:
				if !ok {
					closed = true
					break gather
				}
				if l.err != nil {
					return l.err
				}
				take(l)
			default:
				break gather
			}
		}
		switch {
		case len(batch) > 0:
			if err := st.settle(ctx, batch, !closed); err != nil {
				return err
			}
			st.ahead.give(size) // answered: the reader may read more
		case closed:
			return nil
		default:
			// Nothing to settle and room in the window (a full one
			// blocked for a line above): claim, and wait for a message
			// or for the client's next line, whichever comes first.
			if err := st.wait(ctx, arrived, ended); err != nil {
				return err
			}
		}
	}
}

// settle commits the settlements of batch with the claim of the messages
// they make room for (none when claim is false), answers each line, and
// writes what was claimed. The abandons and rejects (a handler's failures,
// the rare case) commit one by one before; the completes commit together
// with the claim.
func (st *streamer) settle(ctx context.Context, batch []wire.StreamSettle, claim bool) error {
	others := make([][]wire.ItemResult, len(batch))
	var locks []mqlite.Lock
	for i, l := range batch {
		for _, a := range l.Abandon {
			var e error
			if a.DelayMS < 0 {
				e = &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative delay_ms"}
			} else {
				e = st.s.st.Abandon(ctx, mqlite.Lock{Queue: st.q, Seq: a.Seq, Token: a.Token}, wire.MSDur(a.DelayMS))
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			others[i] = append(others[i], wire.ItemResult{Error: wire.ErrorOf(e)})
			delete(st.inflight, a.Seq)
		}
		for _, rj := range l.Reject {
			e := st.s.st.Reject(ctx, mqlite.Lock{Queue: st.q, Seq: rj.Seq, Token: rj.Token}, rj.Reason, rj.Description)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			others[i] = append(others[i], wire.ItemResult{Error: wire.ErrorOf(e)})
			delete(st.inflight, rj.Seq)
		}
		for _, seq := range l.Release {
			delete(st.inflight, seq)
		}
		for _, c := range l.Complete {
			locks = append(locks, c.Lock(st.q))
		}
	}
	freed := 0
	for _, l := range locks {
		if _, ok := st.inflight[l.Seq]; ok {
			freed++
		}
	}
	room := 0
	if claim {
		room = st.window - len(st.inflight) + freed
	}
	var (
		res  []error
		msgs []mqlite.Message
		err  error
	)
	switch {
	case room > 0:
		res, msgs, err = st.s.st.CompleteAndReceive(ctx, st.q, locks, mqlite.ReceiveOptions{Max: room, MaxBytes: st.budget})
	case len(locks) > 0:
		res, err = st.s.st.CompleteBatch(ctx, locks)
	}
	if err != nil {
		return err
	}
	// The messages go first, and the answers to the lines after them, in
	// one write: a consumer waits for the messages, and one flush is one
	// segment on the wire and one wake-up of the client's reader.
	evs := make([]wire.StreamEvent, 0, len(batch)+1)
	if len(msgs) > 0 {
		evs = append(evs, st.handOut(msgs))
	}
	next := 0
	for i, l := range batch {
		st.lines++
		ev := wire.StreamEvent{Line: st.lines, Results: make([]wire.ItemResult, 0, len(l.Complete)+len(others[i]))}
		for _, c := range l.Complete {
			ev.Results = append(ev.Results, wire.ItemResult{Error: wire.ErrorOf(res[next])})
			delete(st.inflight, c.Seq)
			next++
		}
		ev.Results = append(ev.Results, others[i]...)
		evs = append(evs, ev)
	}
	return st.write(evs...)
}

// settleHold is how long a client line that comes while the stream waits
// for a message waits for its commit. A message that becomes claimable
// meanwhile goes out first, and the line commits after it. Without the
// hold, a consumer's completion, written as it takes the next message,
// reaches the broker with that message's send: its commit and the empty
// claim after it take the store's one connection as the message commits,
// and the message waits behind them. A line that comes while the stream
// is not waiting, and the end of the lines, are not held.
const settleHold = time.Millisecond

// wait claims what fits in the window, long-polling until a message
// comes, settleHold after the client writes a line (arrived), at once when
// the client ends its lines (ended), when Config.MaxWait passes or ctx
// ends. A line interrupts the wait without cancelling it: a claim under
// way when the line comes commits and its messages go out (a cancelled
// claim would roll back, and its messages would wait for another).
func (st *streamer) wait(ctx context.Context, arrived, ended <-chan struct{}) error {
	if ok, err := st.takeSlot(ctx, arrived, ended); !ok {
		return err
	}
	defer st.giveSlot()
	interrupt := make(chan struct{}, 1)
	stop := make(chan struct{})
	held := make(chan struct{})
	go func() {
		defer close(held)
		holdLines(arrived, ended, stop, interrupt)
	}()
	msgs, err := st.s.st.Receive(notify.WithInterrupt(ctx, interrupt), st.q, mqlite.ReceiveOptions{
		Max: st.window - len(st.inflight), Wait: st.s.cfg.MaxWait, MaxBytes: st.budget})
	close(stop)
	<-held
	st.giveSlot() // before the write: a stream that waits for its client holds no place
	if err != nil || len(msgs) == 0 {
		return err
	}
	ev := st.handOut(msgs)
	if errors.Is(context.Cause(ctx), errRevoked) {
		// A claim (a send's hand-off among them) that committed as the
		// key was revoked: its messages are not written, and end gives
		// them back with the rest.
		return ctx.Err()
	}
	return st.write(ev)
}

// takeSlot takes a long-poll place of the stream's key for a wait, if it
// holds none, waiting for one to be given back. It reports false when a
// client line comes (arrived), the lines end or ctx ends first (with ctx's
// error): the stream then settles, ends or stops, and waits again after.
func (st *streamer) takeSlot(ctx context.Context, arrived, ended <-chan struct{}) (bool, error) {
	for !st.slot {
		freed := st.s.polls.released()
		if st.slot = st.s.polls.take(st.key); st.slot {
			break
		}
		select {
		case <-freed:
		case <-arrived:
			return false, nil
		case <-ended:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

// giveSlot gives back the long-poll place the stream holds, if any.
func (st *streamer) giveSlot() {
	if st.slot {
		st.slot = false
		st.s.polls.give(st.key)
	}
}

// holdLines signals interrupt settleHold after a line arrives, or at once
// when the lines end, unless stop is closed first.
func holdLines(arrived, ended, stop <-chan struct{}, interrupt chan<- struct{}) {
	select {
	case <-arrived:
		t := time.NewTimer(settleHold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ended:
		case <-stop:
			return
		}
	case <-ended:
	case <-stop:
		return
	}
	interrupt <- struct{}{} // never blocks: one signal, room for one
}

// handOut counts claimed messages in flight and returns the event that
// hands them out.
func (st *streamer) handOut(msgs []mqlite.Message) wire.StreamEvent {
	for _, m := range msgs {
		st.inflight[m.Seq] = m.LockToken
	}
	return wire.StreamEvent{Messages: wire.FromMessages(msgs)}
}

// end finishes the stream after run returned err: nothing for the client's
// end or a shutdown; otherwise an error line. A revoked key's messages go
// back at once.
func (st *streamer) end(ctx context.Context, r *http.Request, err error) {
	switch {
	case errors.Is(context.Cause(ctx), errRevoked):
		bg := context.WithoutCancel(ctx)
		for seq, token := range st.inflight {
			_ = st.s.st.Abandon(bg, mqlite.Lock{Queue: st.q, Seq: seq, Token: token}, 0)
		}
		err = errRevokedKey()
	case err == nil, st.s.drain.Err() != nil && r.Context().Err() == nil:
		return
	case r.Context().Err() != nil:
		return // the client went away
	}
	eb := errorBody(err)
	_ = st.write(wire.StreamEvent{Error: &eb})
}

// write writes evs, one line each, and flushes them together, each write
// with its own deadline (Config.WriteTimeout), so that a stream outlives
// the server's.
func (st *streamer) write(evs ...wire.StreamEvent) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.s.cfg.WriteTimeout))
	b := st.out[:0]
	for _, ev := range evs {
		var err error
		if b, err = wire.AppendStreamEvent(b, ev); err != nil {
			return err
		}
		b = append(b, '\n')
	}
	if cap(b) <= maxKeptOut {
		st.out = b
	}
	if _, err := st.w.Write(b); err != nil {
		return err
	}
	return st.flush()
}

func (st *streamer) flush() error { return st.rc.Flush() }

// readStreamLines calls fn on each non-blank line of r, without its line
// end, until r ends (nil), fn fails (its error) or a line is longer than
// max bytes (413 too_large).
func readStreamLines(r io.Reader, max int, fn func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), max)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(line); err != nil {
			return err
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return &apiError{wire.CodeTooLarge, wire.ReasonBodyTooLarge, fmt.Sprintf("a stream line over %d bytes", max)}
	}
	if sc.Err() != nil {
		return errMalformed("reading the stream: %v", sc.Err())
	}
	return nil
}
