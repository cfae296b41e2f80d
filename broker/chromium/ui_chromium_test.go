package chromium_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/outbox"
)

// chromium returns the path of Debian's chromium, or skips the test (fails
// it under MQLITE_REQUIRE_SERVICES=1) when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testdb.MissingService(t, "chromium", errors.New("not on PATH (apt-get install chromium)"))
	return ""
}

// adminKey creates a key with the admin role over every queue and returns
// its secret.
func adminKey(t *testing.T, st *mqlite.Store) string {
	t.Helper()
	_, secret, err := keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// dashboardData fills a store for the dashboard: "orders" with messages in
// every state but dead-lettered, "billing" with dead letters (and body
// deduplication), "empty", and
// topic "events" whose subscription "audit" takes subjects "order.*".
// It returns the seqs of the orders and of billing's dead letters.
func dashboardData(t *testing.T, st *mqlite.Store) (orders, dead []int64) {
	t.Helper()
	for _, q := range []string{"orders", "billing", "empty"} {
		if err := st.CreateQueue(ctx, q, mqlite.QueueOptions{DedupByBody: q == "billing"}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(queue string, m outbox.Message) int64 {
		var seq int64
		err := st.Tx(ctx, func(tx *mqlite.Tx) error {
			var err error
			seq, err = outbox.SendOne(tx.Context(), tx.SQL(), queue, m)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	for i := range 7 {
		orders = append(orders, send("orders", outbox.Message{
			Body:       fmt.Appendf(nil, `{"order":%d,"item":"book"}`, i+1),
			MessageID:  fmt.Sprintf("order-%d", i+1),
			Subject:    "order.placed",
			Properties: map[string]string{"region": "eu"},
		}))
	}
	send("orders", outbox.Message{Body: []byte("later"), DeliverAt: testdb.Start.Add(time.Hour)})
	receive := func(queue string, n int) []mqlite.Message {
		msgs, err := st.Receive(ctx, queue, mqlite.ReceiveOptions{Max: n})
		if err != nil || len(msgs) != n {
			t.Fatalf("receive %d of %s: %d, %v", n, queue, len(msgs), err)
		}
		return msgs
	}
	locked := receive("orders", 3) // orders 1-3 locked; the fake clock keeps them so
	if err := st.Defer(ctx, locked[2].Lock()); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTopic(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	err := st.CreateSubscription(ctx, "events", "audit", mqlite.SubscriptionOptions{Filter: mqlite.Filter{SubjectPrefix: "order."}})
	if err != nil {
		t.Fatal(err)
	}
	err = st.CreateSchedule(ctx, "nightly-report", mqlite.ScheduleOptions{Target: "orders", Cron: "0 3 * * *", Body: []byte("report")})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		send("billing", outbox.Message{Body: fmt.Appendf(nil, "invoice %d", i+1), MessageID: fmt.Sprintf("invoice-%d", i+1)})
	}
	for i, m := range receive("billing", 2) {
		if err := st.Reject(ctx, m.Lock(), "bad_invoice", fmt.Sprintf("line %d does not add up", i+1)); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, m.Seq)
	}
	return orders, dead
}

// shownCounts reads the per-state numbers of the queues table:
// "queue/state" → text.
const shownCounts = `Object.fromEntries([...document.querySelectorAll('#queues-body td[data-state]')]
	.map(td => [td.dataset.queue + "/" + td.dataset.state, td.textContent]))`

// checkCounts waits until the queues table shows Store.Stats of every queue.
func checkCounts(t *testing.T, bctx context.Context, st *mqlite.Store, queues ...string) {
	t.Helper()
	want := map[string]string{}
	for _, q := range queues {
		s, err := st.Stats(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for state, n := range map[string]int64{"active": s.Active, "scheduled": s.Scheduled, "locked": s.Locked,
			"deferred": s.Deferred, "dead_lettered": s.DeadLettered, "total": s.Total()} {
			want[q+"/"+state] = strconv.FormatInt(n, 10)
		}
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	// Poll until the page agrees (it polls the stats every 2s), then read
	// the numbers once more to report a disagreement precisely. The wait
	// is bounded by the tab's context (the test's deadline), not a time.
	cond := fmt.Sprintf(`(() => { const got = %s; const want = %s;
		return Object.keys(want).every(k => got[k] === want[k]); })()`, shownCounts, wantJSON)
	err = chromedp.Do(bctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(0)))
	got, rerr := chromedp.Run(bctx, chromedp.Evaluate[map[string]string](shownCounts))
	if rerr != nil {
		t.Fatal(rerr)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("dashboard shows %s = %q, Store.Stats says %s", k, got[k], v)
		}
	}
	if err != nil {
		t.Fatalf("the dashboard never showed the store's numbers: %v", err)
	}
}

// TestDashboardChromium drives the dashboard in headless Chromium against a
// broker with data: the numbers per state match Store.Stats, the message
// browser shows a body and its properties, redrive moves a dead letter
// back, a key is created and revoked, a consumer key sees no admin button
// and is refused the call, and purge empties the dead letters.
func TestDashboardChromium(t *testing.T) {
	chromium(t)
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	st := tb.Store
	orders, dead := dashboardData(t, st)
	admin := adminKey(t, st)
	_, consumer, err := keys.Create(ctx, st, keys.Scope{Role: keys.Consumer, Queues: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	_, producer, err := keys.Create(ctx, st, keys.Scope{Role: keys.Producer, Queues: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	p := newPage(t, serve(t, broker.Config{Store: st, Logger: quiet()}, nil))

	// The queues and their numbers per state.
	p.do("open /ui", chromedp.Navigate(p.url+"/ui"))
	p.signIn(admin)
	checkCounts(t, p.ctx, st, "audit", "billing", "empty", "orders")
	// What each queue deduplicates: billing its bodies too.
	p.until("the dedup column", `document.querySelector('#queues-body td[data-queue="billing"][data-option="dedup"]')?.textContent === "message id or body, 10m"
		&& document.querySelector('#queues-body td[data-queue="orders"][data-option="dedup"]')?.textContent === "message id, 10m"`)

	// The message browser: peek orders, open the fourth order (active).
	sel := fmt.Sprintf(`#messages-body tr[data-seq="%d"]`, orders[3])
	p.show("messages", "orders")
	if preview, state := p.text(sel+" td.preview"), p.text(sel+" td:nth-child(2)"); preview != `{ "order": 4, "item": "book" }` || state != "active" {
		t.Errorf("order 4 row: preview %q state %q", preview, state)
	}
	p.do("open a message", chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.ID("message-body")))
	if body := p.text("#message-body"); body != "{\n  \"order\": 4,\n  \"item\": \"book\"\n}" {
		t.Errorf("order 4 body: %q", body)
	}
	if props := p.text("#message-properties"); props != "regioneu" {
		t.Errorf("order 4 properties: %q", props)
	}
	p.screenshot("messages.png")

	// Dead letters: the reason shows; redrive the first one.
	row := fmt.Sprintf(`#dlq-body tr[data-seq="%d"]`, dead[0])
	p.show("dead-letters", "billing")
	p.do("a redrive button", chromedp.WaitVisible(chromedp.CSS(row+" button.redrive")))
	if reason, description := p.text(row+" td:nth-child(3)"), p.text(row+" td:nth-child(4)"); reason != "bad_invoice" || description != "line 1 does not add up" {
		t.Errorf("dead letter %d: reason %q description %q", dead[0], reason, description)
	}
	p.screenshot("dead-letters.png")
	p.do("redrive", chromedp.Click(chromedp.CSS(row+" button.redrive")))
	p.until("the redriven row goes", fmt.Sprintf(`document.querySelector('%s') === null &&
		document.getElementById('dlq-status').textContent.startsWith('Redrove 1 ')`, row))
	msgs, err := st.Peek(ctx, "billing", mqlite.PeekParams{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(msgs, func(m mqlite.Message) bool { return m.Seq == dead[0] })
	if i < 0 || msgs[i].State != mqlite.StateActive {
		t.Fatalf("after redrive, billing holds %+v; want seq %d active", msgs, dead[0])
	}
	if dl, err := st.PeekDeadLetters(ctx, "billing", mqlite.PeekParams{}); err != nil || len(dl) != 1 || dl[0].Seq != dead[1] {
		t.Fatalf("after redrive, dead letters %+v, %v; want only %d", dl, err, dead[1])
	}
	p.do("queues again", chromedp.Click(chromedp.CSS(`#nav a[data-view="queues"]`)))
	checkCounts(t, p.ctx, st, "audit", "billing", "empty", "orders")
	p.screenshot("dashboard.png")

	// Topics: the subscription and its filter.
	p.do("topics view", chromedp.Click(chromedp.CSS(`#nav a[data-view="topics"]`)))
	p.until("the topic's row", `document.getElementById('topics-body').textContent === 'eventsauditsubject starts order.'`)

	// Schedules: the one schedule, its target, its cron and its next period.
	p.do("schedules view", chromedp.Click(chromedp.CSS(`#nav a[data-view="schedules"]`)))
	p.until("the schedule's row", `(() => { const r = document.querySelector('tr[data-schedule="nightly-report"]');
		return r !== null && [...r.cells].map(c => c.textContent).slice(0, 3).join('|') === 'nightly-report|orders|cron 0 3 * * *'
			&& r.cells[3].textContent !== '' && r.cells[5].textContent === '0'; })()`)

	// Access keys: create one for orders (its secret shown once), then
	// revoke it with two clicks.
	p.do("keys view", chromedp.Click(chromedp.CSS(`#nav a[data-view="keys"]`)),
		chromedp.WaitVisible(chromedp.ID("key-create")),
		chromedp.SetValue(chromedp.ID("key-role"), "consumer"),
		chromedp.SetValue(chromedp.ID("key-queues"), "orders"),
		chromedp.Click(chromedp.ID("key-create")),
		chromedp.WaitVisible(chromedp.ID("key-secret-value")))
	secret := p.text("#key-secret-value")
	made, err := keys.Authenticate(ctx, st, secret)
	if err != nil || made.Scope.Role != keys.Consumer || !slices.Equal(made.Scope.Queues, []string{"orders"}) {
		t.Fatalf("the key the page created (%q): %+v, %v", secret, made, err)
	}
	revoke := fmt.Sprintf(`#keys-body tr[data-key="%s"] button.revoke`, made.ID)
	p.do("revoke", chromedp.Click(chromedp.ID("key-secret-hide")),
		chromedp.WaitVisible(chromedp.CSS(revoke)),
		chromedp.Click(chromedp.CSS(revoke)), chromedp.Click(chromedp.CSS(revoke)))
	p.until("the key shows revoked", fmt.Sprintf(`document.querySelector('#keys-body tr[data-key="%s"] td:nth-child(5)')?.textContent !== ''`, made.ID))
	if _, err := keys.Authenticate(ctx, st, secret); !errors.Is(err, keys.ErrUnauthorized) {
		t.Errorf("the revoked key still authenticates: %v", err)
	}

	// No key went into a URL: every resource the page fetched.
	urls, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](`[location.href, ...performance.getEntriesByType('resource').map(e => e.name)]`))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		if strings.Contains(u, "mqlite_") {
			t.Errorf("a key in a URL: %s", u)
		}
	}

	// A producer key may only send: the page turns it away.
	p.do("sign out", chromedp.Click(chromedp.ID("signout")))
	p.do("producer key",
		chromedp.WaitVisible(chromedp.ID("login-key")),
		chromedp.SendKeys(chromedp.ID("login-key"), producer),
		chromedp.Click(chromedp.ID("login-submit")))
	p.until("the producer is turned away", `document.getElementById('error').textContent.includes('producer key') &&
		document.getElementById('login').checkVisibility() && sessionStorage.getItem('mqlite.key') === null`)

	// A consumer key: no dead-letter view, no redrive button; the broker
	// refuses the call when forced.
	p.signIn(consumer)
	p.do("consumer's dead letters", chromedp.Navigate(p.url+"/ui/#dead-letters"))
	p.until("the consumer is sent to the queues", `document.getElementById('view-queues').checkVisibility() &&
		!document.getElementById('view-dead-letters').checkVisibility()`)
	adminShown, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`[...document.querySelectorAll(
		'button.redrive, #dlq-redrive-all, #dlq-purge, #nav a[data-view="dead-letters"], #nav a[data-view="keys"]')]
		.some(e => e.checkVisibility())`))
	if err != nil || adminShown {
		t.Errorf("a consumer key sees a dead-letter, redrive, purge or key control (%v)", err)
	}
	status, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`fetch('/v1/queues/billing/dead-letters/redrive', {method: 'POST',
		headers: {'Authorization': 'Bearer ' + sessionStorage.getItem('mqlite.key'), 'Content-Type': 'application/json'},
		body: '{}'}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 403 {
		t.Errorf("a consumer key's redrive: %d %v, want 403", status, err)
	}
	if s, err := st.Stats(ctx, "billing"); err != nil || s.DeadLettered != 1 {
		t.Errorf("after the refused redrive: %+v, %v; want 1 dead letter", s, err)
	}

	// Back as admin: purge billing's last dead letter (two clicks).
	p.do("sign out", chromedp.Click(chromedp.ID("signout")))
	p.signIn(admin)
	p.show("dead-letters", "billing")
	p.do("purge", chromedp.Click(chromedp.ID("dlq-purge")), chromedp.Click(chromedp.ID("dlq-purge")))
	p.until("purged", `document.getElementById('dlq-status').textContent.startsWith('Purged 1 ')`)
	if s, err := st.Stats(ctx, "billing"); err != nil || s.DeadLettered != 0 {
		t.Errorf("after purge: %+v, %v; want no dead letter", s, err)
	}
}

// page is one headless Chromium tab on a broker; its methods fail the test
// on error.
type page struct {
	t   *testing.T
	url string
	ctx context.Context
}

// newPage starts Chromium with a fresh profile (the flags this machine
// needs: no sandbox, no GPU, no QUIC, nothing fetched in the background)
// and stops it when the test ends. It skips the test without Chromium.
//
// The tab's context ends a minute before the test's deadline (go test
// -timeout), so that a step that never comes fails with its name; it has
// no budget of its own. A fixed one (45s for the session, 10s a wait) was
// what failed this test on a busy machine: Chromium's start, some twenty
// page loads and the page's 2s polls took longer there, with nothing wrong.
func newPage(t *testing.T, url string) *page {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	cancelTimeout := context.CancelFunc(func() {})
	if deadline, ok := t.Deadline(); ok {
		bctx, cancelTimeout = context.WithDeadline(bctx, deadline.Add(-time.Minute))
	}
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser()
		cancelAlloc() // waits for the browser to exit, before TempDir goes
	})
	return &page{t: t, url: url, ctx: bctx}
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// text is the textContent of the first element matching the CSS selector
// sel, read in one evaluation (a re-render cannot pull the node away
// between finding it and reading it).
func (p *page) text(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q)?.textContent ?? "(none)"`, sel)))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// until waits for the JavaScript condition cond, as long as the tab's
// context lasts.
func (p *page) until(what, cond string) {
	p.t.Helper()
	p.do(what, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(0)))
}

// signIn enters key on the login form and waits for the first stats (the
// view shown is the one in the URL's fragment).
func (p *page) signIn(key string) {
	p.t.Helper()
	p.do("sign in",
		chromedp.WaitVisible(chromedp.ID("login-key")),
		chromedp.SendKeys(chromedp.ID("login-key"), key),
		chromedp.Click(chromedp.ID("login-submit")),
	)
	p.until("the first stats", `document.querySelector('#queues-body td[data-queue="orders"][data-state="active"]')?.textContent > ''`)
}

// show opens view ("messages" or "dead-letters") on queue, once the view's
// own load of the queue chosen before is done, so that no late answer
// re-renders the rows under the test.
//
// Choosing the queue is the one load: SetValue fires the list's change
// event, as a user's choice does. A click on Refresh after it started a
// second load, which re-rendered the rows after the first had shown them
// when the first answer came back before the click (a busy machine): a
// click on a row then found its node gone.
func (p *page) show(view, queue string) {
	p.t.Helper()
	id := map[string]string{"messages": "messages", "dead-letters": "dlq"}[view]
	loaded := func(queue string) string {
		return fmt.Sprintf(`document.getElementById('%s-body').dataset.loaded === %s`, id, queue)
	}
	p.do(view, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#nav a[data-view="%s"]`, view))))
	p.until("the view's own load", loaded(fmt.Sprintf(`document.getElementById('%s-queue').value`, id)))
	p.do("choose "+queue, chromedp.SetValue(chromedp.ID(id+"-queue"), queue))
	p.until(queue+" in "+view, loaded(fmt.Sprintf("%q", queue)))
}

// screenshot saves the page as name in the test's artifact directory
// (kept with go test -artifacts -outputdir DIR) and logs where.
func (p *page) screenshot(name string) {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)) // 100 is PNG, less is JPEG
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(p.t.ArtifactDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

// withCounters replaces the counters of every queue in the counts response
// with ones that move on the test's wall clock (the store's stand still
// here): sent grows by 10 and completed by 4 per second.
func withCounters(next http.Handler) http.Handler {
	start := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/counts" {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var body struct {
			Queues []map[string]any `json:"queues"`
		}
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &body) != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		ms := time.Since(start).Milliseconds()
		for _, q := range body.Queues {
			q["counters"] = map[string]int64{"sent": ms / 100, "completed": ms / 250}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	})
}

// TestDashboardRates: with counters in the stats, the dashboard shows
// per-second rates computed from successive polls and draws both lines of
// the throughput chart; without them (TestDashboardChromium) it shows "—".
func TestDashboardRates(t *testing.T) {
	chromium(t)
	t.Parallel()
	st := testdb.Open(t, mqlite.Config{}).Store
	dashboardData(t, st)
	admin := adminKey(t, st)
	p := newPage(t, serve(t, broker.Config{Store: st, Logger: quiet()}, withCounters))
	p.do("open /ui", chromedp.Navigate(p.url+"/ui/"))
	p.signIn(admin)
	// Three polls give two rates: the chart's two points.
	p.until("the chart's lines", `document.querySelectorAll('#chart polyline').length === 2 &&
		document.querySelector('#chart polyline[data-series="sent"]').getAttribute('points').split(' ').length >= 2`)
	for _, c := range []struct {
		series   string
		min, max float64
	}{{"sent", 5, 20}, {"completed", 2, 8}} {
		s := p.text(fmt.Sprintf(`td[data-queue="orders"][data-rate="%s"]`, c.series))
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || r < c.min || r > c.max {
			t.Errorf("%s/s shows %q, want about %v", c.series, s, (c.min+c.max)/2)
		}
	}
	if note := p.text("#chart-note"); note != "" {
		t.Errorf("chart note with counters: %q", note)
	}
	p.screenshot("dashboard-rates.png")

	// The rate arithmetic itself, on chart.js's Rates: no rate from the
	// first poll, nor when the counters are missing or went down (the
	// store reopened).
	got, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]any](`import('/ui/chart.js').then(({Rates, fmtRate}) => {
		const r = new Rates();
		return [
			r.update('q', {sent: 10, completed: 0}, 1000),
			r.update('q', {sent: 30, completed: 5}, 3000),
			r.update('q', {sent: 2, completed: 5}, 4000),
			r.update('q', undefined, 5000),
			[fmtRate(null), fmtRate(0), fmtRate(0.25), fmtRate(4.5), fmtRate(10), fmtRate(1234.5)].join(' '),
		];
	})`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if want := `[<nil> map[completed:2.5 sent:10] <nil> <nil> — 0 0.25 4.5 10 1235]`; fmt.Sprint(got) != want {
		t.Errorf("Rates and fmtRate: %v, want %s", got, want)
	}
}
