package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
)

// DefaultAddr is where mqlite serve listens by default: loopback only.
const DefaultAddr = "127.0.0.1:7420"

func serveCmd(g *globals) *cobra.Command {
	var (
		addr, cert, keyFile       string
		cfg                       broker.Config
		debug, standby, plainHTTP bool
		maxMessage                int
		in                        inboundFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the broker: one process owns the file, many talk to it over HTTP",
		Long: `serve opens the store (--db) and serves it over HTTP/JSON under /v1 until
SIGINT or SIGTERM, then drains: waiting receives return, requests in flight
finish (up to --drain-timeout), and the store is closed.

Every request needs an access key: make the first one on the file before
serving (mqlite keys create --role admin --queue '*' --db FILE), and more
through the broker afterwards. Give --tls-cert and --tls-key to serve HTTPS.
Every request carries its key: plain HTTP is refused on an address other
than loopback unless --allow-plain-http says so (a TLS proxy in front, a
private network), and then serve warns on stderr.

POST /v1/backup writes only into the folder --backup-dir names (the
request names a file in it); without --backup-dir remote backups are off.

An answer that carries messages (receive, peek, the dead-letter listing)
stops adding them at --max-response bytes, and carries one at least.

--max-message-bytes raises the largest message the store takes (1 MiB by
default, 16 MiB at most); the request body limit (--max-body) grows with
it, to carry such a message in JSON (base64), unless --max-body is given.

The web dashboard is at /ui (the same keys: one is asked for once per
browser tab).

GET /metrics serves the Prometheus metrics of every queue (see
docs/operations.md, "Metrics"). It needs an admin key over every queue,
unless --public-metrics opens it to any caller that reaches --addr.

--inbound NAME=QUEUE takes the Standard Webhooks of a provider at POST
/v1/inbound/NAME into QUEUE, exactly once by webhook-id: no access key, the
signature is the authentication. Its whsec_ secrets (several while the
provider rotates) come from --inbound-secret-file NAME=FILE, one per line,
or from the environment variable MQLITE_INBOUND_SECRET_NAME (NAME in
capitals, '.' and '-' as '_'), never from the command line. The queue's
dedup window must be twice --inbound-tolerance or more, and cover
--inbound-retry-horizon (3 days by default, as long as the common providers
retry: a retry past the window would be a second message); serve refuses
to start otherwise. The bodies held at once are bounded by
--inbound-max-held (and --inbound-max-held-per-source): past it a webhook
is answered 503 with Retry-After before its body is read (docs/relay.md,
"Into the file").

With --standby, serve listens at once but waits for the file while another
process holds it: /healthz answers 200, /readyz and the API 503 (reason
"standby"). When the primary stops or dies, the standby takes the file within
milliseconds, recovers its leases and serves (docs/operations.md, "Hot
standby").`,
		Example: `  mqlite keys create --role admin --queue '*' --db app.db
  mqlite serve --db app.db --addr 127.0.0.1:7420
  mqlite serve --db app.db --addr :7443 --tls-cert cert.pem --tls-key key.pem --backup-dir /var/backups/mqlite
  mqlite serve --db app.db --addr 127.0.0.1:7421 --standby
  mqlite serve --db app.db --inbound payments=payments --inbound-secret-file payments=payments.secret`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.db == "" {
				return usagef("serve needs --db FILE")
			}
			if (cert == "") != (keyFile == "") {
				return usagef("give both --tls-cert and --tls-key, or neither")
			}
			if err := fitBody(&cfg.MaxBodyBytes, cmd.Flags().Changed("max-body"), maxMessage); err != nil {
				return err
			}
			var err error
			if cfg.Inbound, err = in.resolve(os.Getenv); err != nil {
				return err
			}
			cfg.MaxInboundBytes = in.maxHeld
			// The certificate is loaded before anything is said or opened:
			// a bad one fails here, not after "serving on https://".
			if cert != "" {
				if _, err := tls.LoadX509KeyPair(cert, keyFile); err != nil {
					return err
				}
			}
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
			ctx := cmd.Context()
			scheme := "http"
			if cert != "" {
				scheme = "https"
			}
			// The limits are checked before the port is taken: a bad one is
			// a usage error whether or not the address is free.
			if err := cfg.Validate(); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			if cert == "" && !loopback(ln.Addr()) {
				if !plainHTTP {
					return errors.Join(usagef("plain HTTP on %s would carry every access key in clear text: "+
						"give --tls-cert and --tls-key, listen on loopback, or say --allow-plain-http", ln.Addr()), ln.Close())
				}
				fmt.Fprintf(g.stderr, "mqlite: WARNING: serving plain HTTP on %s: every request carries its access key in clear text\n", ln.Addr())
			}
			opts := mqlite.Config{Logger: cfg.Logger, WaitForLock: standby, MaxMessageBytes: maxMessage}
			var st *mqlite.Store
			if standby {
				fmt.Fprintf(g.stdout, "mqlite broker standby for %s on %s://%s\n", g.where(), scheme, ln.Addr())
				st, err = openStandby(ctx, ln.(*net.TCPListener), g.db, opts, cert, keyFile)
				if err == nil {
					g.announce(st)
				}
			} else {
				st, err = g.openStore(ctx, createStore, opts)
			}
			if err != nil {
				err = errors.Join(err, ln.Close())
				if standby && ctx.Err() != nil {
					return nil // stopped while waiting
				}
				return err
			}
			cfg.Store = st
			srv, err := broker.New(cfg)
			if err != nil {
				return errors.Join(usageError{err}, st.Close(), ln.Close())
			}
			g.warnNoKeys(ctx, st)
			// The first line ends with the URL (scripts read it there).
			fmt.Fprintf(g.stdout, "mqlite broker serving %s on %s://%s\n", g.where(), scheme, ln.Addr())
			fmt.Fprintf(g.stdout, "mqlite dashboard on %s://%s/ui\n", scheme, ln.Addr())
			if cert != "" {
				err = srv.ServeTLS(cmd.Context(), ln, cert, keyFile)
			} else {
				err = srv.Serve(cmd.Context(), ln)
			}
			fmt.Fprintln(g.stdout, "mqlite broker stopped")
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", DefaultAddr, "the `host:port` to listen on")
	f.StringVar(&cert, "tls-cert", "", "the TLS certificate `file` (PEM)")
	f.StringVar(&keyFile, "tls-key", "", "the TLS private key `file` (PEM)")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body", broker.DefaultMaxBodyBytes, "the largest request body, in bytes (grows to carry --max-message-bytes unless given)")
	f.IntVar(&maxMessage, "max-message-bytes", mqlite.DefaultMaxMessageBytes,
		fmt.Sprintf("the largest message, body and metadata, in bytes (at most %d)", mqlite.MaxMessageBytesLimit))
	f.IntVar(&cfg.MaxBatch, "max-batch", broker.DefaultMaxBatch, "the most messages or locks in one batched request")
	f.DurationVar(&cfg.MaxWait, "max-wait", broker.DefaultMaxWait, "the longest a receive may wait")
	f.IntVar(&cfg.MaxLongPolls, "max-long-polls", broker.DefaultMaxLongPolls, "the most receives waiting at once")
	f.IntVar(&cfg.MaxLongPollsPerKey, "max-long-polls-per-key", 0, "the most receives of one access key waiting at once (default a quarter of --max-long-polls; -1: no share)")
	f.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", broker.DefaultReadHeaderTimeout, "the time to read a request's headers")
	f.DurationVar(&cfg.ReadTimeout, "read-timeout", broker.DefaultReadTimeout, "the time to read a whole request")
	f.DurationVar(&cfg.WriteTimeout, "write-timeout", 0, "the time to write a response (default --max-wait + 30s)")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", broker.DefaultIdleTimeout, "how long an idle keep-alive connection stays open")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", broker.DefaultDrainTimeout, "how long a shutdown waits for requests in flight")
	f.BoolVar(&cfg.PublicMetrics, "public-metrics", false, "serve GET /metrics without an access key (for a Prometheus on a private network)")
	f.BoolVar(&plainHTTP, "allow-plain-http", false, "serve plain HTTP on an address other than loopback: access keys then cross the network in clear text")
	f.StringVar(&cfg.BackupDir, "backup-dir", "", "the `folder` POST /v1/backup writes into (default: remote backups off)")
	f.Int64Var(&cfg.MaxResponseBytes, "max-response", broker.DefaultMaxResponseBytes, "the byte budget of an answer that carries messages (-1: none)")
	f.Int64Var(&cfg.MaxAnswerBytes, "max-answers", broker.DefaultMaxAnswerBytes, "the byte budget of all the answers that carry messages at once (-1: none)")
	f.IntVar(&cfg.MaxCommitRecords, "max-commit-records", broker.DefaultMaxCommitRecords, "the most idempotency records of POST /v1/commit one access key keeps (the oldest dropped)")
	f.BoolVar(&debug, "debug", false, "log every request (never the keys)")
	f.BoolVar(&standby, "standby", false, "wait for the file while another process holds it, then serve (hot standby)")
	in.add(f)
	return cmd
}

// bodyFor is the request body that carries one message of n bytes: its
// body in base64 (4 bytes for every 3) and room for the JSON around it.
func bodyFor(n int) int64 { return int64(n+2)/3*4 + 64<<10 }

// fitBody checks --max-message-bytes and makes the request body limit
// (maxBody, given on the command line when given) carry such a message:
// a limit not given grows to it; one given too small is a usage error.
func fitBody(maxBody *int64, given bool, maxMessage int) error {
	if maxMessage <= 0 || maxMessage > mqlite.MaxMessageBytesLimit {
		return usagef("--max-message-bytes %d: want 1 to %d", maxMessage, mqlite.MaxMessageBytesLimit)
	}
	need := bodyFor(maxMessage)
	switch {
	case !given:
		*maxBody = max(*maxBody, need)
	case *maxBody < need:
		return usagef("--max-body %d cannot carry a message of --max-message-bytes %d: give at least %d, or leave --max-body out",
			*maxBody, maxMessage, need)
	}
	return nil
}

// loopback reports whether addr is a loopback address, where a key sent in
// clear text never leaves the machine. Every interface (0.0.0.0, ::) is not.
func loopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// warnNoKeys says on stderr, when st has no valid access key, that every
// request will be refused and how to create a key: a broker started on a
// new store would otherwise answer 401 to everything without a word.
func (g *globals) warnNoKeys(ctx context.Context, st *mqlite.Store) {
	ks, err := keys.List(ctx, st)
	if err != nil {
		return // the broker reports a store it cannot read on every request
	}
	for _, k := range ks {
		if k.RevokedAt.IsZero() {
			return
		}
	}
	fmt.Fprintf(g.stderr, "mqlite: WARNING: %s has no access key, so the broker refuses every request (401).\n"+
		"  Stop it and create one (shown once): mqlite keys create --role admin --queue '*' --db %s\n", g.where(), g.where())
}
