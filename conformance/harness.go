package conformance

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/outbox"
)

// Harness gives the kit implementations to test. Run calls Open once per
// subtest, from the subtest's goroutine.
type Harness struct {
	// Open returns a fresh, empty implementation with no queue, on the
	// clock cfg asks for, and arranges (with t.Cleanup) to close it when t
	// ends. It fails t when it cannot.
	Open func(t *testing.T, cfg Config) Instance
	// Features switches off what the implementation legitimately lacks.
	Features Features
}

// Config is what a subtest asks of Harness.Open.
type Config struct {
	// WallClock asks for an implementation on the wall clock
	// (mqlite.SystemClock): the subtests of wake-ups at a due moment need
	// timers, which a fake clock does not have. Instance.Clock is then nil.
	// The WakeBubble subtests call Open with WallClock inside a
	// testing/synctest bubble, where the wall clock is the bubble's.
	// Otherwise the implementation reads every timestamp from
	// Instance.Clock, a fake clock that only the kit moves.
	WallClock bool
}

// Features switches off what an implementation legitimately lacks. Each
// field is empty when the implementation has the feature; otherwise it says
// why it lacks it, and the subtests that need the feature are skipped with
// that reason (t.Skip). The zero value claims every feature.
type Features struct {
	// WithoutRollback: the implementation sends outside a transaction the
	// caller can roll back (a network client with no transaction), so the
	// subtests of rolled-back sends are skipped. Instance.Tx must still
	// send and commit when its fn returns nil.
	WithoutRollback string
	// WithoutRestart: the implementation cannot be stopped as a crashed
	// process would be and opened again; Instance.Restart may be nil.
	WithoutRestart string
	// WithoutReleaseAtOpen: a restart releases no lease, because other
	// processes may hold leases in the same database (PostgreSQL): the
	// leases of a process that died lapse at their end instead. The
	// subtest of leases released at once by the next Open is skipped, and
	// the others that restart wait for the lease to end.
	WithoutReleaseAtOpen string
	// WithoutWallClock: Open cannot give an implementation on the wall
	// clock, so the wake-ups at a due moment are skipped.
	WithoutWallClock string
	// WithoutBubble: Open cannot run inside a testing/synctest bubble
	// (it does network I/O, or starts goroutines that outlive the
	// implementation), so the WakeBubble subtests are skipped. In a
	// bubble they know the receiver is waiting before they commit, and
	// measure wake-ups on the bubble's fake time, exactly.
	WithoutBubble string
	// WithoutEffects: the implementation cannot settle a delivery inside
	// a transaction that also sends (Instance.EffectsTx is nil), so the
	// Effects area is skipped.
	WithoutEffects string
	// WithoutInbound: the implementation takes no signed webhooks
	// (Instance.Inbound is nil), so the Inbound area is skipped.
	WithoutInbound string
}

// Instance is one implementation under test, as Harness.Open returns it.
type Instance struct {
	// Store is the implementation. It has no queue yet.
	Store Store
	// Clock is the fake clock every timestamp of Store is read from; the
	// kit moves it. Nil when Config.WallClock asked for the wall clock.
	Clock Clock
	// Tx runs fn in one transaction of the implementation: the messages
	// fn sends commit when fn returns nil and are rolled back when it
	// returns an error, which Tx returns. For the embedded store it is
	// Store.Tx with outbox.SendBatch on tx.SQL(). The GroupCommit area
	// calls it from many goroutines at once, as it does EffectsTx.
	Tx func(ctx context.Context, fn func(send SendFunc) error) error
	// Restart ends the implementation as a crashed process would end (no
	// settlement, no lease released, no clean hand-over), opens the same
	// data again as the next process would, on the same clock, and returns
	// the new Store; the kit no longer uses the old one. Nil under
	// Features.WithoutRestart.
	Restart func(t *testing.T) Store
	// EffectsTx runs fn in one transaction of the implementation in which
	// fn sends and settles deliveries (EffectsOps): every send and every
	// settlement of fn commits when fn returns nil, none when it returns
	// an error, which EffectsTx returns. For the embedded store it is
	// Store.Tx with outbox.SendBatch, consumer.CompleteTx and
	// consumer.RejectTx on tx.SQL(). Nil under Features.WithoutEffects.
	EffectsTx func(ctx context.Context, fn func(ops EffectsOps) error) error
	// EffectsRetry commits again what the last EffectsTx that returned nil
	// committed, as a retry after a lost reply does (over the broker: the
	// same commit request, with its idempotency key): nil, with nothing
	// new committed. Nil where a commit has no reply to lose (the embedded
	// store); its subtest is then skipped.
	EffectsRetry func(ctx context.Context) error
	// Inbound returns the handler of the signed webhooks of senders into
	// Store's queues, which the kit calls with POST
	// /v1/inbound/{source}: package inbound's Handler on a mux, or the
	// broker's route. Its error is New's (a queue whose DedupWindow does
	// not cover a sender's retry horizon matches mqlite.ErrInvalidArgument).
	// Nil under Features.WithoutInbound.
	Inbound func(t *testing.T, senders []inbound.Sender) (http.Handler, error)
}

// EffectsOps is what fn of Instance.EffectsTx does inside the transaction.
// Over the broker they stage the items of one commit request: Send's
// results are then zero, and a settlement's error (mqlite.ErrLockLost)
// comes from EffectsTx itself, with nothing committed.
type EffectsOps struct {
	// Send sends as SendFunc does.
	Send SendFunc
	// Complete completes a delivery, fenced as Complete is: a lapsed lease
	// or a stale token is an error matching mqlite.ErrLockLost.
	Complete func(l mqlite.Lock) error
	// Reject dead-letters a delivery with a reason and a description,
	// fenced as Complete.
	Reject func(l mqlite.Lock, reason, description string) error
}

// SendFunc sends msgs to queue inside the transaction of Instance.Tx, with
// the meaning of outbox.SendBatch: one Result per message, a slot error for
// a conflicting MessageID, err for an error of the whole call.
type SendFunc func(queue string, msgs ...outbox.Message) ([]outbox.Result, error)

// Clock is a fake clock the kit moves. Implementations must be safe for
// concurrent use.
type Clock interface {
	mqlite.Clock
	// Advance moves the clock forward by d.
	Advance(d time.Duration)
}

// Queues creates and changes queues.
type Queues interface {
	// CreateQueue creates a queue; see mqlite.Store.CreateQueue.
	CreateQueue(ctx context.Context, name string, opts mqlite.QueueOptions) error
	// UpdateQueue replaces a queue's options; see mqlite.Store.UpdateQueue.
	UpdateQueue(ctx context.Context, name string, opts mqlite.QueueOptions) error
}

// Operator is the operator's view of the dead letters and counts.
type Operator interface {
	// PeekDeadLetters reads dead letters; see mqlite.Store.PeekDeadLetters.
	PeekDeadLetters(ctx context.Context, queue string, opts mqlite.PeekParams) ([]mqlite.Message, error)
	// Redrive brings dead letters back; see mqlite.Store.Redrive.
	Redrive(ctx context.Context, queue string, opts mqlite.RedriveOptions) (int, error)
	// DeliverNow makes scheduled messages due now; see
	// mqlite.Store.DeliverNow.
	DeliverNow(ctx context.Context, queue string, opts mqlite.DeliverNowOptions) (int, error)
	// Purge removes the messages of one state; see mqlite.Store.Purge.
	Purge(ctx context.Context, queue string, opts mqlite.PurgeOptions) (int, error)
	// Stats counts a queue's messages per state; see mqlite.Store.Stats.
	Stats(ctx context.Context, queue string) (mqlite.QueueStats, error)
}

// Topics creates topics and their subscriptions. A Store that is also a
// Topics has the Topics area run; a send to a topic goes through
// Instance.Tx with the topic's name in place of a queue's.
type Topics interface {
	// CreateTopic creates a topic; see mqlite.Store.CreateTopic.
	CreateTopic(ctx context.Context, name string) error
	// GetTopic reads a topic; see mqlite.Store.GetTopic.
	GetTopic(ctx context.Context, name string) (mqlite.TopicInfo, error)
	// ListTopics reads every topic; see mqlite.Store.ListTopics.
	ListTopics(ctx context.Context) ([]mqlite.TopicInfo, error)
	// DeleteTopic removes a topic; see mqlite.Store.DeleteTopic.
	DeleteTopic(ctx context.Context, name string) error
	// CreateSubscription subscribes a new queue to a topic; see
	// mqlite.Store.CreateSubscription.
	CreateSubscription(ctx context.Context, topic, queue string, opts mqlite.SubscriptionOptions) error
	// UpdateSubscription replaces a subscription's filter; see
	// mqlite.Store.UpdateSubscription.
	UpdateSubscription(ctx context.Context, topic, queue string, f mqlite.Filter) error
	// DeleteSubscription removes a subscription and its queue; see
	// mqlite.Store.DeleteSubscription.
	DeleteSubscription(ctx context.Context, topic, queue string) error
}

// Store is what the kit tests: the consumer side (consumer.Store), queue
// creation and the operator calls. A Store that is also a Topics has the
// Topics area tested too.
type Store interface {
	consumer.Store
	Queues
	Operator
}

// The embedded store is the reference implementation.
var (
	_ Store  = (*mqlite.Store)(nil)
	_ Topics = (*mqlite.Store)(nil)
)
