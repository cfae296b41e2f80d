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
	bin := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{seen: map[string]int{}, wh: wh}
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
	var s stats
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := client.Get(svc.url + "/orders/stats")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&s)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %+v after two minutes\n%s", s, svc.log.String())
		}
		select {
		case <-time.After(50 * time.Millisecond): // a poll of the condition, not a timing assumption
		case err := <-svc.done:
			t.Fatalf("the service exited: %v\n%s", err, svc.log.String())
		}
	}
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
