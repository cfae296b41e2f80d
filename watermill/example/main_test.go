package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

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

// TestRunReportBeforeAck widens the window between a handler's return (its
// report is out) and the Router's ack of its event: run must not close the Router (which gives
// back what is not acked) until every event is acked.
func TestRunReportBeforeAck(t *testing.T) {
	beforeAck = func() { time.Sleep(20 * time.Millisecond) }
	defer func() { beforeAck = nil }()
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasSuffix(got, "left in order.placed: 0\n") {
		t.Errorf("output:\n%s\nwant it to end with: left in order.placed: 0", got)
	}
}
