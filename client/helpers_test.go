package client_test

// Helpers of the client's tests: a store with queue "q", a broker over it
// on an httptest server, and a client of that broker on the store's clock.
// The peek-lock promises themselves run over the client in the conformance
// kit (conformance_test.go).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

const lease = 30 * time.Second

type bundle struct {
	*testdb.Bundle
	src *client.Client
}

func setup(t *testing.T, opts mqlite.QueueOptions) *bundle {
	t.Helper()
	t.Parallel()
	b := testdb.Open(t, mqlite.Config{})
	if opts.LockDuration == 0 {
		opts.LockDuration = lease
	}
	b.Queue(t, "q", opts)
	url, key := serve(t, b, broker.Config{})
	return &bundle{Bundle: b, src: newClient(t, url, key, b.Clock)}
}

func (b *bundle) send(t *testing.T, msgs ...outbox.Message) []int64 {
	t.Helper()
	var seqs []int64
	err := b.Store.Tx(context.Background(), func(tx *mqlite.Tx) error {
		for _, m := range msgs {
			if m.Body == nil {
				m.Body = []byte(fmt.Sprintf("body-%d-%s", len(seqs), m.MessageID))
			}
			seq, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", m)
			if err != nil {
				return err
			}
			seqs = append(seqs, seq)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return seqs
}

func seqsOf(msgs []mqlite.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.Seq
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var ctx = context.Background()

func (b *bundle) receive(t *testing.T, opts mqlite.ReceiveOptions) []mqlite.Message {
	t.Helper()
	msgs, err := b.src.Receive(context.Background(), "q", opts)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return msgs
}
