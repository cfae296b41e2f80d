//go:build ignore

// This program made store.db and expect.json, the fixture of the layout with
// guard token "mqlite-schema-12" (the history of failed deliveries: the
// column attempts; three group triggers on an update of a message's state,
// mqlite_group_release_on_leave, mqlite_group_rejoin and
// mqlite_group_handover, run for every message), at commit caf9688, the
// last commit that wrote that layout. It writes only under -update, and
// only with the code of that layout: at a later commit it refuses, since
// the point of the committed file is that the old code made it. To make it
// again:
//
//	git checkout caf9688 && go run ./schema/testdata/v12/make.go -update
//
// schema/upgrade_test.go opens a copy with today's code and checks that
// every row came through the upgrade.
//
// The store holds a row of every kind: queues with every option, messages in
// every state (active, scheduled, locked with its token and lease, deferred,
// dead-lettered with reason and description, held behind their group (and,
// on the queue "groups", a group whose front was dead-lettered, so that its
// next member leads), one
// abandoned with a reason on a paused queue, one dead-lettered after its
// last allowed delivery came back with an error), messages of three
// priorities, a body too large for its row, dedup rows of both kinds, a
// settlement receipt, a receive attempt, a topic with filtered
// subscriptions, a schedule that has fired, access keys (one revoked), and
// two commit records of the broker in mqlite_commits: one under an
// idempotency key the request named, one under the key derived from the
// locks of a request that named none. The clock stands at T0 (but for a
// moment before, to create the schedule), so every lease is still valid
// when the test opens the file at T0.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/wire"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/schema"
)

// token is the layout this program makes a fixture of.
const token = "mqlite-schema-12"

// T0 is the fixture's clock: it never moves.
var T0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// clock stands at T0, except while the schedule is created.
type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time { return time.UnixMilli(c.now.Load()).UTC() }

// Expect is what the upgrade test needs beyond the rows: the secrets the file
// keeps only hashes or results of.
type Expect struct {
	T0             time.Time
	LockedOrder    mqlite.Lock // a live lease on "orders"
	LockedFIFO     mqlite.Lock // the front of group g1 on "fifo"
	CompletedOrder mqlite.Lock // completed: its receipt replays the completion
	AttemptID      string      // a Receive on "audit" with Max 1
	AttemptSeq     int64
	DeferredSeq    int64
	AdminKey       string // a live admin key over every queue
	RevokedKey     string
	// Commits are the broker's commit requests made with AdminKey, each
	// with its answer: sent again, each replays that answer.
	Commits []Commit
}

// Commit is a request of POST /v1/commit and the answer it got.
type Commit struct {
	Key    string          // its idempotency key: named, or derived from its locks
	Body   string          // the request
	Answer json.RawMessage // the answer
}

func main() {
	update := flag.Bool("update", false, "write the fixture")
	flag.Parse()
	if !*update {
		log.Fatal("writes the fixture only under -update")
	}
	if schema.Token != token {
		log.Fatalf("this code writes layout %s: schema/testdata/v12 keeps the fixture the code of %s made", schema.Token, token)
	}
	dir := "schema/testdata/v12"
	if err := run(context.Background(), dir); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dir string) error {
	tmp, err := os.MkdirTemp("", "mqlite-fixture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	clk := &clock{}
	clk.now.Store(T0.UnixMilli())
	st, err := mqlite.Open(ctx, filepath.Join(tmp, "store.db"), mqlite.Config{
		Clock: clk, ScheduleInterval: -1, ReaperInterval: -1, SchedulerInterval: -1, TTLInterval: -1,
		JanitorInterval: -1, RetentionInterval: -1,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	var exp Expect
	exp.T0 = T0
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	must(st.CreateQueue(ctx, "orders", mqlite.QueueOptions{}))
	must(st.CreateQueue(ctx, "fifo", mqlite.QueueOptions{
		Ordering: mqlite.FIFO, LockDuration: time.Minute, MaxDeliveryCount: 3,
		DefaultTTL: time.Hour, DeadLetterOnExpire: true,
		DLQ: mqlite.DLQRetention{MaxAge: 48 * time.Hour, MaxCount: 500, MaxBytes: 1 << 20},
	}))
	must(st.CreateQueue(ctx, "nodedup", mqlite.QueueOptions{DedupWindow: -1, DLQ: mqlite.DLQRetention{MaxAge: -1, MaxCount: -1, MaxBytes: -1}}))
	must(st.CreateQueue(ctx, "bodies", mqlite.QueueOptions{DedupByBody: true}))
	must(st.CreateTopic(ctx, "events"))
	must(st.CreateSubscription(ctx, "events", "audit", mqlite.SubscriptionOptions{}))
	must(st.CreateSubscription(ctx, "events", "big-orders", mqlite.SubscriptionOptions{
		Filter: mqlite.Filter{SubjectPrefix: "order.", Properties: map[string]mqlite.Match{"size": mqlite.In("L", "XL")}},
		Queue:  mqlite.QueueOptions{MaxDeliveryCount: 50},
	}))

	send := func(queue string, msgs ...outbox.Message) {
		must(st.Tx(ctx, func(tx *mqlite.Tx) error {
			_, err := outbox.SendBatch(tx.Context(), tx.SQL(), queue, msgs)
			return err
		}))
	}
	receive := func(queue string, opts mqlite.ReceiveOptions) mqlite.Message {
		ms, err := st.Receive(ctx, queue, opts)
		must(err)
		if len(ms) != 1 {
			log.Fatalf("receive %s: %d messages", queue, len(ms))
		}
		return ms[0]
	}

	// orders: one message of each state. Each is received before the next
	// is sent, so each Receive takes the one just sent.
	send("orders", outbox.Message{Body: []byte(`{"n":1}`), MessageID: "order-1", Subject: "order.created",
		Properties: map[string]string{"size": "L"}})
	exp.CompletedOrder = receive("orders", mqlite.ReceiveOptions{}).Lock()
	must(st.Complete(ctx, exp.CompletedOrder))
	send("orders", outbox.Message{Body: []byte(`{"n":2}`), MessageID: "order-2"})
	exp.LockedOrder = receive("orders", mqlite.ReceiveOptions{}).Lock()
	send("orders", outbox.Message{Body: []byte(`{"n":3}`)})
	d := receive("orders", mqlite.ReceiveOptions{})
	must(st.Defer(ctx, d.Lock()))
	exp.DeferredSeq = d.Seq
	send("orders", outbox.Message{Body: []byte(`{"n":4}`), MessageID: "order-4"})
	r := receive("orders", mqlite.ReceiveOptions{})
	must(st.Reject(ctx, r.Lock(), "bad-order", "the order has no lines"))
	send("orders",
		outbox.Message{Body: []byte(`{"n":5}`), DeliverAt: T0.Add(time.Hour)},
		outbox.Message{Body: []byte(strings.Repeat("large body ", 200)), MessageID: "order-6", TTL: 2 * time.Hour},
		outbox.Message{Body: []byte(`{"n":7}`), Subject: "order.paid", Properties: map[string]string{"a": "1", "b": "2"}},
	)

	// fifo: a group with its front locked and two held behind it, a group
	// whose front is deferred, a scheduled group front.
	send("fifo",
		outbox.Message{Body: []byte("g1-1"), GroupID: "g1"},
		outbox.Message{Body: []byte("g1-2"), GroupID: "g1"},
		outbox.Message{Body: []byte("g1-3"), GroupID: "g1", MessageID: "g1-3"},
	)
	exp.LockedFIFO = receive("fifo", mqlite.ReceiveOptions{}).Lock()
	send("fifo", outbox.Message{Body: []byte("g2-1"), GroupID: "g2"}, outbox.Message{Body: []byte("g2-2"), GroupID: "g2"})
	g2 := receive("fifo", mqlite.ReceiveOptions{})
	if g2.GroupID != "g2" {
		return fmt.Errorf("fifo: received %q, want the front of g2", g2.GroupID)
	}
	must(st.Defer(ctx, g2.Lock()))
	send("fifo", outbox.Message{Body: []byte("g3-1"), GroupID: "g3", DeliverAt: T0.Add(time.Minute)},
		outbox.Message{Body: []byte("g3-2"), GroupID: "g3"})
	// groups: g4 with its front dead-lettered (a redrive puts it back
	// ahead of g4-2, which leads the group meanwhile), g5 with its front
	// locked and one member held behind it.
	must(st.CreateQueue(ctx, "groups", mqlite.QueueOptions{Ordering: mqlite.FIFO}))
	send("groups", outbox.Message{Body: []byte("g5-1"), GroupID: "g5"})
	if g5 := receive("groups", mqlite.ReceiveOptions{}); string(g5.Body) != "g5-1" {
		return fmt.Errorf("groups: received %q, want g5-1", g5.Body)
	}
	send("groups", outbox.Message{Body: []byte("g5-2"), GroupID: "g5"})
	send("groups", outbox.Message{Body: []byte("g4-1"), GroupID: "g4"}, outbox.Message{Body: []byte("g4-2"), GroupID: "g4"})
	g4 := receive("groups", mqlite.ReceiveOptions{})
	if string(g4.Body) != "g4-1" {
		return fmt.Errorf("groups: received %q, want g4-1", g4.Body)
	}
	must(st.Reject(ctx, g4.Lock(), "bad-step", "g4-1 failed"))

	// prio: three priorities, claimed highest first after the upgrade.
	must(st.CreateQueue(ctx, "prio", mqlite.QueueOptions{MaxDeliveryCount: 1}))
	send("prio", outbox.Message{Body: []byte("low")}, outbox.Message{Body: []byte("high"), Priority: 9},
		outbox.Message{Body: []byte("mid"), Priority: 4})
	// retried: one message whose only allowed delivery came back with an
	// error, so it went to the dead letters with its last error.
	must(st.CreateQueue(ctx, "retried", mqlite.QueueOptions{MaxDeliveryCount: 1}))
	send("retried", outbox.Message{Body: []byte("r1"), MessageID: "r1"})
	must(st.AbandonWithReason(ctx, receive("retried", mqlite.ReceiveOptions{}).Lock(), 0, "the worker gave up"))

	// paused: a paused queue holding a message that came back with a reason.
	must(st.CreateQueue(ctx, "paused", mqlite.QueueOptions{}))
	send("paused", outbox.Message{Body: []byte("p1"), MessageID: "p1"})
	must(st.AbandonWithReason(ctx, receive("paused", mqlite.ReceiveOptions{}).Lock(), 0, "the handler failed"))
	must(st.PauseQueue(ctx, "paused"))

	// nodedup: the same body twice, two messages; bodies: the same body
	// twice, one message and its content-key dedup row.
	send("nodedup", outbox.Message{Body: []byte("same")}, outbox.Message{Body: []byte("same")})
	send("bodies", outbox.Message{Body: []byte("same")}, outbox.Message{Body: []byte("same")})

	// events: a fan-out, one copy filtered out of big-orders; a receive
	// with an attempt id on audit.
	send("events", outbox.Message{Body: []byte("e1"), Subject: "order.created", Properties: map[string]string{"size": "XL"}},
		outbox.Message{Body: []byte("e2"), Subject: "invoice.sent"})
	exp.AttemptID = "attempt-1"
	exp.AttemptSeq = receive("audit", mqlite.ReceiveOptions{AttemptID: exp.AttemptID}).Seq

	// A schedule created at T0-150s, whose first two periods (T0-90s,
	// T0-30s) have begun at T0: the update at T0 fires both.
	tick := mqlite.ScheduleOptions{Target: "orders", Every: time.Minute, Body: []byte("tick"), Subject: "tick", TTL: time.Hour}
	clk.now.Store(T0.Add(-150 * time.Second).UnixMilli())
	must(st.CreateSchedule(ctx, "tick", tick))
	clk.now.Store(T0.UnixMilli())
	must(st.UpdateSchedule(ctx, "tick", tick))
	if info, err := st.GetSchedule(ctx, "tick"); err != nil || info.Fired != 2 {
		return fmt.Errorf("schedule tick fired %d periods, want 2 (%v)", info.Fired, err)
	}
	must(st.CreateSchedule(ctx, "nightly", mqlite.ScheduleOptions{Target: "events", Cron: "0 3 * * *",
		TimeZone: "UTC", Body: []byte("nightly")}))

	_, exp.AdminKey, err = keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	must(err)
	_, _, err = keys.Create(ctx, st, keys.Scope{Role: keys.Consumer, Queues: []string{"orders", "fifo"}})
	must(err)
	var revoked keys.Key
	revoked, exp.RevokedKey, err = keys.Create(ctx, st, keys.Scope{Role: keys.Producer, Queues: []string{"events"}})
	must(err)
	must(keys.Revoke(ctx, st, revoked.ID))

	// commits: two deliveries, each completed by a commit request through
	// the broker that sends a message on to "orders".
	must(st.CreateQueue(ctx, "commits", mqlite.QueueOptions{}))
	srv, err := broker.New(broker.Config{Store: st})
	must(err)
	web := httptest.NewServer(srv.Handler())
	defer web.Close()
	for i, idem := range []string{"commit-1", ""} {
		send("commits", outbox.Message{Body: []byte(fmt.Sprint("c", i+1))})
		m := receive("commits", mqlite.ReceiveOptions{})
		req := wire.CommitRequest{IdempotencyKey: idem, Complete: []wire.CommitLock{wire.FromLock(m.Lock())},
			Send: []wire.CommitSend{{Queue: "orders", Messages: []wire.SendMessage{{Body: []byte(fmt.Sprint("onward ", i+1))}}}}}
		body, err := json.Marshal(req)
		must(err)
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, web.URL+"/v1/commit", strings.NewReader(string(body)))
		must(err)
		hreq.Header.Set("Authorization", "Bearer "+exp.AdminKey)
		resp, err := http.DefaultClient.Do(hreq)
		must(err)
		answer, err := io.ReadAll(resp.Body)
		must(err)
		must(resp.Body.Close())
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("commit %d: %d %s", i+1, resp.StatusCode, answer)
		}
		if idem == "" {
			idem = req.LocksKey()
		}
		exp.Commits = append(exp.Commits, Commit{Key: idem, Body: string(body), Answer: answer})
	}

	out := filepath.Join(dir, "store.db")
	_ = os.Remove(out)
	must(st.Backup(ctx, out))
	b, err := json.MarshalIndent(exp, "", "  ")
	must(err)
	return os.WriteFile(filepath.Join(dir, "expect.json"), append(b, '\n'), 0o644)
}
