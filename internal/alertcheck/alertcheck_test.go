package alertcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/metrics"
	"github.com/mqlite/mqlite/outbox"
	"github.com/mqlite/mqlite/relay"
)

const (
	rulesFile     = "../../deploy/prometheus/mqlite-alerts.yml"
	dashboardFile = "../../deploy/grafana/mqlite-dashboard.json"
)

var promql = parser.NewParser(parser.Options{})

// metricNames returns the metric names the PromQL expression expr selects.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, sel := range parser.ExtractSelectors(e) {
		for _, m := range sel {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				names = append(names, m.Value)
			}
		}
	}
	return names, nil
}

// unknown returns the names of exprs' selectors that are not series of a
// family in scraped (a histogram's _bucket, _sum and _count belong to it).
func unknown(scraped map[string]bool, exprs ...string) ([]string, error) {
	var out []string
	for _, expr := range exprs {
		names, err := metricNames(expr)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", expr, err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%q names no metric", expr)
		}
		for _, n := range names {
			family := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, suffix); ok && scraped[base] {
					family = base
				}
			}
			if !scraped[family] {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// ruleExprs parses the rules file with Prometheus's own rule-file parser
// (which checks every expression, duration and template) and returns the
// expressions.
func ruleExprs(t *testing.T, path string) []string {
	t.Helper()
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", path, errs)
	}
	var exprs []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	if len(exprs) < 4 {
		t.Fatalf("%s: %d rules, want the four alerts of the queue and the relay at least", path, len(exprs))
	}
	return exprs
}

// grafanaVars replaces the dashboard's variables by values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$queue", ".*")

var labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*),\s*[a-zA-Z_]+\)$`)

// dashboardExprs reads the Grafana dashboard and returns its queries, the
// variables' label_values metrics as selectors.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panel", path)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, grafanaVars.Replace(tg.Expr))
		}
	}
	for _, v := range d.Templating.List {
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("variable query %q is not label_values(metric, label)", v.Definition)
		}
		exprs = append(exprs, m[1])
	}
	return exprs
}

// scrape runs a broker on a fresh store, sends, receives, abandons and
// dead-letters a message, and returns the metric families of its /metrics,
// with those of the relay's metrics (metrics.RelayObserver, what `mqlite
// relay --metrics-addr` serves) after one relayed message and one hold.
func scrape(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	st, err := mqlite.Open(ctx, filepath.Join(t.TempDir(), "mq.db"), mqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "q", mqlite.QueueOptions{MaxDeliveryCount: 1}); err != nil {
		t.Fatal(err)
	}
	err = st.Tx(ctx, func(tx *mqlite.Tx) error {
		_, err := outbox.SendOne(tx.Context(), tx.SQL(), "q", outbox.Message{Body: []byte("m")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := st.Receive(ctx, "q", mqlite.ReceiveOptions{})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %d", err, len(msgs))
	}
	if err := st.AbandonWithReason(ctx, msgs[0].Lock(), 0, "failed"); err != nil {
		t.Fatal(err)
	}
	srv, err := broker.New(broker.Config{Store: st, PublicMetrics: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for n := range fams {
		names[n] = true
	}
	reg := prometheus.NewRegistry()
	ro := metrics.NewRelayObserver(nil)
	reg.MustRegister(ro)
	ro.Sink("webhook").Completed(msgs[0], time.Millisecond)
	ro.Sink("nats").(relay.HoldObserver).Held(msgs[0], "no_stream", errors.New("no stream takes the subject"))
	relayed, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range relayed {
		names[f.GetName()] = true
	}
	return names
}

// TestRulesAndDashboardNameRealMetrics: the alert rules parse with
// Prometheus's rule-file parser, the dashboard's queries with its PromQL
// parser, and every metric either names is in a real scrape.
func TestRulesAndDashboardNameRealMetrics(t *testing.T) {
	scraped := scrape(t)
	for _, f := range []struct {
		name  string
		exprs []string
	}{
		{rulesFile, ruleExprs(t, rulesFile)},
		{dashboardFile, dashboardExprs(t, dashboardFile)},
	} {
		missing, err := unknown(scraped, f.exprs...)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if len(missing) > 0 {
			t.Errorf("%s names metrics no scrape has: %v", f.name, missing)
		}
	}
}

// TestCheckCatchesAMisspeltMetric: the check itself, on a copy of the rules
// with one metric misspelt, and on queries that name nothing or do not
// parse.
func TestCheckCatchesAMisspeltMetric(t *testing.T) {
	scraped := scrape(t)
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	const good, bad = "mqlite_queue_oldest_active_age_seconds", "mqlite_queue_oldest_active_age_second"
	misspelt := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(misspelt, []byte(strings.Replace(string(data), good, bad, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	missing, err := unknown(scraped, ruleExprs(t, misspelt)...)
	if err != nil || !slices.Equal(missing, []string{bad}) {
		t.Fatalf("misspelt rules: missing %v, %v; want [%s]", missing, err, bad)
	}
	for _, tc := range []struct{ expr, want string }{
		{`mqlite_queue_consumer == 0`, "mqlite_queue_consumer"},
		{`histogram_quantile(0.9, rate(mqlite_claim_duration_second_bucket[5m]))`, "mqlite_claim_duration_second_bucket"},
	} {
		if missing, err := unknown(scraped, tc.expr); err != nil || !slices.Equal(missing, []string{tc.want}) {
			t.Errorf("%s: missing %v, %v; want [%s]", tc.expr, missing, err, tc.want)
		}
	}
	for _, expr := range []string{`sum(`, `1 + 1`} {
		if _, err := unknown(scraped, expr); err == nil {
			t.Errorf("%q: accepted", expr)
		}
	}
}
