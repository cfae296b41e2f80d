package chromium_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/testdb"
)

// TestDashboardNarrow: at 420 px wide (a phone) no view scrolls the page
// sideways; a wide table scrolls inside itself. Dead letters show their
// message id.
func TestDashboardNarrow(t *testing.T) {
	chromium(t)
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	st := tb.Store
	_, dead := dashboardData(t, st)
	admin := adminKey(t, st)
	p := newPage(t, serve(t, broker.Config{Store: st, Logger: quiet()}, nil))
	p.do("a 420 px viewport", chromedp.EmulateViewport(420, 900), chromedp.Navigate(p.url+"/ui"))
	p.signIn(admin)
	// overflow lists what sticks out past the viewport's right edge.
	const overflow = `(() => {
		const w = document.documentElement.clientWidth;
		if (document.documentElement.scrollWidth <= w) return "";
		return [...document.querySelectorAll("body *")].filter((e) => e.checkVisibility() && e.getBoundingClientRect().right > w + 1)
			.slice(0, 5).map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + " (right " + Math.round(e.getBoundingClientRect().right) + ")").join(", ")
			+ "; page " + document.documentElement.scrollWidth + " px wide in " + w;
	})()`
	check := func(view string) {
		t.Helper()
		got, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](overflow))
		if err != nil {
			t.Fatalf("%s: %v", view, err)
		}
		if got != "" {
			t.Errorf("%s at 420 px scrolls sideways: %s", view, got)
		}
	}
	check("queues")
	p.show("messages", "orders")
	check("messages")
	p.show("dead-letters", "billing")
	p.until("a dead letter's message id", fmt.Sprintf(`document.querySelector('#dlq-body tr[data-seq="%d"] td.message-id')?.textContent === "invoice-1"`, dead[0]))
	check("dead letters")
	for _, view := range []string{"topics", "schedules", "keys"} {
		p.do(view, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#nav a[data-view="%s"]`, view))))
		p.until(view+" rows", fmt.Sprintf(`document.getElementById('view-%s').checkVisibility() && document.querySelector('#%s-body tr') !== null`, view, view))
		check(view)
	}
}
