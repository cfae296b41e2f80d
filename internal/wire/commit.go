package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/jobs"
)

// CommitRequest is the body of POST /v1/commit: completions, rejects,
// sends, typed jobs and carried sends that commit in one transaction, all or none of
// them. A request
// with an IdempotencyKey that committed is answered again from its record
// when it comes again (same key, same access key, same items), and commits
// nothing new; the same key with other items is a conflict. A request
// without one that settles a delivery takes LocksKey's.
type CommitRequest struct {
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	Complete       []CommitLock   `json:"complete,omitempty"`
	Reject         []CommitReject `json:"reject,omitempty"`
	Send           []CommitSend   `json:"send,omitempty"`
	Jobs           []CommitJob    `json:"jobs,omitempty"`
	Carry          []CommitCarry  `json:"carry,omitempty"`
}

// CommitCarry is a message sent under the MessageID of a delivery the
// same request completes (Queue and FromSeq name one of its Complete
// locks), the MessageID's dedup entry moved from that delivery to the new
// message: a unique job's snoozed copy keeps the job's key.
type CommitCarry struct {
	Queue   string      `json:"queue"`
	FromSeq int64       `json:"from_seq"`
	Message SendMessage `json:"message"`
}

// CommitLock is one delivery to complete: its queue, seq and token.
type CommitLock struct {
	Queue string `json:"queue"`
	Seq   int64  `json:"seq"`
	Token string `json:"token"`
}

// Lock decodes the lock.
func (l CommitLock) Lock() mqlite.Lock {
	return mqlite.Lock{Queue: l.Queue, Seq: l.Seq, Token: l.Token}
}

// FromLock encodes a lock.
func FromLock(l mqlite.Lock) CommitLock {
	return CommitLock{Queue: l.Queue, Seq: l.Seq, Token: l.Token}
}

// CommitReject is one delivery to dead-letter, with its reason and
// description.
type CommitReject struct {
	Queue       string `json:"queue"`
	Seq         int64  `json:"seq"`
	Token       string `json:"token"`
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description,omitempty"`
}

// Lock decodes the lock of the reject.
func (r CommitReject) Lock() mqlite.Lock {
	return mqlite.Lock{Queue: r.Queue, Seq: r.Seq, Token: r.Token}
}

// CommitSend is messages to send to one queue or topic, as the batched
// send route takes them.
type CommitSend struct {
	Queue    string        `json:"queue"`
	Messages []SendMessage `json:"messages"`
}

// CommitJob is one typed job to insert (package jobs): its queue, kind,
// arguments (JSON) and options, the kind's defaults merged in. A unique
// job is inserted after its key is looked up in the commit's transaction,
// as jobs.Insert does on the store.
type CommitJob struct {
	Queue       string          `json:"queue"`
	Kind        string          `json:"kind"`
	Args        json.RawMessage `json:"args"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	ScheduledAt time.Time       `json:"scheduled_at,omitzero"`
	GroupID     string          `json:"group_id,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	Unique      *JobUnique      `json:"unique,omitempty"`
}

// JobUnique is a job's jobs.UniqueOpts, its period in milliseconds.
type JobUnique struct {
	ByArgs     bool     `json:"by_args,omitempty"`
	ArgKeys    []string `json:"arg_keys,omitempty"`
	ByPeriodMS int64    `json:"by_period_ms,omitempty"`
}

// FromRawJob encodes a job.
func FromRawJob(j jobs.RawJob) CommitJob {
	o := j.Opts
	out := CommitJob{Queue: o.Queue, Kind: j.Kind, Args: j.Args, MaxAttempts: o.MaxAttempts,
		ScheduledAt: o.ScheduledAt, GroupID: o.GroupID, Priority: o.Priority}
	if u := o.Unique; u.ByArgs || len(u.ArgKeys) > 0 || u.ByPeriod != 0 {
		out.Unique = &JobUnique{ByArgs: u.ByArgs, ArgKeys: u.ArgKeys, ByPeriodMS: DurMS(u.ByPeriod)}
	}
	return out
}

// RawJob decodes the job for jobs.InsertRaw.
func (j CommitJob) RawJob() jobs.RawJob {
	o := jobs.InsertOpts{Queue: j.Queue, MaxAttempts: j.MaxAttempts, ScheduledAt: j.ScheduledAt,
		GroupID: j.GroupID, Priority: j.Priority}
	if u := j.Unique; u != nil {
		o.Unique = jobs.UniqueOpts{ByArgs: u.ByArgs, ArgKeys: u.ArgKeys}
		if u.ByPeriodMS != 0 {
			o.Unique.ByPeriod = MSDur(u.ByPeriodMS)
		}
	}
	return jobs.RawJob{Kind: j.Kind, Args: j.Args, Opts: o}
}

// JobResult is the outcome of one CommitJob: the job's id (for a
// duplicate, the job already there), the seq of its current message, and
// whether it was there already.
type JobResult struct {
	ID        int64  `json:"id"`
	Seq       int64  `json:"seq"`
	Queue     string `json:"queue"`
	Kind      string `json:"kind"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// FromInsertResult encodes a job's outcome.
func FromInsertResult(r jobs.InsertResult) JobResult {
	return JobResult{ID: r.ID, Seq: r.Seq, Queue: r.Queue, Kind: r.Kind, Duplicate: r.Duplicate}
}

// InsertResult decodes a job's outcome.
func (r JobResult) InsertResult() jobs.InsertResult {
	return jobs.InsertResult{ID: r.ID, Seq: r.Seq, Queue: r.Queue, Kind: r.Kind, Duplicate: r.Duplicate}
}

// CommitResponse is the answer of POST /v1/commit: one entry per entry of
// the request's Send, in order, each with one result per message, and one
// result per entry of its Jobs. Replayed is true when the answer comes
// from the record of an earlier request with the same idempotency key.
type CommitResponse struct {
	Sends    []SendBatchResponse `json:"sends"`
	Jobs     []JobResult         `json:"jobs,omitempty"`
	Replayed bool                `json:"replayed,omitempty"`
}

// LocksKeyPrefix starts every key LocksKey derives.
const LocksKeyPrefix = "locks:"

// LocksKey is the idempotency key of a request that names none: derived
// from the set of deliveries (queue, seq, token) it completes or rejects,
// in any order, so that the same request sent again without a key replays
// the first answer. A token is its delivery's alone, so no other request
// settling anything derives the same key. A request that settles nothing
// derives none ("").
func (r CommitRequest) LocksKey() string {
	locks := make([]string, 0, len(r.Complete)+len(r.Reject))
	add := func(queue string, seq int64, token string) {
		locks = append(locks, strconv.Quote(queue)+" "+strconv.FormatInt(seq, 10)+" "+strconv.Quote(token))
	}
	for _, c := range r.Complete {
		add(c.Queue, c.Seq, c.Token)
	}
	for _, rj := range r.Reject {
		add(rj.Queue, rj.Seq, rj.Token)
	}
	if len(locks) == 0 {
		return ""
	}
	slices.Sort(locks)
	h := sha256.New()
	for _, l := range locks {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return LocksKeyPrefix + hex.EncodeToString(h.Sum(nil))
}
