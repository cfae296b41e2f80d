package mqlite_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/mqlitetest"
	"github.com/mqlite/mqlite/outbox"
)

// An outsider's view of the text of a missing queue's error: it says so
// once, with the name, whichever call finds it missing.
func TestOutsideQueueNotFoundText(t *testing.T) {
	ctx := context.Background()
	st, _ := mqlitetest.NewStore(t, mqlite.Config{})
	if err := st.CreateQueue(ctx, "billing", mqlite.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	const want = `mqlite: queue not found: "biling"`
	calls := map[string]func() error{
		"Stats": func() error { _, err := st.Stats(ctx, "biling"); return err },
		"Send": func() error {
			_, err := outbox.Send(ctx, st, "biling", outbox.Message{Body: []byte("x")})
			return err
		},
		"Send of two": func() error {
			_, err := outbox.Send(ctx, st, "biling", outbox.Message{Body: []byte("x")}, outbox.Message{Body: []byte("y")})
			return err
		},
		"SendOne in a Tx": func() error {
			return st.Tx(ctx, func(tx *mqlite.Tx) error {
				_, err := outbox.SendOne(tx.Context(), tx.SQL(), "biling", outbox.Message{Body: []byte("x")})
				return err
			})
		},
		"Receive": func() error { _, err := st.Receive(ctx, "biling", mqlite.ReceiveOptions{}); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, mqlite.ErrQueueNotFound) {
			t.Errorf("%s: %v, want ErrQueueNotFound", name, err)
			continue
		}
		if err.Error() != want {
			t.Errorf("%s: %q, want %q", name, err.Error(), want)
		}
	}
}
