package conformance_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/conformance"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// loopsOff turns every background loop off: the kit moves a fake clock,
// and a loop ticking on the wall clock would change rows under it. Every
// promise must hold without a sweep.
func loopsOff(o mqlite.Config) mqlite.Config {
	o.ReaperInterval, o.SchedulerInterval, o.TTLInterval = -1, -1, -1
	o.JanitorInterval, o.RetentionInterval = -1, -1
	return o
}

// txFunc is conformance.Instance.Tx.
type txFunc = func(ctx context.Context, fn func(conformance.SendFunc) error) error

// effectsFunc is conformance.Instance.EffectsTx.
type effectsFunc = func(ctx context.Context, fn func(conformance.EffectsOps) error) error

// embedded opens *mqlite.Store instances for the kit, each on a fresh file
// with internal/testdb's fake clock (or the wall clock when the subtest
// asks) and the loops off; tx says how a transaction is run and sent into,
// fx how one also settles.
func embedded(tx func(st *mqlite.Store) txFunc, fx func(st *mqlite.Store) effectsFunc) conformance.Harness {
	return embeddedOn(func(t *testing.T) string { return filepath.Join(t.TempDir(), "mq.db") }, tx, fx)
}

// embeddedOn is embedded on the database where(t) names: a new SQLite
// file, or a new PostgreSQL database.
func embeddedOn(where func(t *testing.T) string, tx func(st *mqlite.Store) txFunc, fx func(st *mqlite.Store) effectsFunc) conformance.Harness {
	return conformance.Harness{Open: func(t *testing.T, cfg conformance.Config) conformance.Instance {
		var fake conformance.Clock
		var clock mqlite.Clock = mqlite.SystemClock{}
		if !cfg.WallClock {
			c := testdb.NewClock()
			fake, clock = c, c
		}
		opts := loopsOff(mqlite.Config{Clock: clock})
		path := where(t)
		open := func() *mqlite.Store {
			st, err := mqlite.Open(context.Background(), path, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		}
		st := open()
		return conformance.Instance{
			Store: st,
			Clock: fake,
			Tx:    func(ctx context.Context, fn func(conformance.SendFunc) error) error { return tx(st)(ctx, fn) },
			EffectsTx: func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
				return fx(st)(ctx, fn)
			},
			Inbound: func(t *testing.T, sources []inbound.Sender) (http.Handler, error) {
				h, err := inbound.New(context.Background(), st, inbound.Config{Senders: sources})
				if err != nil {
					return nil, err
				}
				mux := http.NewServeMux()
				mux.Handle("POST /v1/inbound/{source}", h)
				return mux, nil
			},
			// Close leaves every lease in the file, as a killed process
			// does; the next Open recovers them. (The SIGKILL itself is
			// internal/crashtest's.)
			Restart: func(t *testing.T) conformance.Store {
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				st = open()
				return st
			},
		}
	}}
}

// viaStoreTx sends with outbox.SendBatch on Store.Tx's *sql.Tx.
func viaStoreTx(st *mqlite.Store) txFunc {
	return func(ctx context.Context, fn func(conformance.SendFunc) error) error {
		return st.Tx(ctx, func(tx *mqlite.Tx) error {
			return fn(func(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
				return outbox.SendBatch(tx.Context(), tx.SQL(), queue, msgs)
			})
		})
	}
}

// effectsOn returns the EffectsOps of the transaction tx: outbox.SendBatch,
// consumer.CompleteTx and consumer.RejectTx on it.
func effectsOn(ctx context.Context, tx outbox.Execer) conformance.EffectsOps {
	return conformance.EffectsOps{
		Send: func(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
			return outbox.SendBatch(ctx, tx, queue, msgs)
		},
		Complete: func(l mqlite.Lock) error { return consumer.CompleteTx(ctx, tx, l) },
		Reject: func(l mqlite.Lock, reason, description string) error {
			return consumer.RejectTx(ctx, tx, l, reason, description)
		},
	}
}

// effectsViaStoreTx settles and sends on Store.Tx's *sql.Tx.
func effectsViaStoreTx(st *mqlite.Store) effectsFunc {
	return func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
		return st.Tx(ctx, func(tx *mqlite.Tx) error { return fn(effectsOn(tx.Context(), tx.SQL())) })
	}
}

// effectsViaSqlx settles and sends on a *sqlx.Tx begun on Store.DB(),
// through mqlite.InTx.
func effectsViaSqlx(st *mqlite.Store) effectsFunc {
	db := sqlx.NewDb(st.DB(), "sqlite")
	return func(ctx context.Context, fn func(conformance.EffectsOps) error) error {
		return mqlite.InTx(ctx, db.BeginTxx, func(ctx context.Context, tx *sqlx.Tx) error { return fn(effectsOn(ctx, tx)) })
	}
}

// viaSqlx sends with outbox.SendBatch on a *sqlx.Tx begun on Store.DB().
func viaSqlx(st *mqlite.Store) txFunc {
	db := sqlx.NewDb(st.DB(), "sqlite")
	return func(ctx context.Context, fn func(conformance.SendFunc) error) error {
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		err = fn(func(queue string, msgs ...outbox.Message) ([]outbox.Result, error) {
			return outbox.SendBatch(ctx, tx, queue, msgs)
		})
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
}

// TestConformance runs the kit against the embedded store, sending through
// Store.Tx (database/sql).
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, embedded(viaStoreTx, effectsViaStoreTx))
}

// TestConformanceSqlx runs the kit's sending subtests (transactions,
// de-duplication, wake-ups on commit and rollback, topics) against the embedded
// store, sending through a *sqlx.Tx on Store.DB(). The other areas do not
// depend on how a message was sent and run once, in TestConformance, which
// keeps the kit near half a minute under -race.
func TestConformanceSqlx(t *testing.T) {
	t.Parallel()
	h := embedded(viaSqlx, effectsViaSqlx)
	open := h.Open
	h.Open = func(t *testing.T, cfg conformance.Config) conformance.Instance {
		area := area(t)
		if area != "Transaction" && area != "Dedup" && area != "Wake" && area != "Topics" && area != "Effects" &&
			area != "GroupCommit" {
			t.Skip("sqlx runs the sending subtests only; TestConformance runs the rest")
		}
		return open(t, cfg)
	}
	conformance.Run(t, h)
}

// area is the kit's area a subtest belongs to: the second part of its name.
func area(t *testing.T) string { return strings.Split(t.Name(), "/")[1] }
