package mqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mqlite/mqlite/internal/engine"
	"github.com/mqlite/mqlite/internal/errs"
)

// MaxReceiveBatch is the largest ReceiveOptions.Max.
const MaxReceiveBatch = 1000

// ReceiveMode selects how Receive hands messages out.
type ReceiveMode int

const (
	// PeekLock (the default) locks each message for the queue's
	// LockDuration; it must be settled with its Lock before the lease ends.
	PeekLock ReceiveMode = iota
	// ReceiveAndDelete removes the messages in the same transaction that
	// claims them: at-most-once, with no token and a zero LockedUntil.
	ReceiveAndDelete
)

// ReceiveOptions configures one Receive.
type ReceiveOptions struct {
	// Max is how many messages to claim at most, in one transaction.
	// Defaults to 1; at most 1000.
	Max int
	// Wait is how long to block for a first message when none is ready.
	// Zero returns at once. A commit that makes a message of the queue
	// claimable wakes the wait at once; so does the moment a scheduled
	// message falls due or a lease expires.
	Wait time.Duration
	// AttemptID tags the call: a retry with the same AttemptID (within
	// about 30 minutes) returns the same messages with the same tokens and
	// claims nothing new. Empty means no replay.
	AttemptID string
	// Mode is PeekLock (the default) or ReceiveAndDelete.
	Mode ReceiveMode
}

// Lock identifies one delivery of one message: what every settlement and
// renewal presents.
type Lock struct {
	Queue string
	Seq   int64
	Token string
}

// Message is a message as received or peeked.
type Message struct {
	Queue         string
	Seq           int64
	Body          []byte
	MessageID     string
	GroupID       string
	Subject       string
	Properties    map[string]string
	DeliveryCount int
	EnqueuedAt    time.Time
	ExpiresAt     time.Time // zero: no TTL
	// LockToken and LockedUntil are the delivery's fencing token and lease;
	// empty and zero for ReceiveAndDelete and Peek.
	LockToken   string
	LockedUntil time.Time
	// State is the message's state; set by Peek and PeekDeadLetters
	// ("active", "locked", "deferred", "scheduled", "dead_lettered").
	State string
	// VisibleAt is when a scheduled message falls due (Peek only).
	VisibleAt time.Time
	// DeadLetter says why and when the message was dead-lettered.
	DeadLetterReason      string
	DeadLetterDescription string
	DeadLetteredAt        time.Time
}

// Lock returns the message's lock, for settlement.
func (m Message) Lock() Lock { return Lock{Queue: m.Queue, Seq: m.Seq, Token: m.LockToken} }

func toMessage(queue string, c engine.Claimed) Message {
	m := Message{
		Queue: queue, Seq: c.Seq, Body: c.Body, MessageID: c.MessageID, Subject: c.Subject,
		DeliveryCount: int(c.DeliveryCount), EnqueuedAt: fromMillis(c.EnqueuedAt),
		ExpiresAt: fromMillis(c.ExpiresAt), LockToken: c.LockToken, LockedUntil: fromMillis(c.LockedUntil),
		DeadLetterReason: c.DeadLetterReason, DeadLetterDescription: c.DeadLetterDesc,
		DeadLetteredAt: fromMillis(c.DeadLetteredAt),
	}
	if c.GroupID != nil {
		m.GroupID = *c.GroupID
	}
	if m.Body == nil {
		m.Body = []byte{}
	}
	if c.Properties != "" {
		_ = json.Unmarshal([]byte(c.Properties), &m.Properties) // written by the outbox as a JSON object
	}
	return m
}

// queueCache keeps queue settings in memory: the claim path reads them on
// every call. The store is the only writer of the file, so the cache is
// invalidated by the store's own queue administration.
type queueCache struct {
	mu sync.Mutex
	m  map[string]engine.Queue
}

func (c *queueCache) get(ctx context.Context, db engine.DBTX, name string) (engine.Queue, error) {
	c.mu.Lock()
	q, ok := c.m[name]
	c.mu.Unlock()
	if ok {
		return q, nil
	}
	q, err := engine.GetQueue(ctx, db, name)
	if err != nil {
		return q, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]engine.Queue{}
	}
	c.m[name] = q
	c.mu.Unlock()
	return q, nil
}

func (c *queueCache) forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

func validateReceive(queue string, o *ReceiveOptions) error {
	if err := validateQueueName(queue); err != nil {
		return err
	}
	var err error
	if o.Max, err = batchMax(o.Max, 1); err != nil {
		return err
	}
	if o.Wait < 0 {
		return errs.Newf(errs.ErrInvalidArgument, "negative Wait")
	}
	if o.Mode != PeekLock && o.Mode != ReceiveAndDelete {
		return errs.Newf(errs.ErrInvalidArgument, fmt.Sprintf("unknown ReceiveMode %d", o.Mode))
	}
	if len(o.AttemptID) > MaxMessageIDLen {
		return errs.Newf(errs.ErrInvalidArgument, "AttemptID too long")
	}
	return nil
}

// Receive claims up to opts.Max messages of queue in one transaction. In
// PeekLock mode each comes locked for the queue's LockDuration with a fresh
// token; settle it with Complete, Abandon, Reject or Defer. With opts.Wait
// it blocks until a message is ready, Wait passes (then it returns no
// messages and no error), ctx is done (ctx's error) or the store closes
// (ErrClosed). It never polls: commits and due moments wake it.
//
// A Receive that claimed messages with an AttemptID can be retried: the
// retry returns the same messages and tokens and counts no new delivery.
func (s *Store) Receive(ctx context.Context, queue string, opts ReceiveOptions) ([]Message, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := validateReceive(queue, &opts); err != nil {
		return nil, err
	}
	var deadline time.Time
	if opts.Wait > 0 {
		deadline = time.Now().Add(opts.Wait)
	}
	for {
		woken := s.notify.Wait(queue)
		msgs, nextDue, err := s.receiveOnce(ctx, queue, opts)
		if err != nil || len(msgs) > 0 || opts.Wait <= 0 {
			return msgs, err
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return msgs, nil
		}
		if nextDue > 0 {
			wait = min(wait, time.Duration(nextDue-s.now())*time.Millisecond)
		}
		if err := s.sleep(ctx, woken, wait); err != nil {
			return nil, err
		}
	}
}

// sleep blocks until woken, d passes, ctx is done or the store closes.
func (s *Store) sleep(ctx context.Context, woken <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-woken:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return ErrClosed
	}
	return nil
}

func (s *Store) receiveOnce(ctx context.Context, queue string, opts ReceiveOptions) ([]Message, int64, error) {
	var claimed []engine.Claimed
	var nextDue int64
	err := s.Tx(ctx, func(tx *Tx) error {
		q, err := s.queues.get(tx.Context(), tx.SQL(), queue)
		if err != nil {
			return err
		}
		claimed, err = engine.Claim(tx.Context(), tx.SQL(), engine.ClaimRequest{
			Queue: q, Max: opts.Max, Delete: opts.Mode == ReceiveAndDelete,
			AttemptID: opts.AttemptID, Now: s.now(),
		})
		if err != nil || len(claimed) > 0 || opts.Wait <= 0 {
			return err
		}
		nextDue, err = engine.NextDue(tx.Context(), tx.SQL(), queue)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]Message, len(claimed))
	for i, c := range claimed {
		out[i] = toMessage(queue, c)
	}
	return out, nextDue, nil
}

// ReceiveDeferred locks the deferred message seq of queue, as Receive would
// (a new token, a lease, one more delivery). A message that is not deferred
// is ErrMessageNotFound. A message deferred on its last allowed delivery is
// dead-lettered (reason "max delivery count exceeded") and reported as
// ErrMessageNotFound: handing it out again would exceed MaxDeliveryCount.
// Asking by sequence number bypasses the order of the message's group: the
// message was already handed out in order once, before it was deferred.
func (s *Store) ReceiveDeferred(ctx context.Context, queue string, seq int64) (Message, error) {
	if err := s.checkOpen(); err != nil {
		return Message{}, err
	}
	if err := validateQueueName(queue); err != nil {
		return Message{}, err
	}
	var c engine.Claimed
	spent := false
	err := s.Tx(ctx, func(tx *Tx) error {
		q, err := s.queues.get(tx.Context(), tx.SQL(), queue)
		if err != nil {
			return err
		}
		c, err = engine.ClaimDeferred(tx.Context(), tx.SQL(), q, seq, s.now())
		if errors.Is(err, engine.ErrSpentDeferred) {
			spent = true // commit the dead-lettering, then report
			return nil
		}
		return err
	})
	if err != nil {
		return Message{}, err
	}
	if spent {
		return Message{}, fmt.Errorf("%w: %d on %q: %v", ErrMessageNotFound, seq, queue, engine.ErrSpentDeferred)
	}
	return toMessage(queue, c), nil
}

// PeekOptions configures Peek.
type PeekOptions struct {
	// FromSeq is the first sequence number to look at. Defaults to 0 (the
	// oldest message).
	FromSeq int64
	// Max is how many messages to return at most. Defaults to 100; at most
	// 1000.
	Max int
}

func (o *PeekOptions) validate() error {
	var err error
	if o.Max, err = batchMax(o.Max, 100); err != nil {
		return err
	}
	if o.FromSeq < 0 {
		return errs.Newf(errs.ErrInvalidArgument, "negative FromSeq")
	}
	return nil
}

// Peek returns messages of queue in sequence order, in every state but
// dead-lettered, without locking or counting a delivery.
func (s *Store) Peek(ctx context.Context, queue string, opts PeekOptions) ([]Message, error) {
	return s.peek(ctx, queue, opts, false)
}

// PeekDeadLetters returns the dead letters of queue in sequence order, with
// why (DeadLetterReason, DeadLetterDescription), when (DeadLetteredAt) and
// after how many deliveries (DeliveryCount) each was dead-lettered.
func (s *Store) PeekDeadLetters(ctx context.Context, queue string, opts PeekOptions) ([]Message, error) {
	return s.peek(ctx, queue, opts, true)
}

func (s *Store) peek(ctx context.Context, queue string, opts PeekOptions, dead bool) ([]Message, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := validateQueueName(queue); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var rows []engine.Claimed
	err := s.Tx(ctx, func(tx *Tx) error {
		if err := s.catchUp(tx, queue); err != nil {
			return err
		}
		var err error
		rows, err = engine.Peek(tx.Context(), tx.SQL(), queue, opts.FromSeq, opts.Max, dead)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Message, len(rows))
	for i, c := range rows {
		out[i] = toMessage(queue, c)
		out[i].State = c.State
		out[i].VisibleAt = fromMillis(c.VisibleAt)
		out[i].LockToken = "" // peek never hands out a token
	}
	return out, nil
}

// batchMax resolves a Max option: 0 means def, otherwise 1 to
// MaxReceiveBatch.
func batchMax(v, def int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > MaxReceiveBatch:
		return 0, errs.Newf(errs.ErrInvalidArgument, fmt.Sprintf("Max %d, want 1 to %d", v, MaxReceiveBatch))
	}
	return v, nil
}
