package broker_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/inbound"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
)

// TestTooLargeNamesTheFlag: each 413 of a size limit names the serve flag
// that raises it.
func TestTooLargeNamesTheFlag(t *testing.T) {
	f := start(t, broker.Config{MaxBodyBytes: 4 << 20})
	producer := f.keys["producer"]
	msg := func(n int) []byte {
		return fmt.Appendf(nil, `{"body":%q}`, base64.StdEncoding.EncodeToString(make([]byte, n)))
	}
	for _, tc := range []struct {
		name, reason, flag string
		body               []byte
	}{
		{"over the store's message limit", "message_too_large", "--max-message-bytes", msg(mqlite.DefaultMaxMessageBytes + 1)},
		{"over the request body limit", wire.ReasonBodyTooLarge, "--max-body", msg(4 << 20)},
	} {
		st, e := f.do(t, "POST", "/v1/queues/q/messages", producer, tc.body)
		if st != 413 || e.Reason != tc.reason || !strings.Contains(e.Message, tc.flag) {
			t.Errorf("%s: %d %+v, want 413 %s naming %s", tc.name, st, e, tc.reason, tc.flag)
		}
	}
}

// TestInboundConfigErrorSaysItOnce: a bad inbound sender is a broker
// config error that says "invalid config" once.
func TestInboundConfigErrorSaysItOnce(t *testing.T) {
	t.Parallel()
	tb := testdb.Open(t, mqlite.Config{})
	_, err := broker.New(broker.Config{Store: tb.Store, Inbound: []inbound.Sender{{Name: "acme", Queue: "q"}}})
	if err == nil || strings.Count(err.Error(), "invalid config") != 1 ||
		!errors.Is(err, broker.ErrInvalidConfig) || !errors.Is(err, mqlite.ErrInvalidArgument) {
		t.Errorf("New: %v, want one \"invalid config\", matching broker.ErrInvalidConfig and ErrInvalidArgument", err)
	}
}

// TestDashboardPlaceholdersAreTheDefaults: the queue form's placeholders
// show the defaults a field left empty gets.
func TestDashboardPlaceholdersAreTheDefaults(t *testing.T) {
	t.Parallel()
	html, err := os.ReadFile("ui/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"queue-dedup-window": fmt.Sprint(int(mqlite.DefaultDedupWindow.Seconds())),
		"queue-lock":         fmt.Sprint(int(mqlite.DefaultLockDuration.Seconds())),
		"queue-max-delivery": fmt.Sprint(mqlite.DefaultMaxDeliveryCount),
	} {
		got := "(none)"
		if m := regexp.MustCompile(`id="` + id + `"[^>]*placeholder="([^"]*)"`).FindSubmatch(html); m != nil {
			got = string(m[1])
		}
		if got != want {
			t.Errorf("#%s placeholder %s, want the default %s", id, got, want)
		}
	}
}
