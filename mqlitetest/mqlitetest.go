// Package mqlitetest helps the tests of applications that use mqlite: a
// store in a temporary folder with a fake clock (NewStore), assertions
// that a transaction sent a message (RequireSent) or inserted a job of a
// kind with its arguments (RequireInserted), failing with a readable
// diff, and WorkUntilIdle, which runs a jobs.Workers until its queues have
// nothing left to do now.
package mqlitetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/driver"
	"github.com/mqlite/mqlite/internal/fakeclock"
	"github.com/mqlite/mqlite/jobs"
	"github.com/mqlite/mqlite/outbox"
)

// Start is where a new fake Clock stands: fixed, so tests repeat.
var Start = fakeclock.Start

// Clock is a fake mqlite.Clock that moves only when told to (Now, Advance,
// Set). It is safe for concurrent use.
type Clock = fakeclock.Clock

// NewClock returns a fake clock set to Start.
func NewClock() *Clock { return fakeclock.New() }

// NewStore opens a store on a new file in t.TempDir() with a fake Clock
// (cfg.Clock is replaced by it) and closes it when the test ends. The
// store's background sweeps are off unless cfg sets one of their
// intervals: they tick on the wall clock and would change rows under a
// test at random moments.
func NewStore(t testing.TB, cfg mqlite.Config) (*mqlite.Store, *Clock) {
	t.Helper()
	clock := NewClock()
	cfg.Clock = clock
	if cfg.ReaperInterval == 0 && cfg.SchedulerInterval == 0 && cfg.TTLInterval == 0 &&
		cfg.JanitorInterval == 0 && cfg.RetentionInterval == 0 && cfg.ScheduleInterval == 0 {
		cfg.ReaperInterval, cfg.SchedulerInterval, cfg.TTLInterval = -1, -1, -1
		cfg.JanitorInterval, cfg.RetentionInterval, cfg.ScheduleInterval = -1, -1, -1
	}
	st, err := mqlite.Open(context.Background(), filepath.Join(t.TempDir(), "app.db"), cfg)
	if err != nil {
		t.Fatalf("mqlitetest: open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("mqlitetest: close store: %v", err)
		}
	})
	return st, clock
}

// Sent is what RequireSent looks for: a message whose fields equal the set
// ones (a nil Body, an empty string, a nil map match anything; Properties
// match when each given key has its value).
type Sent struct {
	Body       []byte
	MessageID  string
	GroupID    string
	Subject    string
	Properties map[string]string
}

// RequireSent fails t unless queue holds a live message (waiting or
// running) that matches want, and returns the newest that does. db is
// where to look: inside the transaction that sent it (a *sql.Tx on
// Store.DB(), tx.SQL()) or, after the commit, Store.DB(). The failure
// lists the messages of the queue with a diff against the closest one.
func RequireSent(t testing.TB, db outbox.Execer, queue string, want Sent) mqlite.Message {
	t.Helper()
	msgs := live(t, db, queue)
	for i := len(msgs) - 1; i >= 0; i-- {
		if matches(msgs[i], want) {
			return msgs[i]
		}
	}
	t.Fatalf("mqlitetest: no message of queue %q matches\n%s", queue, report(describeSent(want), msgs, describeMsg))
	return mqlite.Message{}
}

// RequireInserted fails t unless a live job of want's kind (waiting or
// running) is in opts' queue (jobs.DefaultQueue for nil) with arguments
// equal to want's as JSON, and returns the newest such job's message. db
// is as RequireSent's. The failure shows the jobs of the kind there with a
// diff of their arguments against want's.
func RequireInserted(t testing.TB, db outbox.Execer, want jobs.JobArgs, opts *jobs.InsertOpts) mqlite.Message {
	t.Helper()
	queue := jobs.DefaultQueue
	if opts != nil && opts.Queue != "" {
		queue = opts.Queue
	}
	body, err := json.Marshal(want)
	if err != nil {
		t.Fatalf("mqlitetest: encoding the wanted arguments: %v", err)
	}
	wantJSON := pretty(body)
	var kind []mqlite.Message
	for _, m := range live(t, db, queue) {
		if m.Properties[jobs.PropKind] == want.Kind() {
			kind = append(kind, m)
		}
	}
	for i := len(kind) - 1; i >= 0; i-- {
		if pretty(kind[i].Body) == wantJSON {
			return kind[i]
		}
	}
	if len(kind) == 0 {
		t.Fatalf("mqlitetest: no job of kind %q in queue %q", want.Kind(), queue)
	}
	t.Fatalf("mqlitetest: no job of kind %q in queue %q has the arguments\n%s", want.Kind(), queue,
		report(wantJSON, kind, func(m mqlite.Message) string { return pretty(m.Body) }))
	return mqlite.Message{}
}

// live reads every live message of queue on db, in seq order.
func live(t testing.TB, db outbox.Execer, queue string) []mqlite.Message {
	t.Helper()
	var out []mqlite.Message
	req := driver.FindRequest{Queue: queue, Max: 1000, ScanMax: mqlite.MaxFindScan}
	for {
		page, err := driver.Of(db).Find(context.Background(), db, req)
		if err != nil {
			t.Fatalf("mqlitetest: reading queue %q: %v", queue, err)
		}
		for _, r := range page.Rows {
			m := mqlite.Message{Queue: queue, Seq: r.Seq, Body: r.Body, MessageID: r.MessageID,
				Subject: r.Subject, DeliveryCount: int(r.DeliveryCount), State: mqlite.State(r.State)}
			if r.GroupID != nil {
				m.GroupID = *r.GroupID
			}
			if r.Properties != "" {
				if err := json.Unmarshal([]byte(r.Properties), &m.Properties); err != nil {
					t.Fatalf("mqlitetest: properties of message %d: %v", r.Seq, err)
				}
			}
			out = append(out, m)
		}
		if page.NextSeq == 0 {
			return out
		}
		req.FromSeq = page.NextSeq
	}
}

func matches(m mqlite.Message, w Sent) bool {
	if w.Body != nil && !bytes.Equal(m.Body, w.Body) ||
		w.MessageID != "" && m.MessageID != w.MessageID ||
		w.GroupID != "" && m.GroupID != w.GroupID ||
		w.Subject != "" && m.Subject != w.Subject {
		return false
	}
	for k, v := range w.Properties {
		if got, ok := m.Properties[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func describeSent(w Sent) string {
	return describe(w.Body, w.MessageID, w.GroupID, w.Subject, w.Properties)
}

func describeMsg(m mqlite.Message) string {
	return describe(m.Body, m.MessageID, m.GroupID, m.Subject, m.Properties)
}

// describe writes a message's fields one a line, for a diff.
func describe(body []byte, id, group, subject string, props map[string]string) string {
	var b strings.Builder
	if body != nil {
		fmt.Fprintf(&b, "body: %s\n", pretty(body))
	}
	for _, f := range []struct{ k, v string }{{"message_id", id}, {"group_id", group}, {"subject", subject}} {
		if f.v != "" {
			fmt.Fprintf(&b, "%s: %q\n", f.k, f.v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&b, "property %s: %q\n", k, props[k])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// pretty is b indented when it is JSON, else quoted.
func pretty(b []byte) string {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") == nil {
		return out.String()
	}
	return fmt.Sprintf("%q", b)
}

// report lists what was found and diffs want against the closest of them
// (the one with the fewest differing lines).
func report(want string, found []mqlite.Message, show func(mqlite.Message) string) string {
	if len(found) == 0 {
		return "the queue has no live message"
	}
	best, bestN := "", -1
	var b strings.Builder
	fmt.Fprintf(&b, "found %d:\n", len(found))
	for _, m := range found {
		s := show(m)
		lines := strings.Split(s, "\n")
		for i := range lines {
			lines[i] = strings.TrimSpace(lines[i])
		}
		fmt.Fprintf(&b, "  seq %d: %s\n", m.Seq, strings.Join(lines, " "))
		if d := Diff(want, s); bestN < 0 || strings.Count(d, "\n") < bestN {
			best, bestN = d, strings.Count(d, "\n")
		}
	}
	fmt.Fprintf(&b, "diff against the closest (- want, + got):\n%s", best)
	return b.String()
}

// Diff is a line diff of want and got: each line of either, "-" for want's
// only, "+" for got's only, " " for both.
func Diff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// lcs[i][j] is the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out.WriteString("  " + a[i] + "\n")
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("- " + a[i] + "\n")
			i++
		default:
			out.WriteString("+ " + b[j] + "\n")
			j++
		}
	}
	return out.String()
}

// IdleTimeout bounds WorkUntilIdle: past it the test fails.
const IdleTimeout = 30 * time.Second

// WorkUntilIdle runs w's workers on each of queues (jobs.Workers.Run, one
// Loop per queue, with cfg) until none of them has a message a worker
// could take or holds now: what is left is scheduled for later by the
// store's clock (a retry's backoff, a snooze, a job scheduled ahead), dead
// or deferred. Move the fake clock and call it again to run those. It
// fails t past IdleTimeout or when a Loop fails. cfg's Logger defaults to
// one that discards. A queue that does not exist fails t.
func WorkUntilIdle(t testing.TB, st *mqlite.Store, w *jobs.Workers, cfg consumer.LoopConfig, queues ...string) {
	t.Helper()
	if len(queues) == 0 {
		queues = []string{jobs.DefaultQueue}
	}
	for _, q := range queues {
		if _, err := st.GetQueue(context.Background(), q); err != nil {
			t.Fatalf("mqlitetest: queue %q: %v", q, err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, len(queues))
	for _, q := range queues {
		go func() { errc <- w.Run(ctx, st, q, cfg) }()
	}
	stop := func() []error {
		cancel()
		var errs []error
		for range queues {
			if err := <-errc; err != nil {
				errs = append(errs, err)
			}
		}
		return errs
	}
	deadline := time.Now().Add(IdleTimeout)
	for {
		n, err := driver.Of(st.DB()).Busy(context.Background(), st.DB(), queues)
		if err != nil {
			stop()
			t.Fatalf("mqlitetest: reading the queues: %v", err)
		}
		if n == 0 {
			if errs := stop(); len(errs) > 0 {
				t.Fatalf("mqlitetest: workers: %v", errs)
			}
			return
		}
		select {
		case err := <-errc: // a Loop returned before it was stopped
			errc <- err
			errs := stop()
			t.Fatalf("mqlitetest: workers stopped: %v", errs)
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("mqlitetest: queues %v still had %d messages to work after %v", queues, n, IdleTimeout)
		}
	}
}
