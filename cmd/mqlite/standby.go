package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
)

// openStandby opens the store at path with opts (WaitForLock set) while
// serving broker.StandbyHandler on ln, over TLS when certFile is given.
// When the open returns, the standby server stops and ln, still open, is
// the broker's: a connection that arrives meanwhile waits in ln's backlog
// for the broker to accept it.
func openStandby(ctx context.Context, ln *net.TCPListener, path string, opts mqlite.Config, certFile, keyFile string) (*mqlite.Store, error) {
	srv := &http.Server{Handler: broker.StandbyHandler(), ReadHeaderTimeout: broker.DefaultReadHeaderTimeout}
	served := make(chan error, 1)
	go func() {
		pl := pausedListener{ln}
		if certFile != "" {
			served <- srv.ServeTLS(pl, certFile, keyFile)
		} else {
			served <- srv.Serve(pl)
		}
	}()
	st, err := mqlite.Open(ctx, path, opts)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	errStop := srv.Shutdown(sctx)
	if errServe := <-served; !errors.Is(errServe, http.ErrServerClosed) {
		errStop = errors.Join(errStop, errServe)
	}
	errStop = errors.Join(errStop, ln.SetDeadline(time.Time{}))
	if errStop != nil {
		if st != nil {
			errStop = errors.Join(errStop, st.Close())
		}
		return nil, errors.Join(err, errStop)
	}
	return st, err
}

// pausedListener is ln for the standby server: its Close only interrupts
// the Accept in progress (a deadline in the past), so that the standby
// server stops accepting without closing the socket the broker serves on
// next.
type pausedListener struct{ *net.TCPListener }

func (l pausedListener) Close() error { return l.SetDeadline(time.Now()) }
