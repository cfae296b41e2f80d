package webhook_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
	"github.com/mqlite/mqlite/relay/webhook"
)

// A relay POSTs each message of a queue to a webhook, signed with the
// Standard Webhooks scheme; the receiver verifies each request with the
// same library and drops the webhook-ids it has seen.
func Example() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

	// The receiver: verify, then process once per webhook-id.
	verifier, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		log.Fatal(err)
	}
	received := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := verifier.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized) // 401: dead-lettered
			return
		}
		received <- fmt.Sprintf("verified %s: %s", r.Header.Get("webhook-id"), body)
	}))
	defer srv.Close()

	// The sender: a store with an outbox queue, and a relay to the receiver.
	dir, err := os.MkdirTemp("", "mqlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(dir, "app.db"), mqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateQueue(ctx, "events", mqlite.QueueOptions{}); err != nil {
		log.Fatal(err)
	}
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "events", outbox.Message{
			Body: []byte(`{"order":1,"status":"paid"}`), MessageID: "order-1-paid",
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	sink, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{secret}})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	r, err := relay.New(st, "events", sink, relay.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()

	fmt.Println(<-received)
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: verified order-1-paid: {"order":1,"status":"paid"}
}
