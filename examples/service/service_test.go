package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The payment provider's secrets: the service takes both (a rotation).
const (
	paymentSecretOld = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	paymentSecretNew = "whsec_dGhpcyBpcyB0aGUgbmV3IHBheW1lbnQga2V5"
)

// receiver is the webhook's far side: it verifies each signature and
// counts the deliveries of each webhook-id.
type receiver struct {
	mu    sync.Mutex
	seen  map[string]int
	wh    *standardwebhooks.Webhook
	wrong int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.wrong++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	r.seen[req.Header.Get("webhook-id")]++
}

// service is the example running as a process.
type service struct {
	cmd  *exec.Cmd
	url  string
	done chan error
	log  bytes.Buffer
}

// start runs the built binary on db and waits for its address.
func start(t *testing.T, bin, db, hook string) *service {
	t.Helper()
	s := &service{done: make(chan error, 1)}
	s.cmd = exec.Command(bin, "--db", db, "--addr", "127.0.0.1:0", "--webhook-url", hook, "--secret", secret)
	s.cmd.Env = append(os.Environ(), "PAYMENTS_WEBHOOK_SECRET="+paymentSecretOld+" "+paymentSecretNew)
	s.cmd.Stderr = &s.log
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("the service printed nothing: %v", s.cmd.Wait())
	}
	s.url = strings.TrimPrefix(lines.Text(), "serving on ")
	go func() {
		for lines.Scan() {
		}
		s.done <- s.cmd.Wait()
	}()
	return s
}

// build builds the service into dir.
func build(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return &receiver{seen: map[string]int{}, wh: wh}
}

// settled polls GET /orders/stats until nothing is pending, and returns
// the counts then.
func (s *service) settled(t *testing.T) stats {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var st stats
		resp, err := client.Get(s.url + "/orders/stats")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %+v after two minutes\n%s", st, s.log.String())
		}
		select {
		case <-time.After(50 * time.Millisecond): // a poll of the condition, not a timing assumption
		case err := <-s.done:
			t.Fatalf("the service exited: %v\n%s", err, s.log.String())
		}
	}
}

// stop SIGTERMs the service and waits for a clean exit.
func (s *service) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.log.String())
		}
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		t.Fatalf("no exit a minute after SIGTERM\n%s", s.log.String())
	}
}

// TestSIGTERMMidLoad: orders keep coming while the service is SIGTERMed; it
// stops cleanly, starts again on the same file, and then every order that
// exists was shipped exactly once (one shipment, its event completed) and
// relayed to the webhook with a valid signature.
func TestSIGTERMMidLoad(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir)
	rcv := newReceiver(t)
	hook := httptest.NewServer(rcv)
	defer hook.Close()
	db := filepath.Join(dir, "orders.db")

	svc := start(t, bin, db, hook.URL)
	const loaders, before = 4, 60 // SIGTERM once this many orders were accepted
	var (
		mu       sync.Mutex
		accepted int
		wg       sync.WaitGroup
	)
	sigterm := make(chan struct{})
	var once sync.Once
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				body := fmt.Sprintf(`{"item":"item-%d-%d","total_cents":%d}`, i, n, 100+n)
				resp, err := client.Post(svc.url+"/orders", "application/json", strings.NewReader(body))
				if err != nil {
					return // the service stopped listening
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					continue // refused while stopping: the order was not written
				}
				mu.Lock()
				accepted++
				if accepted == before {
					once.Do(func() { close(sigterm) })
				}
				mu.Unlock()
			}
		}()
	}
	<-sigterm
	svc.stop(t) // mid-load: the loaders are still posting
	wg.Wait()

	// Again, on the same file: what the first run left is handled now.
	svc = start(t, bin, db, hook.URL)
	s := svc.settled(t)
	svc.stop(t)

	mu.Lock()
	t.Logf("%d orders accepted before the load stopped; %+v", accepted, s)
	mu.Unlock()
	if s.Orders < before {
		t.Fatalf("%d orders, want at least the %d accepted before SIGTERM", s.Orders, before)
	}
	// Every order: one shipment, its event completed, relayed.
	conn, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var unshipped, doubled int64
	err = conn.QueryRowContext(context.Background(), `SELECT
		(SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = o.id)),
		(SELECT count(*) FROM shipments) - (SELECT count(*) FROM orders)`).Scan(&unshipped, &doubled)
	if err != nil {
		t.Fatal(err)
	}
	if unshipped != 0 || doubled != 0 || s.Shipments != s.Orders || s.Pending != 0 {
		t.Errorf("%d orders without their shipment, %d shipments too many; %+v", unshipped, doubled, s)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if int64(len(rcv.seen)) != s.Orders || rcv.wrong != 0 {
		t.Errorf("the webhook got %d distinct events (%d bad signatures), want %d", len(rcv.seen), rcv.wrong, s.Orders)
	}
}

// TestPaymentWebhooks is the inbox end to end: a payment provider's signed
// webhooks come in at POST /webhooks/payments, with its retries (the same
// webhook-id, signed anew, with either secret of a rotation), a forgery
// and a conflicting reuse of an id; each payment is recorded once (its row
// committed with the webhook's completion) and its "payment.received"
// event relayed to the signed webhook once, across a restart of the
// service between a webhook and its retry.
func TestPaymentWebhooks(t *testing.T) {
	dir := t.TempDir()
	bin := build(t, dir)
	rcv := newReceiver(t)
	hook := httptest.NewServer(rcv)
	defer hook.Close()
	db := filepath.Join(dir, "orders.db")
	client := &http.Client{Timeout: 10 * time.Second}

	// post sends one webhook as the provider does, signed with sec (or
	// with a key the service does not know: a forgery), and returns the
	// status.
	post := func(svc *service, id, body, sec string) int {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now() // the service checks the timestamp against its wall clock, 5m either way
		sig, err := wh.Sign(id, now, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(http.MethodPost, svc.url+"/webhooks/payments", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
		req.Header.Set("webhook-signature", sig)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	svc := start(t, bin, db, hook.URL)
	const forger = "whsec_Zm9yZ2VkIGJ5IHNvbWVvbmUgZWxzZSEhIQ=="
	for _, step := range []struct {
		id, body, secret string
		want             int
	}{
		{"evt_1", `{"order_id":1,"amount_cents":1299}`, paymentSecretOld, http.StatusOK},
		{"evt_1", `{"order_id":1,"amount_cents":1299}`, paymentSecretOld, http.StatusOK}, // a retry
		{"evt_2", `{"order_id":2,"amount_cents":500}`, paymentSecretNew, http.StatusOK},
		{"evt_1", `{"order_id":1,"amount_cents":1}`, paymentSecretNew, http.StatusConflict}, // the same id, another body
		{"evt_3", `{"order_id":3,"amount_cents":999999}`, forger, http.StatusUnauthorized},
	} {
		if got := post(svc, step.id, step.body, step.secret); got != step.want {
			t.Fatalf("%s signed with %.10s: %d, want %d\n%s", step.id, step.secret, got, step.want, svc.log.String())
		}
	}
	svc.settled(t)
	svc.stop(t)

	// The provider retries after the restart, with the rotated secret.
	svc = start(t, bin, db, hook.URL)
	for _, id := range []string{"evt_1", "evt_2"} {
		body := map[string]string{"evt_1": `{"order_id":1,"amount_cents":1299}`, "evt_2": `{"order_id":2,"amount_cents":500}`}[id]
		if got := post(svc, id, body, paymentSecretNew); got != http.StatusOK {
			t.Fatalf("a retry of %s after the restart: %d", id, got)
		}
	}
	s := svc.settled(t)
	svc.stop(t)

	conn, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var rows []string
	r, err := conn.QueryContext(context.Background(), `SELECT webhook_id || ':' || order_id || ':' || amount_cents FROM payments ORDER BY webhook_id`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var row string
		if err := r.Scan(&row); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows, " ") != "evt_1:1:1299 evt_2:2:500" || s.Payments != 2 {
		t.Fatalf("payments %q (%+v), want evt_1 and evt_2 once each, as first sent", rows, s)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.seen) != 2 || rcv.seen["payment-evt_1"] == 0 || rcv.seen["payment-evt_2"] == 0 || rcv.wrong != 0 {
		t.Errorf("the webhook got %v (%d bad signatures), want payment-evt_1 and payment-evt_2", rcv.seen, rcv.wrong)
	}
}
