// Package broker is mqlite's HTTP/JSON server: one process owns the store's
// file (one file has one writer) and many processes send, receive and
// administer its queues over the network, through github.com/mqlite/mqlite/client
// or any HTTP client.
//
// Every endpoint lives under /v1 (see docs/api-reference-broker.md) except
// /healthz, /readyz and the web dashboard's files under /ui/ (embedded;
// docs/operations.md, "Dashboard"). Every /v1 endpoint but POST
// /v1/inbound/{source} (signed webhooks, Config.Inbound: the signature is
// the authentication) needs an access key
// ("Authorization: Bearer mqlite_..."), made with `mqlite keys create` or
// POST /v1/keys: none, unknown or revoked is 401; a key whose role or queues
// do not cover the request is 403. A key must cover every queue a request
// reads, changes or deletes (a topic's subscription queues included), and
// learns nothing of the names it does not cover: listings, topic answers
// and a send's copies leave them out, and a schedule outside its scope is
// not found. Keys are never logged; revoking one ends its waiting receives.
//
// A request body is exactly one JSON object of valid UTF-8. An answer that
// carries messages stops adding them at Config.MaxResponseBytes, one at
// least. Remote backups go only into Config.BackupDir.
//
// Receive long-polls: it calls Store.Receive with the request's wait, capped
// by Config.MaxWait, so a commit or a due moment in the store wakes it at
// once; nothing polls. At most Config.MaxLongPolls receives wait at a time,
// at most Config.MaxLongPollsPerKey of them for one access key; past that a
// waiting receive (or a stream's open) is refused with 503
// (too_many_long_polls) and the client retries. A stream holds its place
// only while it waits for a message.
//
// Errors are {"error": {"code", "reason", "message"}}: code is one of
// lock_lost (409), not_found (404), conflict (409), invalid (400),
// unauthorized (401), forbidden (403), too_large (413), unavailable (503)
// and internal (500); reason names the exact cause (the root sentinel).
package broker

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/setting"
)

// Defaults of Config's zero-valued fields.
const (
	DefaultMaxBodyBytes      = 8 << 20
	DefaultMaxBatch          = 1000
	DefaultMaxWait           = 30 * time.Second
	DefaultMaxLongPolls      = 512
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultKeyCacheTTL       = 2 * time.Second
	DefaultDrainTimeout      = 30 * time.Second
	DefaultMaxResponseBytes  = 4 << 20
	DefaultMaxAnswerBytes    = 64 << 20
	DefaultMaxCommitRecords  = 10000
)

// Config configures New. Zero values mean the defaults.
type Config struct {
	// Store is the store the broker serves. Required. The Server owns it
	// from New on: Shutdown closes it, after the requests in flight ended.
	Store *mqlite.Store
	// Logger receives one debug line per request (method, path, status,
	// duration, key id; never a secret) and the errors. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body (413 too_large past it).
	// Defaults to 8 MiB.
	MaxBodyBytes int64
	// MaxBatch bounds the messages of a batched send and the locks of a
	// batched complete or renew (413 too_large past it). Defaults to 1000.
	MaxBatch int
	// MaxWait caps a receive's wait. Defaults to 30s.
	MaxWait time.Duration
	// MaxLongPolls caps the receives waiting at once. Defaults to 512.
	MaxLongPolls int
	// MaxLongPollsPerKey caps the receives of one access key waiting at
	// once, so that one key cannot take every place of MaxLongPolls.
	// Defaults to a quarter of MaxLongPolls (one at least); -1 lets one
	// key take them all.
	MaxLongPollsPerKey int
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout are net/http's.
	// Default to 10s, 30s and 2m.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// WriteTimeout is net/http's; it must exceed MaxWait. Defaults to
	// MaxWait + 30s.
	WriteTimeout time.Duration
	// KeyCacheTTL is how long an authenticated key is trusted without
	// asking the store again. A revocation through the broker takes effect
	// at once; one written to the file by another route (none can be while
	// the broker holds it) would take up to this long. Defaults to 2s; -1
	// asks the store on every request.
	KeyCacheTTL time.Duration
	// DrainTimeout bounds the drain when Serve's ctx is cancelled.
	// Defaults to 30s.
	DrainTimeout time.Duration
	// PublicMetrics serves GET /metrics without an access key, for a
	// Prometheus on a private network that cannot send one. By default
	// /metrics needs an admin key over every queue ("*"): queue names and
	// their traffic are the broker's business. The metrics never carry a
	// message, a body or a key.
	PublicMetrics bool
	// MaxResponseBytes is the byte budget of an answer that carries
	// messages (receive, peek, the dead-letter listing): it stops adding
	// messages before their sizes (body and metadata, as the store's
	// MaxMessageBytes counts them) add up past the budget, and always
	// carries one, however large. A request may ask for less (max_bytes),
	// never for more. It bounds the broker's memory for one answer: the
	// rows read, then their JSON (base64 bodies, a third larger). Defaults
	// to 4 MiB; -1 turns the budget off (Max alone bounds an answer).
	MaxResponseBytes int64
	// MaxAnswerBytes bounds the bytes of all the answers that carry
	// messages (receive, complete-receive, receive-deferred, peek, find,
	// the dead-letter listing) held at once, while they are built and
	// written to clients that may read slowly or not at all: an answer
	// waits for room before it is written, for as long as its request
	// lives (the client's end or its connection's WriteTimeout ends the
	// wait). A read that takes rows (peek, find, the dead-letter listing)
	// holds room for MaxResponseBytes before it reads them. One answer
	// alone always passes, however large. Defaults to 64 MiB; -1 turns the
	// bound off.
	MaxAnswerBytes int64
	// MaxCommitRecords bounds the idempotency records of POST /v1/commit
	// that one access key holds: past it the oldest are dropped (down to
	// seven eighths of it), before their 30 minutes. A request whose record
	// was dropped, sent again, is not replayed: its settlements find their
	// deliveries settled (409 lock_lost) and nothing commits twice.
	// Defaults to 10000.
	MaxCommitRecords int
	// BackupDir is the folder POST /v1/backup writes into: a request names
	// a plain file in it, never a path. It must exist when New is called.
	// Empty (the default) turns remote backups off: the endpoint answers
	// 403 (backup_disabled). Backups are written 0600; they hold every
	// body and key hash.
	BackupDir string
	// Inbound lists the senders whose Standard Webhooks POST
	// /v1/inbound/{source} takes into their queues, exactly once by
	// webhook-id (package inbound): no access key, the signature is the
	// authentication. New reads each sender's queue and refuses one whose
	// DedupWindow is off or shorter than twice the sender's Tolerance or
	// its RetryHorizon (inbound.DefaultRetryHorizon, 3 days, unless the
	// sender says). Defaults to none: every request there is refused as
	// from an unknown sender.
	Inbound []inbound.Sender
	// MaxInboundBytes bounds the bytes of the inbound webhook bodies held
	// at once (inbound.Config.MaxHeldBytes): past it a request is 503
	// (inbound_busy) with Retry-After, its body unread. Each sender's
	// share is its MaxHeldBytes. Defaults to 64 MiB.
	MaxInboundBytes int64
}

// ErrInvalidConfig matches every error of New about its Config, as does
// mqlite.ErrInvalidArgument (errors.As gives an *mqlite.InvalidArgumentError
// whose Kind is ErrInvalidConfig).
var ErrInvalidConfig = errors.New("broker: invalid config")

// configErr returns the error of a bad Config: ErrInvalidConfig and
// mqlite.ErrInvalidArgument, the detail formatted as by fmt.Sprintf.
func configErr(format string, args ...any) error {
	return &mqlite.InvalidArgumentError{Kind: ErrInvalidConfig, Detail: fmt.Sprintf(format, args...)}
}

// Validate reports what New would refuse in c apart from its Store (the
// limits, the timeouts, the backup folder): for a command that checks its
// settings before it listens or opens anything. The error matches
// ErrInvalidConfig.
func (c Config) Validate() error { return c.fill() }

// fill checks c's settings and gives each left zero its default.
func (c *Config) fill() error {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration, name string) (err error) {
		if *d, err = setting.Default(name, *d, v); err != nil {
			return configErr("%v", err)
		}
		return nil
	}
	var err error
	if c.MaxBodyBytes, err = setting.Default("MaxBodyBytes", c.MaxBodyBytes, DefaultMaxBodyBytes); err != nil {
		return configErr("%v", err)
	}
	if c.MaxBatch, err = setting.Default("MaxBatch", c.MaxBatch, DefaultMaxBatch); err != nil {
		return configErr("%v", err)
	}
	if c.MaxCommitRecords, err = setting.Default("MaxCommitRecords", c.MaxCommitRecords, DefaultMaxCommitRecords); err != nil {
		return configErr("%v", err)
	}
	if c.MaxLongPolls, err = setting.Default("MaxLongPolls", c.MaxLongPolls, DefaultMaxLongPolls); err != nil {
		return configErr("%v", err)
	}
	if c.MaxLongPollsPerKey, err = setting.DefaultOrOff("MaxLongPollsPerKey", c.MaxLongPollsPerKey, max(1, c.MaxLongPolls/4), c.MaxLongPolls); err != nil {
		return configErr("%v", err)
	}
	c.MaxLongPollsPerKey = min(c.MaxLongPollsPerKey, c.MaxLongPolls)
	// -1 stays -1 in both: the code reading them takes it as off.
	if c.MaxResponseBytes, err = setting.DefaultOrOff("MaxResponseBytes", c.MaxResponseBytes, DefaultMaxResponseBytes, -1); err != nil {
		return configErr("%v", err)
	}
	if c.MaxAnswerBytes, err = setting.DefaultOrOff("MaxAnswerBytes", c.MaxAnswerBytes, DefaultMaxAnswerBytes, -1); err != nil {
		return configErr("%v", err)
	}
	if c.KeyCacheTTL, err = setting.DefaultOrOff("KeyCacheTTL", c.KeyCacheTTL, DefaultKeyCacheTTL, -1); err != nil {
		return configErr("%v", err)
	}
	for _, d := range []struct {
		p    *time.Duration
		v    time.Duration
		name string
	}{
		{&c.MaxWait, DefaultMaxWait, "MaxWait"},
		{&c.ReadHeaderTimeout, DefaultReadHeaderTimeout, "ReadHeaderTimeout"},
		{&c.ReadTimeout, DefaultReadTimeout, "ReadTimeout"},
		{&c.IdleTimeout, DefaultIdleTimeout, "IdleTimeout"},
		{&c.WriteTimeout, c.MaxWait + 30*time.Second, "WriteTimeout"},
		{&c.DrainTimeout, DefaultDrainTimeout, "DrainTimeout"},
	} {
		if d.name == "WriteTimeout" && *d.p == 0 {
			*d.p = c.MaxWait + 30*time.Second
		}
		if err := def(d.p, d.v, d.name); err != nil {
			return err
		}
	}
	if c.WriteTimeout <= c.MaxWait {
		return configErr("WriteTimeout (%v) must exceed MaxWait (%v)", c.WriteTimeout, c.MaxWait)
	}
	if c.BackupDir != "" {
		fi, err := os.Stat(c.BackupDir)
		if err != nil || !fi.IsDir() {
			return configErr("BackupDir %q is not a folder (%v)", c.BackupDir, err)
		}
	}
	return nil
}

// Server is the broker. It is safe for concurrent use.
type Server struct {
	eps        []endpoint             // the route table, for the OpenAPI document
	openAPIDoc func() ([]byte, error) // the OpenAPI document of eps, built once
	cfg        Config
	st         *mqlite.Store
	log        *slog.Logger
	handler    http.Handler
	http       *http.Server

	polls   *slots         // the places of the waiting receives
	polling sync.WaitGroup // the waiting receives and the streams, for Shutdown

	drain     context.Context // cancelled when Shutdown begins
	stopDrain context.CancelFunc

	shutdownOnce sync.Once
	shutdownErr  error
	shutdownDone chan struct{}

	cacheMu sync.Mutex
	cache   map[[32]byte]cachedKey

	metricsHTTP http.Handler // GET /metrics, after its key check

	// topics serialises the changes to the set of a topic's subscriptions
	// made through the broker (the only writer of the file), so that a
	// topic's deletion deletes the subscriptions its key check saw.
	topics sync.Mutex

	waiting waiters // the waiting receives, by key, for revocations

	records commitRecords // the commit records of each key, for MaxCommitRecords

	answers *byteBudget // the bytes of the answers that carry messages (nil: MaxAnswerBytes is off)

	inbound *inbound.Handler // POST /v1/inbound/{source}
}

type cachedKey struct {
	key     keys.Key
	expires time.Time
}

// New returns a Server for cfg.Store. It starts nothing: call Serve, or
// mount Handler on a server of your own. It reads the queues of
// Config.Inbound.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, configErr("Store is required")
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	in, err := newInbound(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, st: cfg.Store, log: cfg.Logger,
		polls: newSlots(cfg.MaxLongPolls, cfg.MaxLongPollsPerKey), shutdownDone: make(chan struct{}),
		cache: make(map[[32]byte]cachedKey), inbound: in}
	if cfg.MaxAnswerBytes > 0 {
		s.answers = newByteBudget(int(cfg.MaxAnswerBytes))
	}
	s.drain, s.stopDrain = context.WithCancel(context.Background())
	s.metricsHTTP = metricsHandler(cfg.Store, in)
	s.handler = s.routes()
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Handler returns the broker's HTTP handler, for httptest or a server of
// your own; call Shutdown when done with it.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve accepts connections on ln until Shutdown, or until ctx is
// cancelled, which shuts down with Config.DrainTimeout. It returns nil after
// a shutdown (the error of Shutdown if the drain failed) and the listener's
// error otherwise. Serve blocks.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, func() error { return s.http.Serve(ln) })
}

// ServeTLS is Serve over TLS, with the certificate and key in PEM files.
func (s *Server) ServeTLS(ctx context.Context, ln net.Listener, certFile, keyFile string) error {
	return s.serve(ctx, func() error { return s.http.ServeTLS(ln, certFile, keyFile) })
}

func (s *Server) serve(ctx context.Context, run func() error) error {
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.DrainTimeout)
		defer cancel()
		_ = s.Shutdown(sctx)
	})
	err := run()
	if errors.Is(err, http.ErrServerClosed) {
		<-s.shutdownDone
		return s.shutdownErr
	}
	if !stop() {
		<-s.shutdownDone
	}
	return err
}

// Shutdown stops the broker gracefully: /readyz turns 503, waiting receives
// return what they have (nothing), the listeners close, the requests in
// flight finish, and then the store is closed. If ctx ends first the
// remaining connections are closed and the store is closed anyway; ctx's
// error is returned. It is safe to call more than once; later calls wait
// for the first and return its result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		defer close(s.shutdownDone)
		s.stopDrain()
		err := s.http.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, s.http.Close())
		}
		// Under a server of the caller's (Handler), nothing above waited
		// for the receives the drain ended: let them answer before the
		// store closes under them.
		waited := make(chan struct{})
		go func() { s.polling.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-ctx.Done():
		}
		s.shutdownErr = errors.Join(err, s.st.Close())
	})
	select {
	case <-s.shutdownDone:
		return s.shutdownErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// authenticate returns the key of token, from the cache when fresh.
func (s *Server) authenticate(ctx context.Context, token string) (keys.Key, error) {
	h := sha256.Sum256([]byte(token))
	now := time.Now()
	if s.cfg.KeyCacheTTL > 0 {
		s.cacheMu.Lock()
		c, ok := s.cache[h]
		s.cacheMu.Unlock()
		if ok && now.Before(c.expires) {
			return c.key, nil
		}
	}
	k, err := keys.Authenticate(ctx, s.st, token)
	if err != nil {
		return keys.Key{}, err
	}
	if s.cfg.KeyCacheTTL > 0 {
		s.cacheMu.Lock()
		if len(s.cache) > 10_000 {
			clear(s.cache)
		}
		s.cache[h] = cachedKey{key: k, expires: now.Add(s.cfg.KeyCacheTTL)}
		s.cacheMu.Unlock()
	}
	return k, nil
}

// forget drops the cached entries of key id (a revocation).
func (s *Server) forget(id string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for h, c := range s.cache {
		if c.key.ID == id {
			delete(s.cache, h)
		}
	}
}
