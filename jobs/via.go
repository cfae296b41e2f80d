package jobs

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
)

// RawJob is one job encoded for an insert elsewhere: its kind, its
// arguments' JSON and its options, its kind's defaults (JobArgsWithInsertOpts)
// merged in and its queue named. Raw makes it; an Inserter (the broker's
// client) carries it, and InsertRaw inserts it where the job's queue is,
// exactly as Insert would have.
type RawJob struct {
	// Kind is the job's kind.
	Kind string
	// Args is the JSON of the job's arguments.
	Args json.RawMessage
	// Opts are the job's options; Opts.Queue is never empty.
	Opts InsertOpts
}

// Raw encodes args with opts (nil for the kind's defaults) as Insert would,
// without inserting. Its errors are Insert's before it writes.
func Raw(args JobArgs, opts *InsertOpts) (RawJob, error) {
	p, err := prepare(args, opts)
	if err != nil {
		return RawJob{}, err
	}
	o := p.opts
	o.Queue = p.queue
	return RawJob{Kind: p.kind, Args: p.msg.Body, Opts: o}, nil
}

// Validate checks j as Raw would have made it, before anything is read:
// its kind (ErrInvalidKind), its options, and that Args is JSON
// (mqlite.ErrInvalidArgument).
func (j RawJob) Validate() error {
	if err := validKind(j.Kind); err != nil {
		return err
	}
	if err := validOpts(j.Opts); err != nil {
		return err
	}
	if !json.Valid(j.Args) {
		return fmt.Errorf("%w: jobs: the arguments of kind %q are not JSON", mqlite.ErrInvalidArgument, j.Kind)
	}
	return nil
}

// InsertRaw inserts jobs inside tx as InsertMany does: the unique ones
// after looking their key up in tx, so that the check and the insert are
// one transaction. It is what the broker runs for an Inserter's jobs. Bad
// input (a kind, options or arguments Raw would not make, Args that are
// not JSON) is an error before anything is written.
func InsertRaw(ctx context.Context, tx outbox.Execer, jobs []RawJob) ([]InsertResult, error) {
	params := make([]InsertManyParams, len(jobs))
	for i, j := range jobs {
		if err := j.Validate(); err != nil {
			if len(jobs) > 1 {
				err = fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
		o := j.Opts
		params[i] = InsertManyParams{Args: rawArgs{kind: j.Kind, args: j.Args}, InsertOpts: &o}
	}
	return InsertMany(ctx, tx, params)
}

// rawArgs are a RawJob's arguments as JobArgs: its kind, its JSON as it
// is (encoding/json checks and compacts it).
type rawArgs struct {
	kind string
	args json.RawMessage
}

func (a rawArgs) Kind() string { return a.kind }

func (a rawArgs) MarshalJSON() ([]byte, error) { return a.args, nil }

// Inserter inserts jobs where there is no transaction on the store: the
// broker's *client.Client. InsertJobs inserts them in one transaction of
// the broker's, all or none, each unique one after looking its key up in
// that transaction (as Insert does), and returns one result per job.
type Inserter interface {
	InsertJobs(ctx context.Context, jobs []RawJob) ([]InsertResult, error)
}

// InsertVia inserts a job with args through ins (the broker's client), as
// Insert would on the store: a unique job that is there already is
// returned (InsertResult.Duplicate) and nothing is inserted. opts may be
// nil. Errors are Insert's, and the Inserter's (the client's: a lost
// answer after its retries is client.ErrOutcomeUnknown, and the same
// insert again returns the job, a duplicate, if the first went through).
func InsertVia(ctx context.Context, ins Inserter, args JobArgs, opts *InsertOpts) (InsertResult, error) {
	res, err := InsertManyVia(ctx, ins, []InsertManyParams{{Args: args, InsertOpts: opts}})
	if err != nil {
		return InsertResult{}, err
	}
	return res[0], nil
}

// InsertManyVia inserts jobs through ins in one transaction of the
// Inserter's, as InsertMany would on the store. A job that cannot be
// encoded fails the call before anything is sent.
func InsertManyVia(ctx context.Context, ins Inserter, params []InsertManyParams) ([]InsertResult, error) {
	if ins == nil {
		return nil, fmt.Errorf("%w: nil Inserter", mqlite.ErrInvalidArgument)
	}
	raw := make([]RawJob, len(params))
	for i, p := range params {
		var err error
		if raw[i], err = Raw(p.Args, p.InsertOpts); err != nil {
			if len(params) > 1 {
				err = fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
	}
	res, err := ins.InsertJobs(ctx, raw)
	if err != nil {
		return nil, err
	}
	if len(res) != len(raw) {
		return nil, fmt.Errorf("jobs: %d results for %d jobs", len(res), len(raw))
	}
	return res, nil
}
