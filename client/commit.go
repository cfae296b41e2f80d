package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/outbox"
)

// Batch is what one Commit commits in one transaction on the broker, all
// of it or nothing: completions, rejects, sends and typed jobs, across any
// queues the key covers. The zero Batch is empty and ready. A Batch is a
// consumer.Tx, so a consumer.TxStep stages its sends in it. Not safe for
// concurrent use.
//
// Its idempotency key is made at its first Commit and kept: committing the
// same Batch again (after ErrOutcomeUnknown) replays the first commit's
// answer when it committed, and commits nothing new. A Batch that settles
// a delivery takes the key its locks derive (the broker's
// wire.CommitRequest.LocksKey), so another Batch with the same locks and
// the same sends replays too, and one with other sends finds the deliveries
// settled (mqlite.ErrAlreadySettled); the same Batch committed again with
// items added is mqlite.ErrAttemptConflict. A Batch that only sends takes a
// random one.
type Batch struct {
	req wire.CommitRequest
}

var _ consumer.Tx = (*Batch)(nil)

// Complete stages the completion of the delivery l. A malformed lock is
// mqlite.ErrInvalidArgument, with nothing staged.
func (b *Batch) Complete(l mqlite.Lock) error {
	if err := l.Validate(); err != nil {
		return err
	}
	b.req.Complete = append(b.req.Complete, wire.FromLock(l))
	return nil
}

// Reject stages the dead-lettering of the delivery l with a reason and a
// description (bounded as Store.Reject bounds them). Bad input is
// mqlite.ErrInvalidArgument, with nothing staged.
func (b *Batch) Reject(l mqlite.Lock, reason, description string) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if err := mqlite.ValidateReject(reason, description); err != nil {
		return err
	}
	b.req.Reject = append(b.req.Reject, wire.CommitReject{Queue: l.Queue, Seq: l.Seq, Token: l.Token,
		Reason: reason, Description: description})
	return nil
}

// Send stages msgs for queue (or a topic). A message outbox.SendOne would
// refuse (outbox.Message.Validate) is that error, with nothing staged; a
// MessageID that conflicts fails the Commit. ctx's trace context goes
// along as in Client.Send.
func (b *Batch) Send(ctx context.Context, queue string, msgs ...outbox.Message) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	snd := wire.CommitSend{Queue: queue, Messages: make([]wire.SendMessage, len(msgs))}
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		snd.Messages[i] = fromOutbox(ctx, m)
	}
	b.req.Send = append(b.req.Send, snd)
	return nil
}

// InsertJobs stages typed jobs (package jobs; jobs.Raw makes them): the
// broker inserts them in the Batch's transaction as jobs.InsertRaw does on
// the store, a unique one after looking its key up there, so that the
// check and the insert are one. A job Raw would not have made is that
// error, with nothing staged.
func (b *Batch) InsertJobs(js ...jobs.RawJob) error {
	cj := make([]wire.CommitJob, len(js))
	for i, j := range js {
		if err := checkQueue(j.Opts.Queue); err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		if err := j.Validate(); err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		cj[i] = wire.FromRawJob(j)
	}
	b.req.Jobs = append(b.req.Jobs, cj...)
	return nil
}

var _ jobs.Carrier = (*Batch)(nil)

// SendCarried is jobs.Carrier: it stages msg for queue under
// msg.MessageID, whose dedup entry the broker moves from the message
// fromSeq of queue to msg, in the commit's transaction; fromSeq must be a
// delivery the Batch completes (else the Commit is ErrMalformed). A
// message outbox.SendOne would refuse, or one without a MessageID, is
// that error, with nothing staged.
func (b *Batch) SendCarried(ctx context.Context, queue string, fromSeq int64, msg outbox.Message) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	if err := msg.Validate(); err != nil {
		return err
	}
	if msg.MessageID == "" || fromSeq <= 0 {
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "a carried send needs a MessageID and the seq it comes from"}
	}
	b.req.Carry = append(b.req.Carry, wire.CommitCarry{Queue: queue, FromSeq: fromSeq, Message: fromOutbox(ctx, msg)})
	return nil
}

// CommitResult is the answer of Commit.
type CommitResult struct {
	// Sends holds, for each Send staged in the Batch in order, one result
	// per message (the copies of the queues the key covers).
	Sends [][]outbox.Result
	// Jobs holds one result per job staged with InsertJobs, in order: a
	// unique job that was there already is its InsertResult.Duplicate.
	Jobs []jobs.InsertResult
	// Replayed is true when the broker answered from the record of an
	// earlier commit of the same Batch: nothing new was committed.
	Replayed bool
}

// Commit commits b on the broker (POST /v1/commit) in one transaction:
// every completion, reject and send of b, or none of them. A lock lost
// (a lapsed lease, a stale token) is mqlite.ErrLockLost and a conflicting
// MessageID mqlite.ErrDuplicateConflict, with nothing committed; a key
// that lacks the role on, or does not cover, one of b's queues is
// ErrForbidden; more items than the broker's batch limit is
// ErrRequestTooLarge; an empty b is ErrMalformed. Retries (as for every
// call) and a later Commit of the same b carry b's idempotency key: a
// commit that went through answers again with Replayed.
//
// Either it commits all of b (nil), or it commits nothing (an error), or,
// when a try may have committed and no later one gave a definite answer
// before ctx ended or Config.MaxElapsed passed, it is ErrOutcomeUnknown:
// then commit b again to learn (safe, it never commits twice). It blocks
// until then.
func (c *Client) Commit(ctx context.Context, b *Batch) (CommitResult, error) {
	if b == nil {
		return CommitResult{}, &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument, Detail: "nil Batch"}
	}
	if b.req.IdempotencyKey == "" {
		if b.req.IdempotencyKey = b.req.LocksKey(); b.req.IdempotencyKey == "" {
			b.req.IdempotencyKey = newAttemptID()
		}
	}
	var out wire.CommitResponse
	unknown := false
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/commit", in: b.req, out: &out, unknown: &unknown}); err != nil {
		if unknown && !definite(err) {
			return CommitResult{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return CommitResult{}, err
	}
	if len(out.Sends) != len(b.req.Send) {
		return CommitResult{}, fmt.Errorf("client: commit: %d results for %d sends", len(out.Sends), len(b.req.Send))
	}
	if len(out.Jobs) != len(b.req.Jobs) {
		return CommitResult{}, fmt.Errorf("client: commit: %d results for %d jobs", len(out.Jobs), len(b.req.Jobs))
	}
	res := CommitResult{Sends: make([][]outbox.Result, len(out.Sends)), Replayed: out.Replayed}
	if len(out.Jobs) > 0 {
		res.Jobs = make([]jobs.InsertResult, len(out.Jobs))
		for i, j := range out.Jobs {
			res.Jobs[i] = j.InsertResult()
		}
	}
	for i, s := range out.Sends {
		res.Sends[i] = make([]outbox.Result, len(s.Results))
		for j, r := range s.Results {
			res.Sends[i][j] = r.Result()
		}
	}
	return res, nil
}

// definite reports whether err, the last answer to a commit some try of
// which may have committed, says that nothing committed: a refusal of the
// request itself. The broker's unavailability, ctx's end and a lock lost
// (the deliveries settled, perhaps by the try whose answer was lost, its
// record dropped) do not.
func definite(err error) bool {
	if errors.Is(err, mqlite.ErrLockLost) {
		return false
	}
	var e *Error
	return errors.As(err, &e) && !transient(e.Status)
}

var _ jobs.Inserter = (*Client)(nil)

// InsertJobs is jobs.Inserter, for jobs.InsertVia and jobs.InsertManyVia
// over the broker: it commits a Batch of the jobs alone (POST
// /v1/commit), all inserted or none, each unique one after looking its
// key up in the same transaction of the broker's, so that of two clients
// inserting the same unique job at once one inserts it and the other gets
// it back (jobs.InsertResult.Duplicate). Its retries carry the Batch's
// idempotency key: a try whose answer was lost answers again from its
// record, the job not a duplicate. After ErrOutcomeUnknown the same insert
// again returns the job if the first went through (a duplicate then).
func (c *Client) InsertJobs(ctx context.Context, js []jobs.RawJob) ([]jobs.InsertResult, error) {
	if len(js) == 0 {
		return nil, nil
	}
	var b Batch
	if err := b.InsertJobs(js...); err != nil {
		return nil, err
	}
	res, err := c.Commit(ctx, &b)
	if err != nil {
		return nil, err
	}
	return res.Jobs, nil
}

var _ consumer.Committer = (*Client)(nil)

// CommitTx is consumer.Committer, for consumer.LoopTx over the broker: it
// runs step with a new Batch (step's error is CommitTx's, nothing sent),
// stages the completion of l and commits the Batch under the key l
// derives: a CommitTx of the same l whose step stages the same sends
// replays (after ErrOutcomeUnknown, say), one with other sends finds l
// settled (mqlite.ErrAlreadySettled), and neither commits again.
func (c *Client) CommitTx(ctx context.Context, l mqlite.Lock, step consumer.TxStep) error {
	var b Batch
	if step != nil {
		if err := step(ctx, &b); err != nil {
			return err
		}
	}
	if err := b.Complete(l); err != nil {
		return err
	}
	_, err := c.Commit(ctx, &b)
	return err
}
