package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/outbox"
)

// commitPattern is the route of commit.
const commitPattern = "POST /v1/commit"

// commit answers POST /v1/commit: the request's completions, rejects and
// sends in one transaction of the store, all of them or none. A lock lost
// (a lapsed lease, a stale token, a seq of another queue, a delivery
// already settled) is 409 lock_lost and a send slot's conflict 409
// duplicate_conflict, with nothing committed. The key needs the consumer
// role on every queue it settles and the producer role on every queue or
// topic it sends to (an admin key has both), and is refused (403) on the
// first it does not cover, before anything is read, the idempotency
// record included. A request with an idempotency key, or without one but
// settling a delivery (its key is then wire.CommitRequest.LocksKey's), is
// answered from its record when it comes again, committing nothing new.
func (s *Server) commit(r *http.Request) (result, error) {
	req, err := decode[wire.CommitRequest](r.Body)
	if err != nil {
		return result{}, err
	}
	if err := s.checkCommit(r.Context(), req); err != nil {
		return result{}, err
	}
	digest := commitDigest(req)
	derived := req.LocksKey()
	idem := req.IdempotencyKey
	if idem == "" {
		idem = derived
	}
	k := keyOf(r.Context())
	x := driver.Of(s.st.DB()) // the engine of the store's transactions
	scope := k.ID
	var out wire.CommitResponse
	counted := false // the records' count moved in this transaction
	err = s.st.Tx(r.Context(), func(tx *mqlite.Tx) error {
		ctx, sqlTx := tx.Context(), tx.SQL()
		if idem != "" {
			rec, found, err := x.LookupCommit(ctx, sqlTx, scope, idem)
			if err != nil {
				return err
			}
			// A key derived from the locks (named or not) names the
			// deliveries, not the request: another request on them finds
			// them settled (ErrAlreadySettled) in its items.
			if found && (idem != derived || rec.Request == digest) {
				return replayCommit(idem, rec, digest, &out)
			}
		}
		res, wrote, err := commitItems(ctx, sqlTx, k, req)
		if err != nil {
			return err
		}
		out = res
		if idem == "" || !wrote {
			return nil // nothing to replay: the same request again writes nothing again
		}
		blob, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("record commit: %w", err)
		}
		if err := x.RecordCommit(ctx, sqlTx, scope, idem, driver.CommitRecord{Request: digest, Result: blob}); err != nil {
			return err
		}
		counted = true
		return s.records.add(ctx, sqlTx, scope, s.cfg.MaxCommitRecords)
	})
	if err != nil {
		if counted {
			s.records.forget(scope) // its count or its trim rolled back: count again next time
		}
		return result{}, err
	}
	return ok(out)
}

// commitRecords counts the commit records of each access key's scope, so
// that a commit trims them only when they pass the bound
// (Config.MaxCommitRecords), not at every commit. A count is at least the
// records there are (the janitor's sweep only lowers them); a scope not
// counted yet is counted at its first record.
type commitRecords struct {
	mu sync.Mutex
	n  map[string]int
}

// add counts one record more in scope, in the transaction that wrote it,
// and past bound drops the oldest down to seven eighths of bound (a count
// of the rows left, in the same transaction).
func (c *commitRecords) add(ctx context.Context, tx driver.DBTX, scope string, bound int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, counted := c.n[scope]
	if counted && n < bound {
		c.n[scope] = n + 1
		return nil
	}
	keep := bound
	if counted {
		keep = bound - bound/8
	}
	n, err := driver.Of(tx).TrimCommits(ctx, tx, scope, keep)
	if err != nil {
		return err
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[scope] = n
	return nil
}

// forget drops scope's count, after a transaction that may have trimmed
// it rolled back.
func (c *commitRecords) forget(scope string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.n, scope)
}

// replayCommit fills out with the answer rec recorded, when digest is the
// request rec recorded; another request under the same key is
// mqlite.ErrAttemptConflict.
func replayCommit(key string, rec driver.CommitRecord, digest string, out *wire.CommitResponse) error {
	if rec.Request != digest {
		return fmt.Errorf("%w: idempotency key %q was used by another commit request", mqlite.ErrAttemptConflict, key)
	}
	if err := json.Unmarshal(rec.Result, out); err != nil {
		return fmt.Errorf("replay commit: %w", err)
	}
	out.Replayed = true
	return nil
}

// commitItems settles and sends the items of req in tx, and reports
// whether it wrote anything (a settlement, a message that was not a
// duplicate). The first error (a lock lost, a send slot's conflict) is
// returned: the caller rolls tx back.
func commitItems(ctx context.Context, tx outbox.Execer, k keys.Key, req wire.CommitRequest) (out wire.CommitResponse, wrote bool, err error) {
	out = wire.CommitResponse{Sends: make([]wire.SendBatchResponse, len(req.Send))}
	for i, c := range req.Complete {
		if err := consumer.CompleteTx(ctx, tx, c.Lock()); err != nil {
			return out, false, fmt.Errorf("complete %d (%s seq %d): %w", i, c.Queue, c.Seq, err)
		}
	}
	for i, rj := range req.Reject {
		if err := consumer.RejectTx(ctx, tx, rj.Lock(), rj.Reason, rj.Description); err != nil {
			return out, false, fmt.Errorf("reject %d (%s seq %d): %w", i, rj.Queue, rj.Seq, err)
		}
	}
	wrote = len(req.Complete)+len(req.Reject) > 0
	for i, snd := range req.Send {
		msgs := make([]outbox.Message, len(snd.Messages))
		for j, m := range snd.Messages {
			msgs[j] = m.Outbox()
		}
		res, err := outbox.SendBatch(ctx, tx, snd.Queue, msgs)
		if err != nil {
			return out, false, fmt.Errorf("send %d (%s): %w", i, snd.Queue, err)
		}
		out.Sends[i].Results = make([]wire.SendResult, len(res))
		for j, x := range res {
			if err := slotErr(k, x); err != nil {
				return out, false, fmt.Errorf("send %d (%s) message %d: %w", i, snd.Queue, j, err)
			}
			wrote = wrote || inserted(x)
			out.Sends[i].Results[j] = wire.FromResult(coveredCopies(k, x))
		}
	}
	for i, c := range req.Carry {
		m := c.Message.Outbox()
		if err := driver.Of(tx).ForgetDedup(ctx, tx, c.Queue, m.MessageID, c.FromSeq); err != nil {
			return out, false, fmt.Errorf("carry %d (%s seq %d): %w", i, c.Queue, c.FromSeq, err)
		}
		res, err := outbox.SendBatch(ctx, tx, c.Queue, []outbox.Message{m})
		if err != nil {
			return out, false, fmt.Errorf("carry %d (%s seq %d): %w", i, c.Queue, c.FromSeq, err)
		}
		if err := slotErr(k, res[0]); err != nil {
			return out, false, fmt.Errorf("carry %d (%s seq %d): %w", i, c.Queue, c.FromSeq, err)
		}
		wrote = true
	}
	if len(req.Jobs) > 0 {
		raw := make([]jobs.RawJob, len(req.Jobs))
		for i, j := range req.Jobs {
			raw[i] = j.RawJob()
		}
		res, err := jobs.InsertRaw(ctx, tx, raw)
		if err != nil {
			return out, false, fmt.Errorf("jobs: %w", err)
		}
		out.Jobs = make([]wire.JobResult, len(res))
		for i, r := range res {
			wrote = wrote || !r.Duplicate
			out.Jobs[i] = wire.FromInsertResult(r)
		}
	}
	return out, wrote, nil
}

// inserted reports whether a send left a row: a copy that was not a
// duplicate (or, with no copies, a message that was not).
func inserted(r outbox.Result) bool {
	if len(r.Copies) == 0 {
		return !r.Duplicate
	}
	for _, c := range r.Copies {
		if !c.Duplicate {
			return true
		}
	}
	return false
}

// errHiddenConflict is the conflict of a copy in a queue the key does not
// cover: the sentinel alone, no seq or queue of it.
var errHiddenConflict = fmt.Errorf("%w: in a subscription of the topic", mqlite.ErrDuplicateConflict)

// slotErr is the error of one sent message, or of one of its copies: in a
// commit it fails the whole request. A conflict names no queue, and one in
// a queue k does not cover (a topic's subscription) no seq either: as the
// plain send route, the answer shows nothing outside the key's scope.
func slotErr(k keys.Key, r outbox.Result) error {
	if len(r.Copies) == 0 {
		return r.Err
	}
	for _, c := range r.Copies {
		if c.Err == nil {
			continue
		}
		if !k.Scope.AllQueues() && !k.Scope.HasQueue(c.Queue) {
			return errHiddenConflict
		}
		return c.Err
	}
	return nil
}

// checkCommit refuses a commit request before anything is read: an empty
// one, one past Config.MaxBatch items (locks and messages together),
// tokens or a key past their bounds, a reject's reason past its bounds,
// and a key that lacks the role on, or does not cover, one of the queues
// it names.
func (s *Server) checkCommit(ctx context.Context, req wire.CommitRequest) error {
	n := len(req.Complete) + len(req.Reject) + len(req.Jobs) + len(req.Carry)
	for _, snd := range req.Send {
		n += len(snd.Messages)
	}
	if n == 0 {
		return errMalformed("a commit request with nothing to complete, reject, send or insert")
	}
	if err := s.checkBatch(n, "locks and messages"); err != nil {
		return err
	}
	if len(req.IdempotencyKey) > mqlite.MaxMessageIDLen {
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidArgument,
			Detail: fmt.Sprintf("an idempotency key of %d bytes, at most %d", len(req.IdempotencyKey), mqlite.MaxMessageIDLen)}
	}
	for _, c := range req.Complete {
		if err := checkTokens(c.Token); err != nil {
			return err
		}
		if err := requireQueue(ctx, keys.Consumer, c.Queue); err != nil {
			return err
		}
	}
	for _, rj := range req.Reject {
		if err := checkTokens(rj.Token); err != nil {
			return err
		}
		if err := requireQueue(ctx, keys.Consumer, rj.Queue); err != nil {
			return err
		}
		if err := mqlite.ValidateReject(rj.Reason, rj.Description); err != nil {
			return err
		}
	}
	for _, snd := range req.Send {
		if err := requireQueue(ctx, keys.Producer, snd.Queue); err != nil {
			return err
		}
		if len(snd.Messages) == 0 {
			return errMalformed("a send of no message to %q", snd.Queue)
		}
	}
	for _, c := range req.Carry {
		if !slices.ContainsFunc(req.Complete, func(l wire.CommitLock) bool { return l.Queue == c.Queue && l.Seq == c.FromSeq }) {
			return errMalformed("a carried send from %q seq %d, which the request does not complete", c.Queue, c.FromSeq)
		}
		if c.Message.MessageID == "" {
			return errMalformed("a carried send without a message_id")
		}
		if err := requireQueue(ctx, keys.Producer, c.Queue); err != nil {
			return err
		}
	}
	for i, j := range req.Jobs {
		if err := requireQueue(ctx, keys.Producer, j.Queue); err != nil {
			return err
		}
		if err := j.RawJob().Validate(); err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
	}
	return nil
}

// requireQueue is require for a queue a commit names in its body: an empty
// name, which require would let through as "no queue", is refused.
func requireQueue(ctx context.Context, role keys.Role, queue string) error {
	if queue == "" {
		return &mqlite.InvalidArgumentError{Kind: mqlite.ErrInvalidQueueName, Detail: "empty queue name"}
	}
	return require(ctx, role, queue)
}

// commitDigest identifies req's items, without its idempotency key: the
// same items under the same key replay, others conflict.
func commitDigest(req wire.CommitRequest) string {
	req.IdempotencyKey = ""
	b, _ := json.Marshal(req) // plain strings, numbers and bytes: it cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
