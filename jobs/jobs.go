// Package jobs is a typed job layer on mqlite's queues, for those who know
// River: a job kind is a Go type whose arguments are encoded as JSON and
// whose Kind method names it; Insert and InsertMany write jobs inside the
// caller's transaction (the shapes outbox.SendOne takes), so a job commits
// with the rows that asked for it or not at all; a Worker per kind,
// registered with AddWorker, gets the decoded arguments, the attempt and
// the job's metadata, and Workers.Run runs them with consumer.LoopTx, so
// that a worker's own rows (Job.CommitWith) commit with the job's
// completion, exactly once.
//
// A job is a message: its body is the arguments' JSON, its property
// PropKind the kind. Everything a queue does, a job queue does too
// (leases, fencing, FIFO groups, schedules, dead letters, the broker's
// dashboard and CLI).
//
// A job that cannot run (no kind, a kind with no worker, arguments that do
// not decode) is dead-lettered on its first delivery with the reason
// (ErrUnknownKind, ErrInvalidArgs), never retried. A job that fails is
// retried with backoff until its MaxAttempts; then it is dead-lettered.
// A worker may snooze its job (Snooze) or cancel it (JobCancel); Cancel
// cancels a job by its id from outside.
//
// Uniqueness (UniqueOpts) stands on the queue's MessageID de-duplication: a
// unique job's MessageID is derived from its kind and arguments, and a
// conflicting insert returns the job already there.
//
// Over the broker, InsertVia and InsertManyVia insert with the client
// (an Inserter): the broker inserts the jobs in one transaction of its own,
// unique ones exactly as Insert does. Message gives what to send with the
// client's Send for a job that is not unique, Workers.Run works a queue on
// the client (a step there sends; it has no SQL), and Cancel takes the
// client.
//
// Priorities are not available: the queues deliver in sequence order.
package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/outbox"
)

// DefaultQueue is the queue a job goes to when neither its InsertOpts nor
// its kind's name one.
const DefaultQueue = "jobs"

// The properties a job's message carries. They are what makes a message a
// job: a message sent with outbox.SendOne and PropKind set is a job too.
const (
	// PropKind is the job's kind (JobArgs.Kind).
	PropKind = "mqlite-job-kind"
	// PropMaxAttempts is the job's InsertOpts.MaxAttempts, in decimal;
	// absent for none.
	PropMaxAttempts = "mqlite-job-max-attempts"
	// PropID is the job's id on the message that carries a snoozed job
	// on (the seq of the job's first message); absent on the first.
	PropID = "mqlite-job-id"
	// PropAttempts is how many attempts the job spent before its current
	// message (a snoozed job's), in decimal; absent for none.
	PropAttempts = "mqlite-job-attempts"
)

// MaxKindLen bounds the length of a kind, in bytes of UTF-8.
const MaxKindLen = 128

// Errors of the job layer. Each matches with errors.Is.
var (
	// ErrUnknownKind is a job whose kind has no worker (or that has no
	// kind): it is dead-lettered on its first delivery with this reason.
	ErrUnknownKind = errors.New("jobs: unknown kind")
	// ErrInvalidArgs is a job whose arguments do not decode into its
	// kind's type: it is dead-lettered on its first delivery.
	ErrInvalidArgs = errors.New("jobs: invalid arguments")
	// ErrInvalidKind is an insert of arguments whose Kind is empty, too
	// long or not UTF-8. It matches mqlite.ErrInvalidArgument.
	ErrInvalidKind = fmt.Errorf("%w: jobs: invalid kind", mqlite.ErrInvalidArgument)
	// ErrUniqueWindow is a unique insert into a queue whose dedup window
	// cannot hold the uniqueness: de-duplication off, or a
	// UniqueOpts.ByPeriod longer than QueueOptions.DedupWindow. It
	// matches mqlite.ErrInvalidArgument.
	ErrUniqueWindow = fmt.Errorf("%w: jobs: the queue's dedup window cannot hold the uniqueness", mqlite.ErrInvalidArgument)
	// ErrJobNotFound is Cancel of a job that is not waiting or running:
	// finished, dead-lettered, or never inserted.
	ErrJobNotFound = errors.New("jobs: job not found")
	// ErrCancelled is the cause of a running job's ctx when Cancel
	// cancelled the job.
	ErrCancelled = errors.New("jobs: job cancelled")
)

// JobArgs is a job kind's arguments: a Go type encoded as JSON (with
// encoding/json) whose Kind names the kind. Kind must work on the zero
// value: AddWorker calls it on one.
type JobArgs interface {
	Kind() string
}

// JobArgsWithInsertOpts is JobArgs whose kind sets its own insert
// defaults; the InsertOpts given to Insert override them field by field.
type JobArgsWithInsertOpts interface {
	JobArgs
	InsertOpts() InsertOpts
}

// InsertOpts are the options of one insert. The zero value inserts into
// DefaultQueue, runs now and retries up to the worker's or the queue's
// bound.
type InsertOpts struct {
	// Queue is the queue the job goes to; DefaultQueue when empty. The
	// queue must exist (mqlite.ErrQueueNotFound).
	Queue string
	// MaxAttempts bounds the job's attempts: a failure of the last one
	// dead-letters it. 0 leaves it to WorkerOpts.MaxAttempts, else to the
	// queue's MaxDeliveryCount (which bounds every job of the queue
	// anyway: keep it at least as high as any MaxAttempts).
	MaxAttempts int
	// ScheduledAt is when the job may run first; zero is now.
	ScheduledAt time.Time
	// GroupID orders the job within its group (outbox.Message.GroupID):
	// no job of a group runs while an earlier one is running or waiting
	// for a retry.
	GroupID string
	// Priority is the job's priority (outbox.Message.Priority), 0 (the
	// default) to mqlite.MaxPriority: a worker takes the job of highest
	// priority first among those that may run, and a snoozed job keeps it.
	// 0 here leaves the kind's default (JobArgsWithInsertOpts).
	Priority int
	// Unique makes the job unique; see UniqueOpts. The zero value is not
	// unique.
	Unique UniqueOpts
}

// UniqueOpts make a job unique by its kind and its arguments. A unique
// job's MessageID is derived from its kind, a SHA-256 of the arguments it
// is unique by and, with ByPeriod, the period; an insert that finds that
// MessageID taken inserts nothing and returns the job there
// (InsertResult.Duplicate). A job is unique by its kind alone when none of
// ByArgs and ArgKeys is set and ByPeriod is.
//
// Without ByPeriod a job is unique while it is not finished: a second
// insert returns the first while it waits or runs (snoozed included); once
// it is completed, dead-lettered or cancelled, an insert adds a new job.
// This stands on the queue's DedupWindow: a job that waits longer than the
// window after its insert no longer blocks another (raise DedupWindow, up
// to mqlite.MaxDedupWindow, for long schedules). With ByPeriod a job is
// unique within its period of the store's clock (the periods are fixed
// buckets of ByPeriod since the Unix epoch), finished or not; ByPeriod may
// be at most the queue's DedupWindow (ErrUniqueWindow).
type UniqueOpts struct {
	// ByArgs makes the job unique by all its arguments.
	ByArgs bool
	// ArgKeys makes the job unique by the named top-level JSON keys of its
	// arguments only (a key absent from the arguments counts as null).
	// Set, it takes the place of ByArgs.
	ArgKeys []string
	// ByPeriod makes the job unique within a period instead of while it is
	// not finished: 0 for none, else at least a millisecond.
	ByPeriod time.Duration
}

func (u UniqueOpts) enabled() bool { return u.ByArgs || len(u.ArgKeys) > 0 || u.ByPeriod > 0 }

// InsertResult is the outcome of one insert.
type InsertResult struct {
	// ID is the job's id: the seq of its first message, what Cancel
	// takes. For a duplicate, the id of the job already there.
	ID int64
	// Seq is the seq of the job's current message (ID but for a job
	// that was snoozed).
	Seq int64
	// Queue and Kind are the job's.
	Queue string
	Kind  string
	// Duplicate reports a unique job that was there already (or, on a
	// queue with QueueOptions.DedupByBody, a job with the same arguments
	// inside the dedup window): nothing was inserted and ID is the
	// existing job's.
	Duplicate bool
}

// InsertManyParams is one job of InsertMany.
type InsertManyParams struct {
	// Args are the job's arguments.
	Args JobArgs
	// InsertOpts are the job's options; nil for its kind's defaults.
	InsertOpts *InsertOpts
}

// Insert inserts a job with args inside tx, the caller's transaction on
// the store's connection (a *sql.Tx on Store.DB(), tx.SQL() of
// mqlite.Store.Tx, a *sqlx.Tx: the shapes outbox.SendOne takes): the job
// commits with tx or not at all. opts may be nil. Errors are outbox's
// (mqlite.ErrQueueNotFound, mqlite.ErrNotAStore, mqlite.ErrMessageTooLarge),
// ErrInvalidKind, ErrUniqueWindow, or the encoding's; on error nothing is
// written and tx stays usable.
func Insert(ctx context.Context, tx outbox.Execer, args JobArgs, opts *InsertOpts) (InsertResult, error) {
	res, err := InsertMany(ctx, tx, []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return InsertResult{}, err
	}
	return res[0], nil
}

// InsertMany inserts jobs inside tx, in order, as Insert does; the
// consecutive jobs of one queue that are not unique go in one
// outbox.SendBatch. The result has one entry per job. A job that cannot be
// encoded fails the whole call before anything is written; after a driver
// failure the caller must roll tx back.
func InsertMany(ctx context.Context, tx outbox.Execer, params []InsertManyParams) ([]InsertResult, error) {
	if tx == nil || reflect.ValueOf(tx).Kind() == reflect.Pointer && reflect.ValueOf(tx).IsNil() {
		return nil, mqlite.ErrNilTx
	}
	ps := make([]prepared, len(params))
	for i, p := range params {
		var err error
		if ps[i], err = prepare(p.Args, p.InsertOpts); err != nil {
			if len(params) > 1 {
				err = fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
	}
	out := make([]InsertResult, len(params))
	for i := 0; i < len(ps); {
		p := ps[i]
		if p.unique.enabled() {
			r, err := insertUnique(ctx, tx, p)
			if err != nil {
				return nil, err
			}
			out[i] = r
			i++
			continue
		}
		j := i + 1 // a run of plain jobs of one queue
		for j < len(ps) && !ps[j].unique.enabled() && ps[j].queue == p.queue {
			j++
		}
		msgs := make([]outbox.Message, 0, j-i)
		for _, q := range ps[i:j] {
			msgs = append(msgs, q.msg)
		}
		res, err := outbox.SendBatch(ctx, tx, p.queue, msgs)
		if err != nil {
			return nil, err
		}
		for k, r := range res {
			if r.Err != nil { // a plain job has no MessageID: never a conflict
				return nil, r.Err
			}
			// Duplicate only on a queue that de-duplicates by body.
			out[i+k] = InsertResult{ID: r.Seq, Seq: r.Seq, Queue: p.queue, Kind: ps[i+k].kind, Duplicate: r.Duplicate}
		}
		i = j
	}
	return out, nil
}

// ErrUniqueNeedsStore is Message of a unique job: its insert looks the
// job's key up where it inserts, in one transaction (Insert on the store,
// InsertVia over the broker); a plain send cannot.
var ErrUniqueNeedsStore = fmt.Errorf("%w: jobs: a unique job is inserted with Insert, in a transaction on the store, or with InsertVia", mqlite.ErrInvalidArgument)

// Message returns the queue and the message Insert would send for args,
// for a sender that has no transaction on the store: the broker's client
// (client.Client.Send), or a worker's step over the broker
// (consumer.Tx.Send), so that a job is inserted over the broker too. A
// unique job is ErrUniqueNeedsStore (InsertVia inserts it over the
// broker); other errors are Insert's before it writes.
func Message(args JobArgs, opts *InsertOpts) (queue string, msg outbox.Message, err error) {
	p, err := prepare(args, opts)
	if err != nil {
		return "", outbox.Message{}, err
	}
	if p.unique.enabled() {
		return "", outbox.Message{}, ErrUniqueNeedsStore
	}
	return p.queue, p.msg, nil
}

// prepared is one job ready to send.
type prepared struct {
	kind, queue string
	msg         outbox.Message
	unique      UniqueOpts
	opts        InsertOpts // merged with the kind's defaults
}

// prepare checks and encodes one job, merging its kind's defaults with
// opts.
func prepare(args JobArgs, opts *InsertOpts) (prepared, error) {
	if args == nil {
		return prepared{}, fmt.Errorf("%w: nil JobArgs", mqlite.ErrInvalidArgument)
	}
	kind := args.Kind()
	if err := validKind(kind); err != nil {
		return prepared{}, err
	}
	var o InsertOpts
	if d, ok := args.(JobArgsWithInsertOpts); ok {
		o = d.InsertOpts()
	}
	if opts != nil {
		o = merge(o, *opts)
	}
	if err := validOpts(o); err != nil {
		return prepared{}, err
	}
	body, err := json.Marshal(args)
	if err != nil {
		return prepared{}, fmt.Errorf("jobs: encoding the arguments of kind %q: %w", kind, err)
	}
	props := map[string]string{PropKind: kind}
	if o.MaxAttempts > 0 {
		props[PropMaxAttempts] = strconv.Itoa(o.MaxAttempts)
	}
	p := prepared{kind: kind, queue: o.Queue, unique: o.Unique, opts: o,
		msg: outbox.Message{Body: body, GroupID: o.GroupID, Properties: props, DeliverAt: o.ScheduledAt, Priority: o.Priority}}
	if p.queue == "" {
		p.queue = DefaultQueue
	}
	return p, nil
}

// MaxArgKeys bounds the length of UniqueOpts.ArgKeys, and MaxArgKeyLen
// the length of each key, in bytes.
const (
	MaxArgKeys   = 64
	MaxArgKeyLen = 256
)

// validOpts checks the merged options of one job.
func validOpts(o InsertOpts) error {
	if o.MaxAttempts < 0 {
		return fmt.Errorf("%w: MaxAttempts %d, want 0 or more", mqlite.ErrInvalidArgument, o.MaxAttempts)
	}
	if o.Unique.ByPeriod < 0 || o.Unique.ByPeriod > 0 && o.Unique.ByPeriod < time.Millisecond {
		return fmt.Errorf("%w: ByPeriod %v, want 0 or at least 1ms", mqlite.ErrInvalidArgument, o.Unique.ByPeriod)
	}
	if len(o.Unique.ArgKeys) > MaxArgKeys {
		return fmt.Errorf("%w: %d ArgKeys, at most %d", mqlite.ErrInvalidArgument, len(o.Unique.ArgKeys), MaxArgKeys)
	}
	for _, k := range o.Unique.ArgKeys {
		if len(k) > MaxArgKeyLen {
			return fmt.Errorf("%w: an ArgKeys key of %d bytes, at most %d", mqlite.ErrInvalidArgument, len(k), MaxArgKeyLen)
		}
	}
	return nil
}

// validKind checks a kind's name.
func validKind(kind string) error {
	if kind == "" || len(kind) > MaxKindLen || !utf8.ValidString(kind) {
		return fmt.Errorf("%w: %q, want 1 to %d bytes of UTF-8", ErrInvalidKind, kind, MaxKindLen)
	}
	return nil
}

// merge overlays the set fields of o on the kind's defaults d.
func merge(d, o InsertOpts) InsertOpts {
	if o.Queue != "" {
		d.Queue = o.Queue
	}
	if o.MaxAttempts != 0 {
		d.MaxAttempts = o.MaxAttempts
	}
	if !o.ScheduledAt.IsZero() {
		d.ScheduledAt = o.ScheduledAt
	}
	if o.GroupID != "" {
		d.GroupID = o.GroupID
	}
	if o.Priority != 0 {
		d.Priority = o.Priority
	}
	if o.Unique.enabled() {
		d.Unique = o.Unique
	}
	return d
}

// insertUnique inserts p unless a job with its unique key is there: within
// its period (ByPeriod) or unfinished (otherwise).
func insertUnique(ctx context.Context, tx outbox.Execer, p prepared) (InsertResult, error) {
	key, err := uniqueKey(p.kind, p.msg.Body, p.unique)
	if err != nil {
		return InsertResult{}, err
	}
	x := driver.Of(tx)
	if p.unique.ByPeriod > 0 {
		now, err := x.Now(ctx, tx)
		if err != nil {
			return InsertResult{}, err
		}
		key += "/" + strconv.FormatInt(now/p.unique.ByPeriod.Milliseconds(), 10)
	}
	e, err := x.LookupDedup(ctx, tx, p.queue, key)
	if err != nil {
		return InsertResult{}, err
	}
	switch {
	case e.WindowMS == 0:
		return InsertResult{}, fmt.Errorf("%w: queue %q has de-duplication off", ErrUniqueWindow, p.queue)
	case p.unique.ByPeriod.Milliseconds() > e.WindowMS:
		return InsertResult{}, fmt.Errorf("%w: ByPeriod %v, the dedup window of queue %q is %v",
			ErrUniqueWindow, p.unique.ByPeriod, p.queue, time.Duration(e.WindowMS)*time.Millisecond)
	case e.Found && (e.Unfinished || p.unique.ByPeriod > 0):
		return InsertResult{ID: jobID(e.Seq, e.Properties), Seq: e.Seq, Queue: p.queue, Kind: p.kind, Duplicate: true}, nil
	case e.Found: // finished: the key is free again
		if err := x.ForgetDedup(ctx, tx, p.queue, key, e.Seq); err != nil {
			return InsertResult{}, err
		}
	}
	p.msg.MessageID = key
	seq, err := outbox.SendOne(ctx, tx, p.queue, p.msg)
	if err != nil {
		return InsertResult{}, err
	}
	return InsertResult{ID: seq, Seq: seq, Queue: p.queue, Kind: p.kind}, nil
}

// jobID is the id of the job whose current message is seq with the stored
// properties props: its PropID, else seq.
func jobID(seq int64, props string) int64 {
	if props == "" {
		return seq
	}
	var m map[string]string
	if json.Unmarshal([]byte(props), &m) != nil {
		return seq
	}
	if id, err := strconv.ParseInt(m[PropID], 10, 64); err == nil && id > 0 {
		return id
	}
	return seq
}

// uniqueKey is the MessageID of a unique job of kind with the encoded
// arguments body: "job/<kind>/<hash>", the hash over the canonical JSON
// of the arguments it is unique by (none: the kind alone).
func uniqueKey(kind string, body []byte, u UniqueOpts) (string, error) {
	var canon []byte
	switch {
	case len(u.ArgKeys) > 0:
		var all map[string]json.RawMessage
		if err := json.Unmarshal(body, &all); err != nil {
			return "", fmt.Errorf("%w: jobs: ArgKeys needs arguments that encode as a JSON object: %v", mqlite.ErrInvalidArgument, err)
		}
		picked := make(map[string]any, len(u.ArgKeys))
		for _, k := range u.ArgKeys {
			v, err := canonical(all[k])
			if err != nil {
				return "", err
			}
			picked[k] = v
		}
		b, err := json.Marshal(picked)
		if err != nil {
			return "", err
		}
		canon = b
	case u.ByArgs:
		v, err := canonical(body)
		if err != nil {
			return "", err
		}
		if canon, err = json.Marshal(v); err != nil {
			return "", err
		}
	}
	h := sha256.Sum256(canon)
	return "job/" + kind + "/" + hex.EncodeToString(h[:16]), nil
}

// canonical decodes JSON into values whose encoding is canonical (objects'
// keys sorted, numbers as written); nil or empty is null.
func canonical(raw []byte) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // an int64 stays exact
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
