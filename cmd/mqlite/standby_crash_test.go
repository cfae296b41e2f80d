//go:build crash_injection

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/client"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/outbox"
)

// serveProc is an `mqlite serve` process of the test.
type serveProc struct {
	cmd *exec.Cmd
	url string
}

// startServe runs `mqlite serve --db path --addr 127.0.0.1:0 extra...` and
// returns once it printed the line starting with prefix (its address).
func startServe(t *testing.T, path, prefix string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--db", path, "--addr", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(binary(t), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			u := sc.Text()[strings.LastIndex(sc.Text(), " ")+1:]
			go func() { _, _ = io.Copy(io.Discard, out) }() // ends with the process
			return &serveProc{cmd: cmd, url: u}
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Fatalf("mqlite serve %v printed no %q line", extra, prefix)
	return nil
}

// balancer is the load balancer of the test: a reverse proxy to whichever
// backend answered /readyz 200 last, checked every 5ms, as an operator's
// load balancer would route between a primary and its standby.
type balancer struct {
	backends []*url.URL
	current  atomic.Int32 // index into backends
	// ready[i] and served[i]: when backend i first answered /readyz 200,
	// and first served a 2xx API request, in UnixNano (0: not yet).
	ready, served []atomic.Int64
}

func newBalancer(t *testing.T, urls ...string) *balancer {
	b := &balancer{ready: make([]atomic.Int64, len(urls)), served: make([]atomic.Int64, len(urls))}
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		b.backends = append(b.backends, pu)
	}
	return b
}

// check polls every backend's /readyz until done closes.
func (b *balancer) check(done <-chan struct{}) {
	hc := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for i, u := range b.backends {
			resp, err := hc.Get(u.String() + "/readyz")
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				b.ready[i].CompareAndSwap(0, time.Now().UnixNano())
				b.current.Store(int32(i))
			}
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// proxy is the balancer's HTTP handler.
func (b *balancer) proxy(tr http.RoundTripper) http.Handler {
	return &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(r *httputil.ProxyRequest) {
			i := b.current.Load()
			r.SetURL(b.backends[i])
			r.Out = r.Out.WithContext(context.WithValue(r.Out.Context(), backendKey{}, i))
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode < 300 && strings.HasPrefix(resp.Request.URL.Path, "/v1/") {
				b.served[resp.Request.Context().Value(backendKey{}).(int32)].CompareAndSwap(0, time.Now().UnixNano())
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway) // the client retries a 502
		},
	}
}

type backendKey struct{}

// TestStandbyTakeoverCrash runs `mqlite serve` as a primary and `mqlite
// serve --standby` on the same file behind a load balancer that routes by
// /readyz, SIGKILLs the primary under load, and measures the takeover: from
// the kill to the standby's /readyz 200, and to its first successful API
// request. Nothing acknowledged is lost: every send answered 2xx is
// completed in the end, and no message whose completion was answered 2xx is
// delivered again.
func TestStandbyTakeoverCrash(t *testing.T) {
	const producers, consumers, perProducer = 2, 2, 600
	path := filepath.Join(t.TempDir(), "standby.db")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := mqlite.Open(ctx, path, mqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateQueue(ctx, "work", mqlite.QueueOptions{LockDuration: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	_, key, err := keys.Create(ctx, st, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	primary := startServe(t, path, "mqlite broker serving")
	standby := startServe(t, path, "mqlite broker standby", "--standby")
	defer func() {
		_ = standby.cmd.Process.Signal(syscall.SIGTERM)
		if err := standby.cmd.Wait(); err != nil {
			t.Errorf("standby process: %v", err)
		}
	}()
	// The standby answers, but is not ready while the primary lives.
	for _, c := range []struct {
		path string
		want int
	}{{"/healthz", http.StatusOK}, {"/readyz", http.StatusServiceUnavailable}, {"/v1/queues", http.StatusServiceUnavailable}} {
		resp, err := http.Get(standby.url + c.path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("standby %s: %d, want %d", c.path, resp.StatusCode, c.want)
		}
	}

	lb := newBalancer(t, primary.url, standby.url)
	checked := make(chan struct{})
	stopCheck := make(chan struct{})
	go func() { defer close(checked); lb.check(stopCheck) }()
	defer func() { close(stopCheck); <-checked }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	front := httptest.NewServer(lb.proxy(tr))
	defer front.Close()

	newC := func() *client.Client {
		c, err := client.New(client.Config{URL: front.URL, Key: key, MaxElapsed: 30 * time.Second,
			Timeout: 5 * time.Second, InitialInterval: 5 * time.Millisecond, MaxInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	var mu sync.Mutex
	acked := map[string]bool{}     // sends answered 2xx
	completed := map[string]bool{} // completions answered 2xx
	comeBack := 0                  // deliveries of a message whose completion was answered 2xx
	sentHalf := make(chan struct{})
	var sentN atomic.Int64
	var pwg, cwg sync.WaitGroup
	for w := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			c := newC()
			defer c.Close()
			for i := 0; i < perProducer; i += 5 {
				msgs := make([]outbox.Message, 5)
				for j := range msgs {
					id := fmt.Sprintf("p%d-%d", w, i+j)
					msgs[j] = outbox.Message{Body: []byte(id), MessageID: id}
				}
				res, err := c.SendBatch(ctx, "work", msgs)
				if err != nil {
					t.Errorf("producer %d: %v", w, err)
					return
				}
				mu.Lock()
				for j, r := range res {
					if r.Err == nil {
						acked[msgs[j].MessageID] = true
					}
				}
				mu.Unlock()
				if sentN.Add(5) == producers*perProducer/2 {
					close(sentHalf)
				}
			}
		}()
	}
	done := make(chan struct{})
	progress := make(chan struct{}, 1) // a consumer completed a batch
	for range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			c := newC()
			defer c.Close()
			for {
				select {
				case <-done:
					return
				default:
				}
				msgs, err := c.Receive(ctx, "work", mqlite.ReceiveOptions{Max: 10, Wait: 100 * time.Millisecond})
				if err != nil {
					t.Errorf("receive: %v", err)
					return
				}
				if len(msgs) == 0 {
					continue
				}
				locks := make([]mqlite.Lock, len(msgs))
				for i, m := range msgs {
					locks[i] = m.Lock()
				}
				mu.Lock()
				for _, m := range msgs {
					if completed[string(m.Body)] {
						comeBack++
					}
				}
				mu.Unlock()
				errs, err := c.CompleteBatch(ctx, locks)
				if err != nil {
					t.Errorf("complete: %v", err)
					return
				}
				mu.Lock()
				for i, m := range msgs {
					if errs[i] == nil {
						completed[string(m.Body)] = true
					}
				}
				mu.Unlock()
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}

	<-sentHalf // the primary is under load
	killed := time.Now()
	_ = primary.cmd.Process.Kill()
	_ = primary.cmd.Wait()
	pwg.Wait()

	// Every acknowledged send is completed in the end.
	deadline := time.After(time.Minute)
	for {
		mu.Lock()
		missing := 0
		for id := range acked {
			if !completed[id] {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		select {
		case <-deadline:
			close(done)
			cwg.Wait()
			t.Fatalf("%d acknowledged sends never completed", missing)
		case <-progress:
		}
	}
	close(done)
	cwg.Wait()

	ready, served := lb.ready[1].Load(), lb.served[1].Load()
	if ready == 0 || served == 0 {
		t.Fatalf("the standby never became ready (%d) or served (%d)", ready, served)
	}
	toReady, toServed := time.Duration(ready-killed.UnixNano()), time.Duration(served-killed.UnixNano())
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != producers*perProducer {
		t.Errorf("%d sends acknowledged, want %d (the clients' retries should ride through the takeover)", len(acked), producers*perProducer)
	}
	if comeBack != 0 {
		t.Errorf("%d messages delivered again after their completion was acknowledged", comeBack)
	}
	if toReady > time.Second {
		t.Errorf("takeover took %v to /readyz 200, goal under 1s", toReady)
	}
	t.Logf("takeover: kill to standby /readyz 200 in %v, to its first successful request in %v; %d acknowledged sends all completed",
		toReady.Round(time.Millisecond), toServed.Round(time.Millisecond), len(acked))
}
