package main

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	const want = `placed: 3 orders, 3 events (the ghost order rolled back with its event)
poisoned order 3 (cursed amulet): cannot ship a cursed amulet
shipped order 1 (book) after 1 attempt(s)
shipped order 2 (lamp) after 2 attempt(s)
left in order.placed: 0
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
