// Command service is a small order service to copy: an HTTP API that writes
// an order and its event in one transaction, a consumer.LoopTx that ships
// each order exactly once (the shipment row and the event's completion
// commit in one transaction), a relay that
// POSTs the same events to a signed webhook, Prometheus metrics at
// /metrics, and a clean stop on SIGTERM or SIGINT.
//
// With PAYMENTS_WEBHOOK_SECRET set (whsec_ secrets, space-separated while
// the provider rotates), it also takes a payment provider's signed
// webhooks at POST /webhooks/payments into a queue, exactly once by
// webhook-id (package inbound); a second LoopTx writes each payment's row
// and its "payment.received" event in the transaction that completes the
// webhook, and the relay POSTs that event on.
//
//	PAYMENTS_WEBHOOK_SECRET=whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD \
//	go run -C examples/service . --db orders.db --addr 127.0.0.1:8080 \
//		--webhook-url http://127.0.0.1:9000/hook --secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
//	curl -X POST -d '{"item":"book","total_cents":1299}' http://127.0.0.1:8080/orders
//
// Its tests start it as a process: one sends orders, SIGTERMs it mid-load,
// starts it again and finds every order shipped once and relayed; the
// other sends signed payment webhooks, with a provider's retries, and
// finds each payment recorded once and its event relayed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/webhook"
)

// The queues: one for the in-process handler, one for the relay. Each order
// sends its event to both in its transaction.
const (
	eventsQueue  = "order-events"
	webhookQueue = "order-events.webhook"
	// paymentsQueue holds the payment provider's webhooks, by webhook-id.
	paymentsQueue = "payments.in"
)

// paymentsRetryHorizon is how long the payment provider retries a
// webhook: the payments queue remembers each webhook-id this long, so
// that a late retry is still a duplicate.
const paymentsRetryHorizon = 72 * time.Hour

// config is what the flags and the environment give.
type config struct {
	db, addr, webhookURL, secret string
	// paymentSecrets verify the payment provider's webhooks (none: the
	// endpoint is off).
	paymentSecrets []string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.db, "db", "orders.db", "the store's file")
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "where to serve the API and /metrics")
	flag.StringVar(&cfg.webhookURL, "webhook-url", "", "where the relay POSTs each order's event (empty: no relay)")
	flag.StringVar(&cfg.secret, "secret", "", "the whsec_ secret that signs the webhook requests")
	flag.Parse()
	cfg.paymentSecrets = strings.Fields(os.Getenv("PAYMENTS_WEBHOOK_SECRET")) // never a flag: ps shows flags
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, cfg, os.Stdout, log); err != nil {
		log.Error("service", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then stops everything it started, in order:
// no new requests, the consumer and the relay settle what they hold, the
// store closes.
func run(ctx context.Context, cfg config, stdout io.Writer, log *slog.Logger) (err error) {
	st, err := mqlite.Open(ctx, cfg.db, mqlite.Config{Logger: log})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	if err := setup(ctx, st); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	relayMetrics := metrics.NewRelayObserver(nil)
	reg.MustRegister(metrics.NewCollector(st, nil), relayMetrics)

	var payments *inbound.Handler
	if len(cfg.paymentSecrets) > 0 {
		payments, err = inbound.New(ctx, st, inbound.Config{Logger: log, Senders: []inbound.Sender{{
			Name: "payments", Queue: paymentsQueue, Secrets: cfg.paymentSecrets, RetryHorizon: paymentsRetryHorizon,
		}}})
		if err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) { placeOrder(st, w, r) })
	mux.HandleFunc("GET /orders/stats", func(w http.ResponseWriter, r *http.Request) { orderStats(st, w, r) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if payments != nil {
		mux.Handle("POST /webhooks/{source}", payments)
		reg.MustRegister(payments)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("serve: %w", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := consumer.LoopTx(ctx, st, eventsQueue, ship, consumer.LoopConfig{Concurrency: 4, Logger: log})
		if err != nil {
			errs <- fmt.Errorf("consumer: %w", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := consumer.LoopTx(ctx, st, paymentsQueue, recordPayment, consumer.LoopConfig{Concurrency: 2, Logger: log})
		if err != nil {
			errs <- fmt.Errorf("payments: %w", err)
		}
	}()
	if cfg.webhookURL != "" {
		sink, err := webhook.New(webhook.Config{URL: cfg.webhookURL, Secrets: []string{cfg.secret}})
		if err != nil {
			return err
		}
		defer sink.Close()
		r, err := relay.New(st, webhookQueue, sink, relay.Config{Logger: log, Observer: relayMetrics.Sink("webhook")})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				errs <- fmt.Errorf("relay: %w", err)
			}
		}()
	}
	fmt.Fprintf(stdout, "serving on http://%s\n", ln.Addr())

	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	// Stop taking orders first; requests in flight finish (up to 10s).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = errors.Join(err, srv.Shutdown(sctx))
	wg.Wait() // the Loop and the relay return once ctx is done and what they held is settled
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	fmt.Fprintln(stdout, "stopped")
	return err
}

// setup creates the business tables and the queues, on the first run.
func setup(ctx context.Context, st *mqlite.Store) error {
	_, err := st.DB().ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, total_cents INTEGER NOT NULL);
		CREATE TABLE IF NOT EXISTS shipments (order_id INTEGER PRIMARY KEY REFERENCES orders (id));
		CREATE TABLE IF NOT EXISTS payments (webhook_id TEXT PRIMARY KEY, order_id INTEGER NOT NULL, amount_cents INTEGER NOT NULL)`)
	if err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	// A relayed queue keeps failed sends for a long outage of the far side.
	// The payments queue remembers a webhook-id as long as the provider
	// retries (inbound.New checks it).
	for q, opts := range map[string]mqlite.QueueOptions{
		eventsQueue:   {},
		webhookQueue:  {MaxDeliveryCount: 10_000},
		paymentsQueue: {DedupWindow: paymentsRetryHorizon},
	} {
		if err := st.CreateQueue(ctx, q, opts); err != nil && !errors.Is(err, mqlite.ErrQueueExists) {
			return err
		}
	}
	return nil
}

// order is a row of orders and the body of its event.
type order struct {
	ID         int64  `json:"order_id"`
	Item       string `json:"item"`
	TotalCents int64  `json:"total_cents"`
}

// placeOrder writes the order and its event to both queues in one
// transaction: the event exists if and only if the order does.
func placeOrder(st *mqlite.Store, w http.ResponseWriter, r *http.Request) {
	var o order
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&o); err != nil || o.Item == "" {
		http.Error(w, "want {\"item\": ..., \"total_cents\": ...}", http.StatusBadRequest)
		return
	}
	err := st.Tx(r.Context(), func(tx *mqlite.Tx) error {
		res, err := tx.SQL().ExecContext(tx.Context(), `INSERT INTO orders (item, total_cents) VALUES (?, ?)`, o.Item, o.TotalCents)
		if err != nil {
			return err
		}
		if o.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		body, err := json.Marshal(o)
		if err != nil {
			return err
		}
		for _, q := range []string{eventsQueue, webhookQueue} {
			msg := outbox.Message{Body: body, MessageID: fmt.Sprintf("order-%d", o.ID), Subject: "order.placed"}
			if _, err := outbox.SendOne(tx.Context(), tx.SQL(), q, msg); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(o)
}

// ship is the consumer.TxHandler of the events: slow work (a call to a
// carrier) would go here, before any transaction; the step it returns
// writes the shipment, and LoopTx commits it with the event's completion.
// A shipment exists exactly when its event is completed, so a redelivery
// (a crash, a lapsed lease) never ships twice and no table of processed
// ids is needed.
func ship(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
	var o order
	if err := json.Unmarshal(m.Body, &o); err != nil {
		return nil, consumer.Permanent(err)
	}
	return func(ctx context.Context, tx consumer.Tx) error {
		sqlTx, err := consumer.SQL(tx)
		if err != nil {
			return err
		}
		_, err = sqlTx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, o.ID)
		return err
	}, nil
}

// payment is the body of the provider's webhook.
type payment struct {
	OrderID     int64 `json:"order_id"`
	AmountCents int64 `json:"amount_cents"`
}

// recordPayment is the consumer.TxHandler of the provider's webhooks: its
// step writes the payment's row and stages its "payment.received" event
// for the relay, and LoopTx commits both with the webhook's completion. A
// provider's retry never got this far (the queue took its webhook-id
// once), and a redelivery after a crash finds nothing committed: each
// payment is recorded and announced once.
func recordPayment(ctx context.Context, m mqlite.Message) (consumer.TxStep, error) {
	var p payment
	if err := json.Unmarshal(m.Body, &p); err != nil || p.OrderID == 0 {
		return nil, consumer.Permanent(fmt.Errorf("not a payment: %v", err))
	}
	return func(ctx context.Context, tx consumer.Tx) error {
		sqlTx, err := consumer.SQL(tx)
		if err != nil {
			return err
		}
		_, err = sqlTx.ExecContext(ctx, `INSERT INTO payments (webhook_id, order_id, amount_cents) VALUES (?, ?, ?)`,
			m.MessageID, p.OrderID, p.AmountCents)
		if err != nil {
			return err
		}
		return tx.Send(ctx, webhookQueue, outbox.Message{Body: m.Body, MessageID: "payment-" + m.MessageID, Subject: "payment.received"})
	}, nil
}

// stats is the answer of GET /orders/stats.
type stats struct {
	Orders    int64 `json:"orders"`
	Shipments int64 `json:"shipments"`
	Payments  int64 `json:"payments"`
	// Pending counts the events not yet handled or relayed.
	Pending int64 `json:"pending"`
}

func orderStats(st *mqlite.Store, w http.ResponseWriter, r *http.Request) {
	var s stats
	// The queues first, then the rows: a shipment commits with its
	// event's completion, so when Pending reads 0 every order of that
	// moment has its shipment in the count read after it. The other order
	// could count a shipment-less order that completed in between.
	var err error
	for _, q := range []string{eventsQueue, webhookQueue, paymentsQueue} {
		var qs mqlite.QueueStats
		if qs, err = st.Stats(r.Context(), q); err != nil {
			break
		}
		s.Pending += qs.Active + qs.Scheduled + qs.Locked + qs.Deferred
	}
	if err == nil {
		err = st.DB().QueryRowContext(r.Context(), `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM shipments), (SELECT count(*) FROM payments)`).
			Scan(&s.Orders, &s.Shipments, &s.Payments)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}
