//go:build crash_injection

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	"github.com/mqlite/mqlite/internal/loadtest"
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
	line := loadtest.StartProcess(t, cmd, prefix)
	return &serveProc{cmd: cmd, url: line[strings.LastIndex(line, " ")+1:]}
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
	st, err := mqlite.Open(ctx, path, mqlite.Config{})
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

	ledger := loadtest.New()
	var pwg, cwg sync.WaitGroup
	produce := func(phase string) {
		for w := range producers {
			pwg.Add(1)
			go func() {
				defer pwg.Done()
				c := newC()
				defer c.Close()
				if err := ledger.Produce(ctx, c, "work", fmt.Sprintf("p%d%s", w, phase), perProducer/2, 5); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	done := make(chan struct{})
	for range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			c := newC()
			defer c.Close()
			if err := ledger.Consume(ctx, c, "work", mqlite.ReceiveOptions{Max: 10, Wait: 100 * time.Millisecond}, done); err != nil {
				t.Error(err)
			}
		}()
	}

	// Half the sends go to the primary; the kill lands while the other
	// half is under way: once a tenth of it was acknowledged.
	produce("a")
	pwg.Wait()
	produce("b")
	if err := ledger.WaitAcked(ctx, producers*perProducer/2+producers*perProducer/20); err != nil {
		t.Fatalf("before the kill: %v", err)
	}
	atKill := ledger.Counts().Acked
	killed := time.Now()
	_ = primary.cmd.Process.Kill()
	_ = primary.cmd.Wait()
	pwg.Wait()
	if atKill >= producers*perProducer {
		t.Errorf("the kill came after the last send was acknowledged (%d of %d)", atKill, producers*perProducer)
	}

	// A lost send fails the test as soon as the queue holds nothing more
	// to deliver, not at the wait's timeout.
	sc := newC()
	defer sc.Close()
	ledger.WaitCompletedOrEmpty(time.Minute, func() (int64, error) {
		s, err := sc.Stats(ctx, "work")
		return s.Active + s.Scheduled + s.Locked + s.Deferred, err
	})
	close(done)
	cwg.Wait()
	c := ledger.Counts()
	if c.Missing > 0 {
		t.Fatalf("%d of %d acknowledged sends never completed", c.Missing, c.Acked)
	}

	ready, served := lb.ready[1].Load(), lb.served[1].Load()
	if ready == 0 || served == 0 {
		t.Fatalf("the standby never became ready (%d) or served (%d)", ready, served)
	}
	toReady, toServed := time.Duration(ready-killed.UnixNano()), time.Duration(served-killed.UnixNano())
	if c.Acked != producers*perProducer {
		t.Errorf("%d sends acknowledged, want %d (the clients' retries should ride through the takeover)", c.Acked, producers*perProducer)
	}
	if c.ComeBack != 0 {
		t.Errorf("%d messages delivered again after their completion was acknowledged", c.ComeBack)
	}
	if toReady > time.Second {
		t.Errorf("takeover took %v to /readyz 200, goal under 1s", toReady)
	}
	t.Logf("takeover: killed at %d of %d sends acknowledged; kill to standby /readyz 200 in %v, to its first successful request in %v; %d acknowledged sends all completed, %d redeliveries",
		atKill, producers*perProducer, toReady.Round(time.Millisecond), toServed.Round(time.Millisecond), c.Acked, c.Redelivered)
}
