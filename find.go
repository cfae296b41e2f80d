package mqlite

import (
	"context"
	"database/sql"
	"unicode/utf8"

	"github.com/mqlite/mqlite/internal/driver"
)

// Bounds of FindParams.ScanMax.
const (
	DefaultFindScan = 10_000
	MaxFindScan     = 100_000
)

// FindParams is the query of Find: a page of the queue's messages from FromSeq
// on that match every filter set.
type FindParams struct {
	// FromSeq, Max and MaxBytes page as PeekParams' do.
	FromSeq  int64
	Max      int
	MaxBytes int64
	// State keeps the messages in one state (StateDeadLettered included);
	// empty means the live ones (active, scheduled, locked, deferred), as
	// Peek: never a dead letter or a completed message.
	State State
	// SubjectPrefix keeps the messages whose Subject starts with it (a
	// prefix, not a substring).
	SubjectPrefix string
	// MessageID keeps the messages sent with that MessageID.
	MessageID string
	// PropertyKey and PropertyValue keep the messages whose property
	// PropertyKey is PropertyValue. A value without a key is refused.
	PropertyKey, PropertyValue string
	// ScanMax bounds how many messages of the queue (in State) one page
	// examines: the subject, MessageID and property filters read the rows
	// themselves, so a page reads the rows of at most ScanMax of them (and
	// of no other queue) and FindResult's NextSeq says where to go on.
	// Defaults to DefaultFindScan; at most MaxFindScan.
	ScanMax int
}

// FindResult is one page of Find.
type FindResult struct {
	// Messages are the matches, in sequence order.
	Messages []Message
	// NextSeq is the FromSeq of the next page; 0 when the queue has no
	// message left to examine.
	NextSeq int64
	// Scanned is how many messages the page examined.
	Scanned int
}

func (o *FindParams) validate() error {
	p := PeekParams{FromSeq: o.FromSeq, Max: o.Max, MaxBytes: o.MaxBytes}
	if err := p.validate(); err != nil {
		return err
	}
	o.Max = p.Max
	switch o.State {
	case "", StateActive, StateScheduled, StateLocked, StateDeferred, StateDeadLettered:
	default:
		return invalidf(ErrInvalidArgument, "state %q, want one of active, scheduled, locked, deferred, dead_lettered", o.State)
	}
	switch {
	case o.ScanMax == 0:
		o.ScanMax = DefaultFindScan
	case o.ScanMax < 0 || o.ScanMax > MaxFindScan:
		return invalidf(ErrInvalidArgument, "ScanMax %d, want 1 to %d", o.ScanMax, MaxFindScan)
	}
	if o.PropertyValue != "" && o.PropertyKey == "" {
		return invalidf(ErrInvalidArgument, "a property value without its key")
	}
	for _, f := range []struct{ name, v string }{{"SubjectPrefix", o.SubjectPrefix}, {"MessageID", o.MessageID},
		{"PropertyKey", o.PropertyKey}, {"PropertyValue", o.PropertyValue}} {
		if len(f.v) > MaxMessageIDLen || !utf8.ValidString(f.v) {
			return invalidf(ErrInvalidArgument, "%s must be UTF-8 of at most %d bytes", f.name, MaxMessageIDLen)
		}
	}
	return nil
}

// Find returns a page of the messages of queue that match opts, without
// locking or counting a delivery: the message browser's search. Every
// state filter reads the queue's entries in the states' partial indexes,
// never another queue's rows; the subject, MessageID and property filters
// read the rows of at most opts.ScanMax messages per page, and the result
// says where the next page starts.
func (s *Store) Find(ctx context.Context, queue string, opts FindParams) (FindResult, error) {
	if err := s.ready(ctx); err != nil {
		return FindResult{}, err
	}
	if err := validateQueueName(queue); err != nil {
		return FindResult{}, err
	}
	if err := opts.validate(); err != nil {
		return FindResult{}, err
	}
	var res driver.FindResult
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.catchUp(ctx, tx, queue); err != nil {
			return err
		}
		var err error
		res, err = s.eng.Find(ctx, tx, driver.FindRequest{Queue: queue, FromSeq: opts.FromSeq, Max: opts.Max,
			MaxBytes: opts.MaxBytes, State: string(opts.State), SubjectPrefix: opts.SubjectPrefix,
			MessageID: opts.MessageID, PropertyKey: opts.PropertyKey, PropertyValue: opts.PropertyValue,
			ScanMax: opts.ScanMax})
		return err
	})
	if err != nil {
		return FindResult{}, err
	}
	out := FindResult{Messages: make([]Message, len(res.Rows)), NextSeq: res.NextSeq, Scanned: res.Scanned}
	for i, c := range res.Rows {
		m := toMessage(queue, c)
		m.State = State(c.State)
		m.VisibleAt = fromMillis(c.VisibleAt)
		m.LockToken = "" // Find never hands out a token
		out.Messages[i] = m
	}
	return out, nil
}
