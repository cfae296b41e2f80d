package chromium_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/consumer"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// loopOverClient runs consumer.Loop over a broker client on queue with
// handler; stop cancels it and waits for it to end.
func loopOverClient(t *testing.T, url, key string, clock mqlite.Clock, queue string, h consumer.Handler) (stop func()) {
	t.Helper()
	c, err := client.New(client.Config{URL: url, Key: key, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Loop(lctx, c, queue, h, consumer.LoopConfig{Prefetch: -1}) }()
	return func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("loop on %s: %v", queue, err)
		}
		_ = c.Close()
	}
}

// TestDashboardOperatorControls drives the admin controls of the dashboard
// and checks each action in the store: the consumer count follows a Loop
// over the client as it starts and stops; pause stops that Loop's
// deliveries and resume brings them back; a queue is created, updated and
// deleted; a message is published; scheduled messages are purged; the
// browser filters by subject and MessageID; the last error of a failing
// handler shows in the message's detail.
func TestDashboardOperatorControls(t *testing.T) {
	chromium(t)
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	st := tb.Store
	orders, dead := dashboardData(t, st)
	admin := adminKey(t, st)
	url := serve(t, broker.Config{Store: st, Logger: quiet()}, nil)
	p := newPage(t, url)
	p.do("open /ui", chromedp.Navigate(url+"/ui"))
	p.signIn(admin)
	consumers := func(q string) string {
		return fmt.Sprintf(`document.querySelector('#queues-body td[data-queue="%s"][data-gauge="consumers"]')?.textContent`, q)
	}

	// The consumer count goes up as a Loop over the client starts.
	handled := make(chan int64, 16)
	stopLoop := loopOverClient(t, url, admin, tb.Clock, "empty", func(_ context.Context, m mqlite.Message) error {
		handled <- m.Seq
		return nil
	})
	p.until("one consumer of empty", consumers("empty")+` === "1"`)

	// Pause: the store says so, the page marks it, and a message sent then
	// is not handed to the running Loop; resume hands it over.
	pause := `#queues-body button.pause[data-queue="empty"]`
	clickPause := chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, pause))
	p.do("pause", chromedp.WaitVisible(chromedp.CSS(pause)), clickPause)
	p.until("marked paused", `document.querySelector('#queues-body tr[data-queue="empty"]')?.dataset.paused === "true"`)
	if q, err := st.GetQueue(ctx, "empty"); err != nil || !q.Paused() {
		t.Fatalf("after the pause button: %+v %v", q, err)
	}
	seq := sendOne(t, st, "empty", outbox.Message{Body: []byte("while paused")})
	select {
	case s := <-handled:
		t.Fatalf("message %d handled while the queue is paused", s)
	default:
	}
	if s, err := st.Stats(ctx, "empty"); err != nil || s.Active != 1 {
		t.Fatalf("while paused: %+v %v, want the message active", s, err)
	}
	p.until("the resume button", fmt.Sprintf(`document.querySelector(%q)?.textContent === "Resume"`, pause))
	p.do("resume", clickPause)
	if got := <-handled; got != seq {
		t.Fatalf("after resume the loop handled %d, want %d", got, seq)
	}
	if q, err := st.GetQueue(ctx, "empty"); err != nil || q.Paused() {
		t.Fatalf("after the resume button: %+v %v", q, err)
	}

	// And down as it stops (after the registry's grace, on the store's
	// clock).
	// The broker's end of the Loop's stream may make one more call after
	// the Loop returned (it sees the stream closed at its next read), and
	// that call is seen: the clock moves past the grace until the registry
	// is empty, not once at a moment that may come before that call.
	stopLoop()
	for {
		s, err := st.Stats(ctx, "empty")
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Receivers) == 0 {
			break
		}
		if s.Receivers[0].Waiting == 0 {
			tb.Clock.Advance(mqlite.ReceiverGrace)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.until("no consumer of empty", consumers("empty")+` === "0"`)

	// Create, update and delete a queue.
	p.do("create a queue", setValue("queue-name", "made"),
		setValue("queue-max-delivery", "4"), chromedp.Click(chromedp.ID("queue-create")))
	p.until("created", `document.getElementById('queues-status').textContent === 'Created made.'`)
	if q, err := st.GetQueue(ctx, "made"); err != nil || q.Options.MaxDeliveryCount != 4 {
		t.Fatalf("the created queue: %+v %v", q, err)
	}
	p.do("update it", setValue("queue-max-delivery", ""),
		setValue("queue-lock", "90"), chromedp.Click(chromedp.ID("queue-update")))
	p.until("updated", `document.getElementById('queues-status').textContent === 'Updated made.'`)
	if q, err := st.GetQueue(ctx, "made"); err != nil || q.Options.LockDuration != 90*time.Second || q.Options.MaxDeliveryCount != 4 {
		t.Fatalf("the updated queue: %+v %v", q, err)
	}
	p.do("update every other option", setValue("queue-dedup-window", "60"), setValue("queue-dedup-body", "yes"),
		setValue("queue-ttl", "3600"), setValue("queue-expire-dlq", "yes"), setValue("queue-dlq-age", "-1"),
		setValue("queue-dlq-count", "7"), setValue("queue-dlq-bytes", "4096"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('queues-status').textContent = ''`),
		chromedp.Click(chromedp.ID("queue-update")))
	p.until("updated again", `document.getElementById('queues-status').textContent === 'Updated made.'`)
	want := mqlite.QueueOptions{MaxDeliveryCount: 4, LockDuration: 90 * time.Second, DedupWindow: time.Minute, DedupByBody: true,
		DefaultTTL: time.Hour, DeadLetterOnExpire: true, DLQ: mqlite.DLQRetention{MaxAge: -1, MaxCount: 7, MaxBytes: 4096}}
	if q, err := st.GetQueue(ctx, "made"); err != nil || q.Options != want {
		t.Fatalf("the queue updated in every option: %+v %v, want %+v", q.Options, err, want)
	}
	del := `#queues-body button.delete[data-queue="made"]`
	click := chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, del))
	p.do("delete it (two clicks)", chromedp.WaitVisible(chromedp.CSS(del)), click)
	p.until("armed", fmt.Sprintf(`document.querySelector(%q)?.textContent === "Click again to delete"`, del))
	if _, err := st.GetQueue(ctx, "made"); err != nil {
		t.Fatalf("one click deleted the queue: %v", err)
	}
	p.do("the second click", click)
	p.until("deleted", `document.getElementById('queues-status').textContent === 'Deleted made.'`)
	if _, err := st.GetQueue(ctx, "made"); !errors.Is(err, mqlite.ErrQueueNotFound) {
		t.Fatalf("after delete: %v", err)
	}

	// Filter the browser by subject prefix, then by MessageID.
	p.show("messages", "orders")
	p.do("filter by subject", setValue("find-subject", "order."), chromedp.Click(chromedp.ID("find-submit")))
	p.until("only the orders", fmt.Sprintf(`document.querySelectorAll('#messages-body tr[data-seq]').length === %d`, len(orders)))
	p.do("filter by message id", setValue("find-subject", ""),
		setValue("find-message-id", "order-5"), chromedp.Click(chromedp.ID("find-submit")))
	p.until("one order", fmt.Sprintf(`(() => { const r = document.querySelectorAll('#messages-body tr[data-seq]');
		return r.length === 1 && r[0].dataset.seq === "%d"; })()`, orders[4]))
	p.do("no filter", setValue("find-message-id", ""), chromedp.Click(chromedp.ID("find-submit")))

	// Publish a message.
	p.do("publish", setValue("publish-body", `{"order":99}`),
		setValue("publish-subject", "order.manual"),
		setValue("publish-message-id", "manual-1"),
		setValue("publish-properties", "region=us, by=ops"),
		chromedp.Click(chromedp.ID("publish-submit")))
	p.until("published", `document.getElementById('messages-status').textContent.startsWith('Published seq ')`)
	res, err := st.Find(ctx, "orders", mqlite.FindParams{MessageID: "manual-1"})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("the published message: %+v %v", res, err)
	}
	if m := res.Messages[0]; string(m.Body) != `{"order":99}` || m.Subject != "order.manual" || m.Properties["region"] != "us" || m.Properties["by"] != "ops" {
		t.Fatalf("the published message: %+v", m)
	}

	// Purge the scheduled messages (two clicks).
	p.do("purge scheduled", setValue("purge-state", "scheduled"),
		chromedp.Click(chromedp.ID("purge-submit")), chromedp.Click(chromedp.ID("purge-submit")))
	p.until("purged", `document.getElementById('messages-status').textContent.startsWith('Purged 1 scheduled')`)
	if s, err := st.Stats(ctx, "orders"); err != nil || s.Scheduled != 0 {
		t.Fatalf("after purge: %+v %v", s, err)
	}

	// The last error of a failing handler, in the message's detail.
	failing := sendOne(t, st, "empty", outbox.Message{Body: []byte("fails")})
	failed := make(chan struct{})
	stopLoop = loopOverClient(t, url, admin, tb.Clock, "empty", func(context.Context, mqlite.Message) error {
		select {
		case <-failed:
		default:
			close(failed)
		}
		return errors.New("payment service said 503")
	})
	<-failed
	stopLoop()
	p.show("messages", "empty")
	row := fmt.Sprintf(`#messages-body tr[data-seq="%d"]`, failing)
	p.do("open the failed message", chromedp.WaitVisible(chromedp.CSS(row)), chromedp.Click(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.ID("message-last-error")))
	if got := p.text("#message-last-error"); got != "payment service said 503" {
		t.Errorf("last error shown: %q", got)
	}
	if got := p.text("#message-attempts"); !strings.Contains(got, "payment service said 503") {
		t.Errorf("failed attempts shown: %q, want the handler's error", got)
	}
	p.screenshot("operator-controls.png")

	// Dead letters by selection: purge one (two clicks), redrive the other.
	tick := func(seq int64) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector('#dlq-body input.dlq-select[data-seq="%d"]').click()`, seq))
	}
	p.show("dead-letters", "billing")
	p.do("tick the first dead letter", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#dlq-body input.dlq-select[data-seq="%d"]`, dead[0]))), tick(dead[0]))
	p.do("purge selected (two clicks)", chromedp.Click(chromedp.ID("dlq-purge-selected")))
	p.until("armed", `document.getElementById('dlq-purge-selected').textContent === 'Click again to purge them'`)
	if dl, err := st.PeekDeadLetters(ctx, "billing", mqlite.PeekParams{}); err != nil || len(dl) != 2 {
		t.Fatalf("after one click: %d dead letters, %v; want 2", len(dl), err)
	}
	p.do("the second click", chromedp.Click(chromedp.ID("dlq-purge-selected")))
	// The status comes before the list's reload: a tick on the old list
	// is lost when the new one replaces it, so wait for the purged row
	// to go.
	p.until("purged", fmt.Sprintf(`document.getElementById('dlq-status').textContent.startsWith('Purged 1 selected')
		&& document.querySelector('#dlq-body tr[data-seq="%d"]') === null`, dead[0]))
	if dl, err := st.PeekDeadLetters(ctx, "billing", mqlite.PeekParams{}); err != nil || len(dl) != 1 || dl[0].Seq != dead[1] {
		t.Fatalf("after purging %d: dead letters %v, %v; want [%d]", dead[0], testdb.Seqs(dl), err, dead[1])
	}
	p.do("tick the other", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#dlq-body input.dlq-select[data-seq="%d"]`, dead[1]))), tick(dead[1]),
		chromedp.Click(chromedp.ID("dlq-redrive-selected")))
	p.until("redriven", `document.getElementById('dlq-status').textContent.startsWith('Redrove 1 ')`)
	if s, err := st.Stats(ctx, "billing"); err != nil || s.DeadLettered != 0 {
		t.Fatalf("after redriving the selection: %+v %v", s, err)
	}
}

// setValue sets the value of the form field id, as typed, in one
// evaluation.
func setValue(id, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const e = document.getElementById(%q);
		e.value = %q; e.dispatchEvent(new Event('input')); })()`, id, value))
}

// sendOne sends m to queue in a transaction of its own and returns its seq.
func sendOne(t *testing.T, st *mqlite.Store, queue string, m outbox.Message) int64 {
	t.Helper()
	res, err := outbox.Send(ctx, st, queue, m)
	if err != nil || res[0].Err != nil {
		t.Fatalf("send to %s: %v %v", queue, err, res)
	}
	return res[0].Seq
}
