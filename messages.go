package mqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/handoff"
	"github.com/mqlite/mqlite/internal/notify"
	"github.com/mqlite/mqlite/internal/receivers"
	"github.com/mqlite/mqlite/internal/tally"
	"github.com/mqlite/mqlite/internal/tracing"
)

// Limits on the fields of a message. A field over its limit, or text that
// is not valid UTF-8, is ErrInvalidMessage; the whole message (body and
// fields together) is also bounded by Config.MaxMessageBytes
// (ErrMessageTooLarge).
const (
	MaxMessageIDLen = 256  // bytes of MessageID
	MaxGroupIDLen   = 256  // bytes of GroupID
	MaxSubjectLen   = 1024 // bytes of Subject
	// MaxPropertiesBytes bounds the Properties of a message: the sum of
	// the lengths of its keys and values.
	MaxPropertiesBytes = 64 << 10
	// MaxPriority is the highest priority of a message (outbox.Message's
	// Priority); the lowest, and the default, is 0. A priority out of
	// range is ErrInvalidMessage.
	MaxPriority = 9
)

// MaxDelay bounds how far ahead of the store's now a message may be made
// due: a send's DeliverAt (ErrInvalidMessage past it) and Abandon's delay
// (ErrInvalidArgument past it) are at most 365 days away, and the broker
// answers 400 past the same bound. A message parked until then is made due
// at once by Store.DeliverNow.
const MaxDelay = 365 * 24 * time.Hour

// Lock identifies one delivery of one message: what every settlement and
// renewal presents.
type Lock struct {
	Queue string
	Seq   int64
	// Token is the delivery's fencing token: 128 random bits, hex.
	Token string
}

// Message is a message as received or peeked.
type Message struct {
	// Queue is the queue the message is in.
	Queue string
	// Seq is the message's sequence number: strictly increasing within the
	// file, never reused.
	Seq int64
	// Body is the payload; never nil.
	Body []byte
	// MessageID, GroupID, Subject and Properties are as sent.
	MessageID  string
	GroupID    string
	Subject    string
	Properties map[string]string
	// DeliveryCount is how many times the message has been handed out,
	// this delivery included.
	DeliveryCount int
	// EnqueuedAt is when the message was sent, by the store's Clock.
	EnqueuedAt time.Time
	// ExpiresAt is the end of the message's time to live; zero for none.
	ExpiresAt time.Time
	// LockToken and LockedUntil are the delivery's fencing token and lease;
	// empty and zero for ReceiveAndDelete and Peek.
	LockToken   string
	LockedUntil time.Time
	// State is the message's state; set by Peek and PeekDeadLetters.
	State State
	// VisibleAt is when a scheduled message falls due (Peek only).
	VisibleAt time.Time
	// DeadLetterReason, DeadLetterDescription and DeadLetteredAt say why
	// and when the message was dead-lettered (PeekDeadLetters only).
	DeadLetterReason      string
	DeadLetterDescription string
	DeadLetteredAt        time.Time
	// LastError is the last reason a delivery of the message came back:
	// the reason of AbandonWithReason (consumer.Loop's handler error, the
	// relay's sink error); empty when none was given. Kept with the
	// message (Receive, Peek, PeekDeadLetters), gone with it.
	LastError string
	// Attempts is the history of the message's failed deliveries, oldest
	// first: the last Config.AttemptHistory of them, each with its error,
	// time and worker. Nil for a message that never failed. Kept with the
	// message (Receive, Peek, Find, PeekDeadLetters: into the dead letters
	// and back out of them by Redrive), gone with it.
	Attempts []Attempt
	// Priority is the message's priority, 0 (the default) to MaxPriority:
	// a claim takes the highest priority first, then the lowest Seq; a
	// FIFO group's later member waits for its front whatever its priority.
	Priority int
}

// Attempt is one failed delivery of a message (Message.Attempts).
type Attempt struct {
	// At is when the delivery came back, by the store's Clock.
	At time.Time
	// Error is why: the reason of AbandonWithReason ("" for a plain
	// Abandon), a Reject's reason and description ("reason: description"),
	// or the store's own words for a lease that lapsed
	// ("the lease expired") or that an ended process left.
	Error string
	// Worker is who held the delivery: the ReceiverTag of the settling
	// call's ctx as WorkerOf names it; "" for a lapsed lease, whose holder
	// the store does not record.
	Worker string
}

// Lock returns the message's lock, for settlement.
func (m Message) Lock() Lock { return Lock{Queue: m.Queue, Seq: m.Seq, Token: m.LockToken} }

func toMessage(queue string, c driver.Row) Message {
	m := Message{
		Queue: queue, Seq: c.Seq, Body: c.Body, MessageID: c.MessageID, Subject: c.Subject,
		DeliveryCount: int(c.DeliveryCount), EnqueuedAt: fromMillis(c.EnqueuedAt),
		ExpiresAt: fromMillis(c.ExpiresAt), LockToken: c.LockToken, LockedUntil: fromMillis(c.LockedUntil),
		DeadLetterReason: c.DeadLetterReason, DeadLetterDescription: c.DeadLetterDescription,
		DeadLetteredAt: fromMillis(c.DeadLetteredAt), LastError: c.LastError, Priority: int(c.Priority),
	}
	if c.GroupID != nil {
		m.GroupID = *c.GroupID
	}
	for _, a := range c.Attempts {
		m.Attempts = append(m.Attempts, Attempt{At: fromMillis(a.At), Error: a.Error, Worker: a.Worker})
	}
	if m.Body == nil {
		m.Body = []byte{}
	}
	if c.Properties != "" {
		_ = json.Unmarshal([]byte(c.Properties), &m.Properties) // written by the outbox as a JSON object
	}
	return m
}

// State is where a message stands, as Message.State reports it and
// PurgeOptions.State takes it. docs/concepts.md draws the transitions.
type State string

// The states of a message. A completed message has none of them: no read
// returns it, and its row stays, without its body, as the completion's
// receipt until the janitor deletes it (keeping a receipt of its own for
// the rest of the replay window).
const (
	// StateActive: claimable now (or as soon as its group lets it).
	StateActive State = "active"
	// StateScheduled: claimable from its VisibleAt (DeliverAt, or Abandon
	// with a delay).
	StateScheduled State = "scheduled"
	// StateLocked: handed out; its lease runs until LockedUntil.
	StateLocked State = "locked"
	// StateDeferred: set aside by Defer; only ReceiveDeferred claims it.
	StateDeferred State = "deferred"
	// StateDeadLettered: out of the flow until Redrive or Purge.
	StateDeadLettered State = "dead_lettered"
)

// Dead-letter reasons written by mqlite itself (Reject writes the caller's).
const (
	// ReasonMaxDelivery: the last allowed delivery ended without a
	// settlement (its lease expired, the process died) or was abandoned.
	ReasonMaxDelivery = "max delivery count exceeded"
	// ReasonTTL: the message's time to live passed on a queue with
	// DeadLetterOnExpire.
	ReasonTTL = "ttl expired"
)

// Validate checks that l has the shape of a delivery's lock (a valid queue
// name, a positive seq, a token), with an error matching
// ErrInvalidArgument: what every settlement refuses before it writes
// anything. A lock that passes may still be stale (ErrLockLost).
func (l Lock) Validate() error { return validateLock(l) }

func validateLock(l Lock) error {
	if err := validateQueueName(l.Queue); err != nil {
		return err
	}
	if l.Seq <= 0 {
		return invalidf(ErrInvalidArgument, "seq %d", l.Seq)
	}
	if l.Token == "" {
		return invalidf(ErrInvalidArgument, "empty lock token")
	}
	return nil
}

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
	// AttemptID tags the call: a retry on the same queue with the same
	// AttemptID and the same Max and Mode (within about 30 minutes)
	// returns the same messages with the same tokens and claims nothing
	// new; a peek-lock message settled or past its lease since is left out.
	// The same AttemptID with another Max or Mode is ErrAttemptConflict.
	// Empty means no replay.
	AttemptID string
	// Mode is PeekLock (the default) or ReceiveAndDelete.
	Mode ReceiveMode
	// MaxBytes, when positive, bounds what one Receive hands out: it claims
	// messages in sequence order while their sizes (body and metadata, as
	// Config.MaxMessageBytes counts them) add up to at most MaxBytes, and
	// the first message whatever its size, so a Receive is never empty for
	// want of budget. Fewer than Max may then come back while more are
	// ready. Zero means no bound. A replay (AttemptID) returns what the
	// attempt handed out.
	MaxBytes int64
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
		return invalidf(ErrInvalidArgument, "negative Wait")
	}
	if o.Mode != PeekLock && o.Mode != ReceiveAndDelete {
		return invalidf(ErrInvalidArgument, "unknown ReceiveMode %d", o.Mode)
	}
	if len(o.AttemptID) > MaxMessageIDLen {
		return invalidf(ErrInvalidArgument, "AttemptID too long")
	}
	if o.MaxBytes < 0 {
		return invalidf(ErrInvalidArgument, "negative MaxBytes")
	}
	return nil
}

// Receive claims up to opts.Max messages of queue in one transaction. In
// PeekLock mode each comes locked for the queue's LockDuration with a fresh
// token; settle it with Complete, Abandon, Reject or Defer. With opts.Wait
// it blocks until a message is ready, Wait passes (then it returns no
// messages and no error), ctx is done (ctx's error) or the store closes
// (ErrClosed). It never polls: commits and due moments wake it. A message
// that a transaction of Store.Tx (outbox.Send, the broker's sends) makes
// claimable while Receive sleeps in PeekLock mode is claimed for it inside
// that transaction, with the same claim, and handed over once it commits
// (a rollback hands nothing over).
//
// A Receive that claimed messages with an AttemptID can be retried: the
// same request returns the same messages and tokens (less those no longer
// held) and counts no new delivery; see ReceiveOptions.AttemptID.
func (s *Store) Receive(ctx context.Context, queue string, opts ReceiveOptions) ([]Message, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if err := validateReceive(queue, &opts); err != nil {
		return nil, err
	}
	who := receivers.ID[ReceiverTag]{Queue: queue, Tag: receiverOf(ctx)}
	s.receivers.Enter(who)
	msgs, err := s.receive(ctx, queue, opts)
	s.receivers.Leave(who, msgs)
	return msgs, err
}

// receive is Receive past its checks.
func (s *Store) receive(ctx context.Context, queue string, opts ReceiveOptions) ([]Message, error) {
	var deadline time.Time
	if opts.Wait > 0 {
		deadline = time.Now().Add(opts.Wait)
	}
	tr := tracing.Tracer(s.opts.TracerProvider)
	for {
		w := s.notify.Wait(queue)
		var start time.Time
		if tr != nil {
			start = time.Now()
		}
		msgs, nextDue, err := s.receiveOnce(ctx, queue, opts)
		if tr != nil {
			s.traceClaim(ctx, tr, queue, start, msgs, err)
		}
		if err != nil || len(msgs) > 0 || opts.Wait <= 0 {
			w.Leave()
			return msgs, err
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			w.Leave()
			return msgs, nil
		}
		now := s.now()
		if nextDue > 0 {
			wait = min(wait, time.Duration(nextDue-now)*time.Millisecond)
		}
		w.Plan(now + wait.Milliseconds())
		var h *handoff.Waiter[Message, ReceiveOptions]
		var got <-chan struct{}
		if opts.Mode != ReceiveAndDelete {
			h = s.handoffs.Wait(queue, opts)
			got = h.Got()
		}
		interrupted, err := s.sleep(ctx, w.C(), got, wait)
		if h != nil {
			// What a commit claimed for this Receive is its answer,
			// whatever ended the sleep: it is locked for it.
			if msgs := s.handoffs.Leave(h); len(msgs) > 0 {
				return msgs, nil
			}
		}
		if err != nil || interrupted {
			return nil, err
		}
	}
}

// sleep blocks until woken or handed (a commit claimed for this Receive),
// d passes, ctx is done, the store closes, or ctx's interrupt
// (notify.WithInterrupt: the broker's stream, whose client wrote a line)
// yields; interrupted reports the last.
func (s *Store) sleep(ctx context.Context, woken, handed <-chan struct{}, d time.Duration) (interrupted bool, err error) {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-woken:
	case <-handed:
	case <-t.C:
	case <-notify.Interrupt(ctx):
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.closed:
		return false, ErrClosed
	}
	return false, nil
}

func (s *Store) receiveOnce(ctx context.Context, queue string, opts ReceiveOptions) ([]Message, int64, error) {
	var claimed []driver.Row
	var nextDue int64
	start := time.Now()
	defer s.tally.Observe(queue, tally.Claim, start)
	work := func(ctx context.Context, db driver.DBTX) error {
		var paused bool
		var err error
		claimed, paused, err = s.claimIn(ctx, db, queue, opts)
		if err != nil || paused || len(claimed) > 0 || opts.Wait <= 0 {
			return err // paused: nothing to claim, nothing due; ResumeQueue wakes the wait
		}
		nextDue, err = s.eng.NextDue(ctx, db, queue)
		return err
	}
	var err error
	if opts.AttemptID == "" {
		err = s.alone(ctx, work)
	} else { // an attempt's lock and its record need a transaction
		err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return work(ctx, tx) })
	}
	if err != nil {
		return nil, 0, err
	}
	out := make([]Message, len(claimed))
	for i, c := range claimed {
		out[i] = toMessage(queue, c)
	}
	return out, nextDue, nil
}

// claimIn claims up to opts.Max messages of queue in tx: nothing while the
// queue is paused (paused reports it).
func (s *Store) claimIn(ctx context.Context, tx driver.DBTX, queue string, opts ReceiveOptions) (claimed []driver.Row, paused bool, err error) {
	if s.eng.Shared() && opts.AttemptID == "" {
		return s.claimShared(ctx, tx, queue, opts)
	}
	q, err := s.queues.get(ctx, tx, queue)
	if err != nil {
		return nil, false, err
	}
	if q.PausedAt != 0 {
		return nil, true, nil
	}
	s.tally.Tag(tally.Receive)
	claimed, err = s.eng.Claim(ctx, tx, driver.ClaimRequest{
		Queue: q, Max: opts.Max, Delete: opts.Mode == ReceiveAndDelete,
		AttemptID: opts.AttemptID, MaxBytes: opts.MaxBytes, Now: s.now(), Bounds: s.bounds,
	})
	s.redelivered(queue, claimed)
	return claimed, false, err
}

// claimShared is claimIn without an AttemptID on a shared engine
// (PostgreSQL), in a transaction or outside any (autocommit): the claim
// statement reads the queue's settings and pause itself, so a Receive that
// finds messages is that one statement, and a setting another process
// changed counts from its commit on. Only when it claims nothing does a
// read of the queue tell an empty queue from a paused one (paused) or none
// (ErrQueueNotFound).
func (s *Store) claimShared(ctx context.Context, db driver.DBTX, queue string, opts ReceiveOptions) (claimed []driver.Row, paused bool, err error) {
	s.tally.Tag(tally.Receive)
	claimed, err = s.eng.Claim(ctx, db, driver.ClaimRequest{
		Queue: driver.Queue{Name: queue}, Max: opts.Max, Delete: opts.Mode == ReceiveAndDelete,
		MaxBytes: opts.MaxBytes, Now: s.now(),
	})
	if err != nil || len(claimed) > 0 {
		return claimed, false, err
	}
	q, err := s.eng.GetQueue(ctx, db, queue)
	return nil, err == nil && q.PausedAt != 0, err
}

// alone runs fn, the statements of one call of the store each of which is
// whole on its own (a claim, a settlement), outside any transaction on a
// shared engine (autocommit), and in a transaction of Store.Tx on SQLite,
// whose group commit is what makes a write cheap there.
func (s *Store) alone(ctx context.Context, fn func(ctx context.Context, db driver.DBTX) error) error {
	if s.eng.Shared() {
		return s.autocommit(ctx, fn)
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) })
}

// autocommit runs fn, the work of one call of the store on a shared engine
// (PostgreSQL), on a connection of the store's pool outside any
// transaction: each statement commits on its own (autocommit), which
// spares the BEGIN and COMMIT round trips of inTx where every statement
// fn runs is whole on its own (a claim, a settlement). The wait for a
// connection honours ctx; once fn runs its statements get ctx without its
// cancellation, as inside Store.Tx, so that none is cut off after the
// server committed it. The engine applies what each statement reported
// once it succeeded, under a key of the statement's own: in autocommit
// what succeeded is committed.
func (s *Store) autocommit(ctx context.Context, fn func(ctx context.Context, db driver.DBTX) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		if s.isClosed() {
			return ErrClosed
		}
		return fmt.Errorf("connection: %w", err)
	}
	defer conn.Close()
	return fn(context.WithoutCancel(ctx), conn)
}

// claimHandoff claims in tx, the open transaction of a group commit about
// to commit, for a Receive of queue that sleeps (handoff.ClaimFor): the
// claim that Receive would make.
func (s *Store) claimHandoff(ctx context.Context, tx *sql.Tx, queue string, opts ReceiveOptions) ([]Message, error) {
	rows, _, err := s.claimIn(ctx, tx, queue, opts)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	msgs := make([]Message, len(rows))
	for i, r := range rows {
		msgs[i] = toMessage(queue, r)
	}
	return msgs, nil
}

// redelivered counts the redeliveries among the rows a claim of queue
// took in the transaction in progress. On a shared engine (PostgreSQL)
// the claim's statement reported them with its rows, under its own
// transaction, so there is nothing left to count.
func (s *Store) redelivered(queue string, rows []driver.Row) {
	if !s.eng.Shared() {
		s.tally.Redelivered(queue, redeliveries(rows))
	}
}

// redeliveries counts the claimed rows that were delivered before.
func redeliveries(rows []driver.Row) int64 {
	var n int64
	for _, r := range rows {
		if r.DeliveryCount > 1 {
			n++
		}
	}
	return n
}

// batchMax resolves a Max option: 0 means def, otherwise 1 to
// MaxReceiveBatch.
func batchMax(v, def int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > MaxReceiveBatch:
		return 0, invalidf(ErrInvalidArgument, "Max %d, want 1 to %d", v, MaxReceiveBatch)
	}
	return v, nil
}

// TxAndReceive runs fn as Tx does and, in the same transaction once fn
// returned nil, claims up to opts.Max messages of queue as Receive does
// (lease, token, delivery count, group order, pause; no wait: opts.Wait is
// ignored): one commit for fn's work and the claim, where a Tx and then a
// Receive take two. It is what consumer.LoopTx commits a step with, so that
// the commit that completes a message also claims the next. The claim runs
// after fn's work. On SQLite it runs in a savepoint of its own: a claim
// that fails is rolled back alone and fn's work commits without it (the
// error is not returned: the caller claims with Receive instead), a queue
// that does not exist is ErrQueueNotFound before fn runs, and a savepoint
// that cannot be taken, rolled back or released fails the whole
// transaction. On PostgreSQL, where each statement is a round trip, the
// claim is one statement of fn's transaction with no savepoint: a claim
// that fails (only as the connection or the server fails, which would
// fail the commit too) fails the whole transaction, and a queue that does
// not exist is ErrQueueNotFound with fn's work rolled back. Either way a
// fn that fails claims nothing. The result is fn's or the commit's error
// with nothing committed and nothing claimed, or nil with the messages
// claimed.
func (s *Store) TxAndReceive(ctx context.Context, queue string, opts ReceiveOptions, fn func(tx *Tx) error) ([]Message, error) {
	if err := validateReceive(queue, &opts); err != nil {
		return nil, err
	}
	var claimed []driver.Row
	start := time.Now()
	err := s.Tx(ctx, func(tx *Tx) (err error) {
		claimed = nil
		if s.eng.Shared() {
			claimed, err = s.txAndClaimShared(tx, queue, opts, fn)
			return err
		}
		if _, err := s.queues.get(tx.ctx, tx.tx, queue); err != nil {
			return err // ErrQueueNotFound before fn writes anything
		}
		if err := fn(tx); err != nil {
			return err
		}
		claimed, err = s.claimApart(tx, queue, opts)
		return err
	})
	if err != nil || len(claimed) == 0 {
		return nil, err
	}
	s.tally.Observe(queue, tally.Claim, start)
	return s.messagesOfClaim(ctx, queue, start, claimed), nil
}

// messagesOfClaim turns rows a settling call claimed (CompleteAndReceive,
// TxAndReceive) into its messages, counting them to the caller's receiver
// and tracing the claim, as a Receive of their own would.
func (s *Store) messagesOfClaim(ctx context.Context, queue string, start time.Time, claimed []driver.Row) []Message {
	out := make([]Message, len(claimed))
	for i, c := range claimed {
		out[i] = toMessage(queue, c)
	}
	who := receivers.ID[ReceiverTag]{Queue: queue, Tag: receiverOf(ctx)}
	s.receivers.Enter(who)
	s.receivers.Leave(who, out)
	if tr := tracing.Tracer(s.opts.TracerProvider); tr != nil {
		s.traceClaim(ctx, tr, queue, start, out, nil)
	}
	return out
}

// txAndClaimShared is TxAndReceive's transaction on a shared engine
// (PostgreSQL): fn, then the claim in the same transaction with no
// savepoint around it, so a step and the claim of the next message are
// the round trips of fn and one statement. The claim statement reads the
// queue itself; only when it claims nothing is the queue read, and a queue
// that does not exist then fails the whole transaction (ErrQueueNotFound,
// fn's work rolled back). Under READ COMMITTED the claim's statement can
// fail only as its connection or the server does, which would fail the
// commit too; its error fails the transaction with nothing committed.
func (s *Store) txAndClaimShared(tx *Tx, queue string, opts ReceiveOptions, fn func(tx *Tx) error) ([]driver.Row, error) {
	if err := fn(tx); err != nil {
		return nil, err
	}
	claimed, _, err := s.claimIn(tx.ctx, tx.tx, queue, opts)
	return claimed, err
}

// claimApart claims for TxAndReceive in a savepoint of tx: what it claimed,
// or nothing when the claim failed (rolled back alone, its counts dropped).
// Its error is the savepoint's: a transaction it leaves in doubt fails
// whole.
func (s *Store) claimApart(tx *Tx, queue string, opts ReceiveOptions) ([]driver.Row, error) {
	if _, err := tx.tx.ExecContext(tx.ctx, "SAVEPOINT mqlite_claim"); err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	mark := s.tally.Mark()
	claimed, _, err := s.claimIn(tx.ctx, tx.tx, queue, opts)
	if err != nil {
		s.tally.Undo(mark)
		claimed = nil
		if _, err := tx.tx.ExecContext(tx.ctx, "ROLLBACK TO mqlite_claim"); err != nil {
			return nil, fmt.Errorf("roll back to savepoint: %w", err)
		}
	}
	if _, err := tx.tx.ExecContext(tx.ctx, "RELEASE mqlite_claim"); err != nil {
		return nil, fmt.Errorf("release savepoint: %w", err)
	}
	return claimed, nil
}

// traceClaim records, when tracing is on, the claim of msgs from queue that
// began at start: a receive span, child of ctx's span, with a link to the
// context each message was sent in. A claim that found nothing, or was
// cancelled, leaves no span: an idle or stopping consumer does not fill the
// traces with empty receives.
func (s *Store) traceClaim(ctx context.Context, tr trace.Tracer, queue string, start time.Time, msgs []Message, err error) {
	if len(msgs) == 0 && (err == nil || ctx.Err() != nil) {
		return
	}
	links := make([]trace.Link, 0, len(msgs))
	for _, m := range msgs {
		if sc := tracing.Extract(m.Properties); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: tracing.MessageAttrs(m.Seq, m.MessageID, m.DeliveryCount)})
		}
	}
	_, span := tracing.Start(ctx, tr, trace.SpanKindClient, tracing.OpReceive, "receive", queue,
		trace.WithTimestamp(start), trace.WithLinks(links...), trace.WithAttributes(tracing.BatchAttrs(len(msgs))...))
	tracing.End(span, err)
}
