package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/outbox"
)

// globals are the flags every command has, and the process's streams.
type globals struct {
	db, url, key   string
	json           bool
	retryFor       time.Duration
	stdin          io.Reader
	stdout, stderr io.Writer
	// terminal reports whether a stream is a terminal: isTerminal, or a
	// fake in tests.
	terminal func(any) bool
	envs     []envFlag
}

// defaultRetryFor is how long a command retries a broker it cannot reach
// before it fails: a few seconds, so that a broker that is down is said at
// once; --retry-for gives a longer budget.
const defaultRetryFor = 3 * time.Second

// retryInterval is the first wait between tries of an unreachable broker.
const retryInterval = 250 * time.Millisecond

// isTerminal reports whether f is an *os.File on a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// newClient is the broker client of the global flags: it retries a broker
// that cannot be reached for --retry-for, with one line on stderr per retry.
func (g *globals) newClient() (*client.Client, error) {
	retryFor := g.retryFor
	if retryFor <= 0 {
		retryFor = -1 // no retry
	}
	// Dialling is bounded by the same budget: an address that drops
	// packets fails as fast as one that refuses them.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: max(g.retryFor, time.Second)}).DialContext
	return client.New(client.Config{
		URL: g.url, Key: g.key, MaxElapsed: retryFor, InitialInterval: retryInterval,
		HTTPClient: &http.Client{Transport: t},
		RetryNotifyFunc: func(err error, wait time.Duration) {
			fmt.Fprintf(g.stderr, "mqlite: retrying in %v: %v\n", wait.Round(time.Millisecond), err)
		},
	})
}

// backend is what the commands need of a store: *client.Client has it all;
// local wraps a *mqlite.Store.
type backend interface {
	consumer.Store
	CompleteBatch(ctx context.Context, locks []mqlite.Lock) ([]error, error)
	SendBatch(ctx context.Context, queue string, msgs []outbox.Message) ([]outbox.Result, error)
	PeekDeadLetters(ctx context.Context, queue string, opts mqlite.PeekParams) ([]mqlite.Message, error)
	Redrive(ctx context.Context, queue string, opts mqlite.RedriveOptions) (int, error)
	DeliverNow(ctx context.Context, queue string, opts mqlite.DeliverNowOptions) (int, error)
	Purge(ctx context.Context, queue string, opts mqlite.PurgeOptions) (int, error)
	Stats(ctx context.Context, queue string) (mqlite.QueueStats, error)
	Find(ctx context.Context, queue string, opts mqlite.FindParams) (mqlite.FindResult, error)
	CreateQueue(ctx context.Context, name string, opts mqlite.QueueOptions) error
	UpdateQueue(ctx context.Context, name string, opts mqlite.QueueOptions) error
	GetQueue(ctx context.Context, name string) (mqlite.QueueInfo, error)
	ListQueues(ctx context.Context) ([]mqlite.QueueInfo, error)
	DeleteQueue(ctx context.Context, name string) error
	PauseQueue(ctx context.Context, name string) error
	ResumeQueue(ctx context.Context, name string) error
	CreateTopic(ctx context.Context, name string) error
	GetTopic(ctx context.Context, name string) (mqlite.TopicInfo, error)
	ListTopics(ctx context.Context) ([]mqlite.TopicInfo, error)
	DeleteTopic(ctx context.Context, name string) error
	CreateSubscription(ctx context.Context, topic, queue string, opts mqlite.SubscriptionOptions) error
	UpdateSubscription(ctx context.Context, topic, queue string, f mqlite.Filter) error
	DeleteSubscription(ctx context.Context, topic, queue string) error
	CreateSchedule(ctx context.Context, name string, opts mqlite.ScheduleOptions) error
	UpdateSchedule(ctx context.Context, name string, opts mqlite.ScheduleOptions) error
	GetSchedule(ctx context.Context, name string) (mqlite.ScheduleInfo, error)
	ListSchedules(ctx context.Context, opts mqlite.ListSchedulesParams) ([]mqlite.ScheduleInfo, error)
	DeleteSchedule(ctx context.Context, name string) error
	Backup(ctx context.Context, dst string) error
	CreateKey(ctx context.Context, role string, queues []string) (client.Key, string, error)
	ListKeys(ctx context.Context) ([]client.Key, error)
	RevokeKey(ctx context.Context, id string) error
	Close() error
}

var _ backend = (*client.Client)(nil)
var _ backend = local{}

// local is a backend on a file.
type local struct{ *mqlite.Store }

// SendBatch sends msgs in one transaction.
func (l local) SendBatch(ctx context.Context, queue string, msgs []outbox.Message) ([]outbox.Result, error) {
	return outbox.Send(ctx, l.Store, queue, msgs...)
}

func keyOf(k keys.Key) client.Key {
	return client.Key{ID: k.ID, Role: string(k.Scope.Role), Queues: k.Scope.Queues, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// CreateKey makes a key in the file.
func (l local) CreateKey(ctx context.Context, role string, queues []string) (client.Key, string, error) {
	k, secret, err := keys.Create(ctx, l.Store, keys.Scope{Role: keys.Role(role), Queues: queues})
	return keyOf(k), secret, err
}

// ListKeys lists the file's keys.
func (l local) ListKeys(ctx context.Context) ([]client.Key, error) {
	ks, err := keys.List(ctx, l.Store)
	out := make([]client.Key, len(ks))
	for i, k := range ks {
		out[i] = keyOf(k)
	}
	return out, err
}

// RevokeKey revokes a key in the file.
func (l local) RevokeKey(ctx context.Context, id string) error { return keys.Revoke(ctx, l.Store, id) }

// where names the store --db gives for messages: the file, or the
// PostgreSQL URL without its password.
func (g *globals) where() string {
	if !mqlite.IsPostgresURL(g.db) {
		return g.db
	}
	u, err := url.Parse(g.db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}

// openMode says whether a command may create or migrate a store.
type openMode int

const (
	// existingStore opens a store in this binary's layout and never
	// creates or migrates one: the mode of the commands that change what a
	// store holds.
	existingStore openMode = iota
	// readStore is existingStore for the commands that only read: no
	// background sweep runs, so nothing is written (a lease that lapses
	// while the command runs stays for the store's own processes to take
	// back), and on PostgreSQL every transaction of the command's sessions
	// is READ ONLY (default_transaction_read_only), so that the server
	// refuses any write: a role with SELECT alone can run them.
	readStore
	// createStore creates the store in a file that has none, or migrates
	// an older one, and says so on stderr: the mode of the commands that
	// make a queue, a topic or a key, which a store without one needs first.
	createStore
)

// open returns the backend the global flags name.
func (g *globals) open(ctx context.Context, mode openMode) (backend, error) {
	switch {
	case g.url != "" && g.db != "":
		return nil, usagef("give --db or --url, not both")
	case g.url != "":
		return g.newClient()
	case g.db != "":
		st, err := g.openStore(ctx, mode, mqlite.Config{})
		if err != nil {
			return nil, err
		}
		return local{st}, nil
	}
	return nil, usagef("no store: give --db FILE or --url URL (or MQLITE_DB / MQLITE_URL)")
}

// openStore opens the store at --db with opts in mode, and explains the
// refusals a user can act on.
func (g *globals) openStore(ctx context.Context, mode openMode, opts mqlite.Config) (*mqlite.Store, error) {
	opts.ExistingOnly = mode != createStore
	path := g.db
	if mode == readStore {
		opts.ReaperInterval, opts.SchedulerInterval, opts.TTLInterval = -1, -1, -1
		opts.JanitorInterval, opts.RetentionInterval, opts.ScheduleInterval = -1, -1, -1
		path = readOnlyURL(g.db)
	}
	st, err := mqlite.Open(ctx, path, opts)
	switch {
	case errors.Is(err, mqlite.ErrDBLocked):
		return nil, fmt.Errorf("%w (is a broker serving it? use --url)", err)
	case errors.Is(err, mqlite.ErrNoStore):
		return nil, fmt.Errorf("no store at %s (%w); commands that create one: queues create, topics create, keys create, migrate, serve", g.where(), err)
	case errors.Is(err, mqlite.ErrMigrationNeeded):
		return nil, fmt.Errorf("the store at %s has an older layout (%w); upgrade it with: mqlite migrate --db %s", g.where(), err, g.where())
	case err != nil:
		return nil, err
	}
	g.announce(st)
	return st, nil
}

// announce says on stderr what Open did to the file's layout, if anything.
func (g *globals) announce(st *mqlite.Store) {
	switch m := st.Migration(); {
	case m.Created():
		fmt.Fprintf(g.stderr, "created a new store at %s\n", st.Path())
	case m.From != m.To:
		fmt.Fprintf(g.stderr, "migrated the store at %s from version %d to %d\n", st.Path(), m.From, m.To)
	}
}

// with opens an existing store (never creating or migrating one), runs fn
// and closes it.
func (g *globals) with(ctx context.Context, fn func(b backend) error) error {
	return g.withMode(ctx, existingStore, fn)
}

// read is with for the commands that only read: nothing is written
// (readStore).
func (g *globals) read(ctx context.Context, fn func(b backend) error) error {
	return g.withMode(ctx, readStore, fn)
}

// readOnlyURL is path, a PostgreSQL URL, with every transaction of its
// sessions READ ONLY; any other path as it is.
func readOnlyURL(path string) string {
	if !mqlite.IsPostgresURL(path) {
		return path
	}
	u, err := url.Parse(path)
	if err != nil {
		return path // Open says what is wrong with it
	}
	q := u.Query()
	q.Set("default_transaction_read_only", "on")
	u.RawQuery = q.Encode()
	return u.String()
}

// withCreate is with for the commands that make something: the store is
// created, or migrated, when it must be.
func (g *globals) withCreate(ctx context.Context, fn func(b backend) error) error {
	return g.withMode(ctx, createStore, fn)
}

func (g *globals) withMode(ctx context.Context, mode openMode, fn func(b backend) error) (err error) {
	b, err := g.open(ctx, mode)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	return suggestQueue(ctx, b, fn(b))
}

// emit prints v as JSON with --json, else calls human.
func (g *globals) emit(v any, human func(w io.Writer)) error {
	if g.json {
		return g.writeJSON(v)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	human(tw)
	return tw.Flush()
}

// writeJSON prints v as one indented JSON value on stdout.
func (g *globals) writeJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// barShown reports whether progress bars are drawn: only when stderr is a
// terminal and --json is off.
func (g *globals) barShown() bool { return !g.json && g.terminal(g.stderr) }

// bar returns a progress bar on stderr of max steps (-1: a spinner) of
// unit ("lines", or "bytes" for sizes shown as KiB, MiB, ...), drawn only
// when barShown.
func (g *globals) bar(max int64, what, unit string) *progressbar.ProgressBar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(g.stderr),
		progressbar.OptionSetVisibility(g.barShown()),
		progressbar.OptionSetDescription(what),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionShowElapsedTimeOnFinish(),
	}
	if unit == "bytes" {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionSetItsString(unit))
	}
	return progressbar.NewOptions64(max, opts...)
}
