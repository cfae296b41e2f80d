package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// An outsider's view of LoopTx over the client with the README's handler,
// whose step asks for SQL: a programming error that LoopTx must stop on
// at once, never repeating the handler's external call, dead-lettering the
// message with the reason, and returning an error matching ErrNoSQL.
func TestOutsideLoopTxNoSQLStops(t *testing.T) {
	for _, conc := range []int{1, 4} {
		for _, wrap := range []bool{false, true} {
			t.Run(fmt.Sprintf("concurrency=%d/wrapped=%v", conc, wrap), func(t *testing.T) {
				t.Parallel()
				b := testdb.OpenQueue(t, "orders", mqlite.QueueOptions{})
				b.Queue(t, "shipped", mqlite.QueueOptions{})
				url, key := serve(t, b, broker.Config{})
				c := newClient(t, url, key, b.Clock)
				for i := range 20 {
					if _, err := outbox.Send(ctx, b.Store, "orders", outbox.Message{Body: []byte(fmt.Sprint("order-", i)), MessageID: fmt.Sprint("order-", i)}); err != nil {
						t.Fatal(err)
					}
				}
				var mu sync.Mutex
				calls := map[string]int{} // external calls per message id
				var log strings.Builder
				var logMu sync.Mutex
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				err := consumer.LoopTx(cctx, c, "orders", func(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
					mu.Lock()
					calls[m.MessageID]++
					mu.Unlock()
					return func(ctx context.Context, tx consumer.Tx) error {
						sqlTx, err := consumer.SQL(tx)
						if err != nil {
							if wrap {
								return fmt.Errorf("shipments: %w", err)
							}
							return err
						}
						_, err = sqlTx.ExecContext(ctx, `SELECT 1`)
						return err
					}, nil
				}, consumer.LoopConfig{Concurrency: conc, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &log}, nil))})
				if !errors.Is(err, consumer.ErrNoSQL) {
					t.Fatalf("LoopTx: %v, want ErrNoSQL", err)
				}
				if cctx.Err() != nil {
					t.Fatalf("LoopTx returned only when its ctx ended: %v", err)
				}
				mu.Lock()
				total := 0
				for id, n := range calls {
					if n != 1 {
						t.Errorf("%s: %d external calls, want 1", id, n)
					}
					total += n
				}
				mu.Unlock()
				t.Logf("external calls: %d", total)
				if total > conc+conc { // running handlers and the prefetched ones
					t.Errorf("%d external calls before LoopTx stopped, want at most %d", total, 2*conc)
				}
				dead, err := b.Store.PeekDeadLetters(ctx, "orders", mqlite.PeekParams{Max: 100})
				if err != nil {
					t.Fatal(err)
				}
				if len(dead) == 0 {
					t.Fatalf("no dead letter: the message whose step failed was not dead-lettered")
				}
				for _, d := range dead {
					if !strings.Contains(d.DeadLetterReason+" "+d.DeadLetterDescription, "SQL") {
						t.Errorf("dead letter %s: reason %q, description %q: no mention of SQL", d.MessageID, d.DeadLetterReason, d.DeadLetterDescription)
					}
				}
				if len(dead) != total {
					t.Errorf("%d dead letters for %d handlers run, want one each", len(dead), total)
				}
				s, err := b.Store.Stats(ctx, "shipped")
				if err != nil {
					t.Fatal(err)
				}
				if s.Active != 0 {
					t.Errorf("%d shipped messages, want 0", s.Active)
				}
				logMu.Lock()
				if !strings.Contains(log.String(), "SQL") {
					t.Errorf("the log does not say why LoopTx stopped:\n%s", log.String())
				}
				logMu.Unlock()
			})
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
