package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
)

func (s *Server) checkBatch(n int, what string) error {
	if n > s.cfg.MaxBatch {
		return &apiError{wire.CodeTooLarge, wire.ReasonBatchTooLarge, fmt.Sprintf("%d %s, at most %d per request", n, what, s.cfg.MaxBatch)}
	}
	return nil
}

// sendMessages sends in, in one transaction.
func (s *Server) sendMessages(ctx context.Context, queue string, in []wire.SendMessage) ([]outbox.Result, error) {
	msgs := make([]outbox.Message, len(in))
	for i, m := range in {
		msgs[i] = m.Outbox()
	}
	return outbox.Send(ctx, s.st, queue, msgs...)
}

func (s *Server) send(r *http.Request) (result, error) {
	m, err := decode[wire.SendMessage](r.Body)
	if err != nil {
		return result{}, err
	}
	res, err := s.sendMessages(r.Context(), r.PathValue("queue"), []wire.SendMessage{m})
	if err != nil {
		return result{}, err
	}
	res[0] = coveredCopies(keyOf(r.Context()), res[0])
	if res[0].Err != nil {
		return result{}, res[0].Err // a single send's dedup conflict is 409
	}
	return created(wire.FromResult(res[0]))
}

func (s *Server) sendBatch(r *http.Request) (result, error) {
	req, err := decode[wire.SendBatchRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := s.checkBatch(len(req.Messages), "messages"); err != nil {
		return result{}, err
	}
	out := wire.SendBatchResponse{Results: []wire.SendResult{}}
	if len(req.Messages) == 0 {
		return ok(out)
	}
	res, err := s.sendMessages(r.Context(), r.PathValue("queue"), req.Messages)
	if err != nil {
		return result{}, err
	}
	k := keyOf(r.Context())
	for _, x := range res {
		out.Results = append(out.Results, wire.FromResult(coveredCopies(k, x)))
	}
	return ok(out)
}

// coveredCopies is r with only the copies in queues k covers: a send to a
// topic names no subscription queue outside the key's scope. Seq, Duplicate
// and Err are then those of the first copy left (none: a send no covered
// subscription took).
func coveredCopies(k keys.Key, r outbox.Result) outbox.Result {
	if k.Scope.AllQueues() || len(r.Copies) == 0 {
		return r
	}
	out := outbox.Result{Copies: []outbox.Copy{}}
	for _, c := range r.Copies {
		if k.Scope.HasQueue(c.Queue) {
			out.Copies = append(out.Copies, c)
		}
	}
	if len(out.Copies) > 0 {
		first := out.Copies[0]
		out.Seq, out.Duplicate, out.Err = first.Seq, first.Duplicate, first.Err
	}
	return out
}

// receiveOptions checks a receive's options and bounds them by the
// broker's: its wait by Config.MaxWait, its bytes by the answer's budget.
func (s *Server) receiveOptions(req wire.ReceiveRequest) (mqlite.ReceiveOptions, error) {
	opts, err := req.Options()
	if err != nil {
		return opts, err
	}
	opts.Wait = min(opts.Wait, s.cfg.MaxWait)
	opts.MaxBytes, err = s.budget(opts.MaxBytes)
	return opts, err
}

// waitFor readies the ctx of a receive: tagged with the receiver it is for
// (the store's registry of receivers counts it), and, when it may wait
// (wait > 0), holding one of Config.MaxLongPolls places, one of its key's
// Config.MaxLongPollsPerKey (503 too_many_long_polls when none is left),
// and watched (see watch). done releases what it took.
func (s *Server) waitFor(r *http.Request, wait time.Duration) (ctx context.Context, done func(), err error) {
	if wait <= 0 {
		if ctx, err = receiverCtx(r); err != nil {
			return nil, nil, err
		}
		return ctx, func() {}, nil
	}
	key := keyOf(r.Context()).ID
	if !s.polls.take(key) {
		if _, err := receiverCtx(r); err != nil {
			return nil, nil, err
		}
		return nil, nil, errBusy()
	}
	ctx, unwatch, err := s.watch(r)
	if err != nil {
		s.polls.give(key)
		return nil, nil, err
	}
	return ctx, func() { unwatch(); s.polls.give(key) }, nil
}

// errBusy is the answer to a wait that finds no place left.
func errBusy() error {
	return &apiError{wire.CodeUnavailable, wire.ReasonBusy, "too many receives waiting; retry"}
}

// watch readies the ctx of a receive or a stream that may wait: tagged
// with the receiver it is for, ended by a shutdown (the receive then
// answers nothing) and by the revocation of the request's key (errRevoked
// as the cause), and counted for Shutdown. done releases what it took.
func (s *Server) watch(r *http.Request) (ctx context.Context, done func(), err error) {
	if ctx, err = receiverCtx(r); err != nil {
		return nil, nil, err
	}
	if s.drain.Err() != nil {
		return nil, nil, &apiError{wire.CodeUnavailable, wire.ReasonDraining, "broker is shutting down"}
	}
	s.polling.Add(1)
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.drain, func() { cancel(nil) })
	remove, ok := s.waiting.add(keyOf(ctx).ID, cancel)
	done = func() {
		if remove != nil {
			remove()
		}
		stop()
		cancel(nil)
		s.polling.Done()
	}
	if !ok {
		done()
		return nil, nil, errRevokedKey()
	}
	return ctx, done, nil
}

// received answers what a receive under ctx (from waitFor) claimed: a key
// revoked while it waited gets 401 and what the claim took as the
// revocation began goes back at once; a shutdown that ended the wait
// answers nothing.
func (s *Server) received(r *http.Request, ctx context.Context, msgs []mqlite.Message, err error) ([]wire.ReceivedMessage, error) {
	if errors.Is(context.Cause(ctx), errRevoked) {
		for _, m := range msgs {
			_ = s.st.Abandon(context.WithoutCancel(ctx), m.Lock(), 0)
		}
		return nil, errRevokedKey()
	}
	if err != nil {
		if s.drain.Err() != nil && r.Context().Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, mqlite.ErrClosed)) {
			return []wire.ReceivedMessage{}, nil
		}
		return nil, err
	}
	return wire.FromMessages(msgs), nil
}

func (s *Server) receive(r *http.Request) (result, error) {
	req, err := decode[wire.ReceiveRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	opts, err := s.receiveOptions(req)
	if err != nil {
		return result{}, err
	}
	ctx, done, err := s.waitFor(r, opts.Wait)
	if err != nil {
		return result{}, err
	}
	defer done()
	msgs, err := s.st.Receive(ctx, r.PathValue("queue"), opts)
	out, err := s.received(r, ctx, msgs, err)
	if err != nil {
		return result{}, err
	}
	return ok(wire.MessagesResponse{Messages: out})
}

// completeReceive completes the request's locks and claims the next
// messages in one commit (Store.CompleteAndReceive): one round trip per
// message for a consumer that handles one at a time.
func (s *Server) completeReceive(r *http.Request) (result, error) {
	req, err := decode[wire.CompleteReceiveRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := s.checkBatch(len(req.Complete), "locks"); err != nil {
		return result{}, err
	}
	if err := checkLockTokens(req.Complete); err != nil {
		return result{}, err
	}
	opts, err := s.receiveOptions(req.Receive)
	if err != nil {
		return result{}, err
	}
	q := r.PathValue("queue")
	locks := make([]mqlite.Lock, len(req.Complete))
	for i, l := range req.Complete {
		locks[i] = l.Lock(q)
	}
	ctx, done, err := s.waitFor(r, opts.Wait)
	if err != nil {
		return result{}, err
	}
	defer done()
	res, msgs, err := s.st.CompleteAndReceive(ctx, q, locks, opts)
	if err != nil && res == nil {
		return result{}, err
	}
	out := wire.CompleteReceiveResponse{Results: make([]wire.ItemResult, len(res))}
	for i, e := range res {
		out.Results[i].Error = wire.ErrorOf(e)
	}
	if out.Messages, err = s.received(r, ctx, msgs, err); err != nil {
		return result{}, err
	}
	return ok(out)
}

func (s *Server) complete(r *http.Request) (result, error) {
	req, err := decodeLock(r.Body)
	if err != nil {
		return result{}, err
	}
	if err := s.st.Complete(r.Context(), req.Lock(r.PathValue("queue"))); err != nil {
		return result{}, err
	}
	return noContent()
}

func (s *Server) locks(r *http.Request) ([]mqlite.Lock, error) {
	req, err := decode[wire.LocksRequest](r.Body)
	if err != nil {
		return nil, err
	}
	if err := s.checkBatch(len(req.Locks), "locks"); err != nil {
		return nil, err
	}
	if err := checkLockTokens(req.Locks); err != nil {
		return nil, err
	}
	q := r.PathValue("queue")
	locks := make([]mqlite.Lock, len(req.Locks))
	for i, l := range req.Locks {
		locks[i] = l.Lock(q)
	}
	return locks, nil
}

func (s *Server) completeBatch(r *http.Request) (result, error) {
	locks, err := s.locks(r)
	if err != nil {
		return result{}, err
	}
	out := wire.ResultsResponse{Results: make([]wire.ItemResult, len(locks))}
	if len(locks) == 0 {
		return ok(out)
	}
	errs, err := s.st.CompleteBatch(r.Context(), locks)
	if err != nil {
		return result{}, err
	}
	for i, e := range errs {
		out.Results[i].Error = wire.ErrorOf(e)
	}
	return ok(out)
}

func (s *Server) abandon(r *http.Request) (result, error) {
	req, err := decode[wire.AbandonRequest](r.Body)
	if err == nil {
		err = checkTokens(req.Token)
	}
	if err != nil {
		return result{}, err
	}
	if req.DelayMS < 0 {
		return result{}, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative delay_ms"}
	}
	l := mqlite.Lock{Queue: r.PathValue("queue"), Seq: req.Seq, Token: req.Token}
	if err := s.st.AbandonWithReason(workerCtx(r), l, wire.MSDur(req.DelayMS), req.Reason); err != nil {
		return result{}, err
	}
	return noContent()
}

// release gives back a delivery its holder never started, uncounted, as
// Store.Release.
func (s *Server) release(r *http.Request) (result, error) {
	req, err := decodeLock(r.Body)
	if err != nil {
		return result{}, err
	}
	if err := s.st.Release(r.Context(), req.Lock(r.PathValue("queue"))); err != nil {
		return result{}, err
	}
	return noContent()
}

func (s *Server) reject(r *http.Request) (result, error) {
	req, err := decode[wire.RejectRequest](r.Body)
	if err == nil {
		err = checkTokens(req.Token)
	}
	if err != nil {
		return result{}, err
	}
	l := mqlite.Lock{Queue: r.PathValue("queue"), Seq: req.Seq, Token: req.Token}
	if err := s.st.Reject(workerCtx(r), l, req.Reason, req.Description); err != nil {
		return result{}, err
	}
	return noContent()
}

func (s *Server) deferMsg(r *http.Request) (result, error) {
	req, err := decodeLock(r.Body)
	if err != nil {
		return result{}, err
	}
	if err := s.st.Defer(r.Context(), req.Lock(r.PathValue("queue"))); err != nil {
		return result{}, err
	}
	return noContent()
}

func (s *Server) receiveDeferred(r *http.Request) (result, error) {
	req, err := decode[wire.SeqRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	ctx, err := receiverCtx(r)
	if err != nil {
		return result{}, err
	}
	m, err := s.st.ReceiveDeferred(ctx, r.PathValue("queue"), req.Seq)
	if err != nil {
		return result{}, err
	}
	return ok(wire.MessageResponse{Message: wire.FromMessage(m)})
}

func (s *Server) renew(r *http.Request) (result, error) {
	req, err := decodeLock(r.Body)
	if err != nil {
		return result{}, err
	}
	until, err := s.st.Renew(r.Context(), req.Lock(r.PathValue("queue")))
	if err != nil {
		return result{}, err
	}
	return ok(wire.RenewResponse{LockedUntil: until})
}

func (s *Server) renewBatch(r *http.Request) (result, error) {
	locks, err := s.locks(r)
	if err != nil {
		return result{}, err
	}
	out := wire.ResultsResponse{Results: make([]wire.ItemResult, len(locks))}
	if len(locks) == 0 {
		return ok(out)
	}
	res, err := s.st.RenewBatch(r.Context(), locks)
	if err != nil {
		return result{}, err
	}
	for i, x := range res {
		out.Results[i] = wire.ItemResult{Error: wire.ErrorOf(x.Err), LockedUntil: x.LockedUntil}
	}
	return ok(out)
}

// budget is the byte budget of an answer whose request asked for asked
// (0: nothing): Config.MaxResponseBytes, or less if asked.
func (s *Server) budget(asked int64) (int64, error) {
	limit := s.cfg.MaxResponseBytes
	switch {
	case asked < 0:
		return 0, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "negative max_bytes"}
	case limit < 0: // off
		return asked, nil
	case asked > 0:
		return min(asked, limit), nil
	}
	return limit, nil
}

// peekOptions reads from_seq, max and max_bytes from the query string
// (decodePeekQuery refuses any other parameter); the answer's byte budget
// applies.
func (s *Server) peekOptions(r *http.Request) (mqlite.PeekParams, error) {
	opts, err := decodePeekQuery(r.URL.Query())
	if err != nil {
		return opts, err
	}
	opts.MaxBytes, err = s.budget(opts.MaxBytes)
	return opts, err
}

// queryInts reads the integer parameters of the query string that set
// names, each into its setter; one that is not an integer is refused.
func queryInts(r *http.Request, set map[string]func(int64)) error {
	return intParams(r.URL.Query(), set)
}

// intParams is queryInts on a parsed query.
func intParams(q url.Values, set map[string]func(int64)) error {
	for name, f := range set {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: name + " is not an integer"}
			}
			f(n)
		}
	}
	return nil
}

func (s *Server) peek(r *http.Request) (result, error) {
	opts, err := s.peekOptions(r)
	if err != nil {
		return result{}, err
	}
	msgs, err := s.st.Peek(r.Context(), r.PathValue("queue"), opts)
	if err != nil {
		return result{}, err
	}
	return ok(wire.MessagesResponse{Messages: wire.FromMessages(msgs)})
}

func (s *Server) deliverNow(r *http.Request) (result, error) {
	req, err := decode[wire.DeliverNowRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	return s.countSeqs(req.Seqs, func(seqs []int64) (int, error) {
		return s.st.DeliverNow(r.Context(), r.PathValue("queue"), mqlite.DeliverNowOptions{Seqs: seqs})
	})
}

// countSeqs runs an operator call on the seqs of a request, bounded like
// every batch, and answers how many messages it changed.
func (s *Server) countSeqs(seqs []int64, call func([]int64) (int, error)) (result, error) {
	if err := s.checkBatch(len(seqs), "seqs"); err != nil {
		return result{}, err
	}
	n, err := call(seqs)
	if err != nil {
		return result{}, err
	}
	return ok(wire.CountResponse{Count: n})
}
