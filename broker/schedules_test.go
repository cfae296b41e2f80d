package broker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mqlite/mqlite"
	"github.com/mqlite/mqlite/broker"
	"github.com/mqlite/mqlite/internal/keys"
	"github.com/mqlite/mqlite/internal/testdb"
	"github.com/mqlite/mqlite/internal/wire"
)

// TestScheduleListingMemoryIsBoundedByTheBudget: GET /v1/schedules reads
// the store a page at a time, so the memory one listing takes is bounded by
// the answer's byte budget and one schedule, not by every schedule of the
// file (here 32 MiB of bodies). The bound is measured in bytes allocated
// while the handler runs, not in time. The test is not parallel: the
// allocation count is the whole process's, and a sequential test runs
// while the parallel ones wait.
func TestScheduleListingMemoryIsBoundedByTheBudget(t *testing.T) {
	const n, size, budget = 64, 512 << 10, 64 << 10
	tb := testdb.Open(t, mqlite.Config{})
	tb.Queue(t, "q", mqlite.QueueOptions{})
	body := make([]byte, size)
	for i := range n {
		opts := mqlite.ScheduleOptions{Target: "q", Every: time.Hour, Body: body}
		if err := tb.Store.CreateSchedule(ctx, fmt.Sprintf("s%02d", i), opts); err != nil {
			t.Fatal(err)
		}
	}
	_, secret, err := keys.Create(ctx, tb.Store, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.New(broker.Config{Store: tb.Store, MaxResponseBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	h := srv.Handler()
	// list answers one page and the bytes allocated while it was made.
	list := func(after string) (wire.SchedulesResponse, uint64) {
		req := httptest.NewRequest("GET", "/v1/schedules?after="+url.QueryEscape(after), nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		var before, done runtime.MemStats
		runtime.ReadMemStats(&before)
		h.ServeHTTP(rec, req)
		runtime.ReadMemStats(&done)
		var page wire.SchedulesResponse
		if rec.Code != 200 {
			t.Fatalf("GET /v1/schedules after %q: %d %s", after, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatal(err)
		}
		return page, done.TotalAlloc - before.TotalAlloc
	}
	// Every byte of a page is copied a few times on its way (the driver's
	// row, the wire's base64, the answer's buffer): a bound of a few pages
	// holds however loaded the machine is, and reading every schedule
	// (n*size) is far past it.
	const bound = 16 * (budget + size)
	var names []string
	var most uint64
	for after := ""; ; {
		page, alloc := list(after)
		most = max(most, alloc)
		if alloc > bound {
			t.Fatalf("one page after %q allocated %d bytes, want at most %d (the file holds %d)", after, alloc, bound, n*size)
		}
		for _, s := range page.Schedules {
			names = append(names, s.Name)
		}
		if page.NextAfter == "" {
			break
		}
		after = page.NextAfter
	}
	if len(names) != n || names[0] != "s00" || names[n-1] != fmt.Sprintf("s%02d", n-1) {
		t.Fatalf("the pages named %d schedules (%v), want each of the %d once", len(names), names, n)
	}
	t.Logf("the largest page allocated %d bytes; the bodies add up to %d", most, n*size)
}

// FuzzScheduleListingQuery: whatever its query string, GET /v1/schedules
// answers 200 with names in order after "after" and at most "max" of
// them, or refuses the query (400); never a server error.
func FuzzScheduleListingQuery(f *testing.F) {
	for _, q := range []string{"", "after=b", "max=1", "max_bytes=1", "max=-1", "max=1001", "after=%ff", "after=a/b", "max=x"} {
		f.Add(q)
	}
	tb := testdb.Open(f, mqlite.Config{})
	tb.Queue(f, "q", mqlite.QueueOptions{})
	for _, name := range []string{"a", "b", "c"} {
		if err := tb.Store.CreateSchedule(ctx, name, mqlite.ScheduleOptions{Target: "q", Every: time.Hour}); err != nil {
			f.Fatal(err)
		}
	}
	_, secret, err := keys.Create(ctx, tb.Store, keys.Scope{Role: keys.Admin, Queues: []string{keys.AllQueues}})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := broker.New(broker.Config{Store: tb.Store})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = srv.Shutdown(ctx) })
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest("GET", "/v1/schedules", nil)
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code == http.StatusBadRequest {
			return
		}
		if rec.Code != http.StatusOK {
			t.Fatalf("?%s: %d %s", query, rec.Code, rec.Body)
		}
		var page wire.SchedulesResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatalf("?%s: %v", query, err)
		}
		q, _ := url.ParseQuery(query)
		prev := q.Get("after")
		for _, s := range page.Schedules {
			if s.Name <= prev {
				t.Fatalf("?%s: %s after %s", query, s.Name, prev)
			}
			prev = s.Name
		}
	})
}

// TestScheduleNamesPerScope: a key over some queues creates schedules only
// in the namespaces of their targets ("TARGET/NAME"), so creating one
// answers alike whether its name is free or taken by a schedule outside
// the key's scope, and two teams' schedules of the same short name live
// side by side; nothing outside the scope is changed, a refusal writes
// nothing.
func TestScheduleNamesPerScope(t *testing.T) {
	f := start(t, broker.Config{})
	f.tb.Queue(t, "other", mqlite.QueueOptions{})
	for _, name := range []string{"s", "q/nightly"} {
		opts := mqlite.ScheduleOptions{Target: "q", Every: time.Minute, Body: []byte("theirs")}
		if err := f.tb.Store.CreateSchedule(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
	}
	other := f.keys["other"]
	create := func(key, name, target string) (int, wire.Error) {
		body := fmt.Appendf(nil, `{"name":%q,"options":{"target":%q,"every_ms":60000,"body":"bWluZQ=="}}`, name, target)
		return f.do(t, "POST", "/v1/schedules", key, body)
	}
	// The same answer for a name in use outside the scope and a free one.
	for _, c := range []struct{ taken, free, target string }{
		{"s", "free", "other"},           // the shared namespace
		{"q/nightly", "q/free", "other"}, // another target's namespace
		{"q/nightly", "q/free", "q"},     // a target the key does not cover
	} {
		stT, eT := create(other, c.taken, c.target)
		stF, eF := create(other, c.free, c.target)
		eF.Message = strings.ReplaceAll(eF.Message, c.free, c.taken)
		if stT < 400 || stT == 409 || stT != stF || eT != eF {
			t.Errorf("create %s and %s into %s: %d %+v and %d %+v; want the same refusal", c.taken, c.free, c.target, stT, eT, stF, eF)
		}
	}
	// In the namespace of its own target, the key creates what it likes.
	if st, e := create(other, "other/nightly", "other"); st != 201 {
		t.Fatalf("create other/nightly: %d %+v", st, e)
	}
	if st, e := create(other, "other/nightly", "other"); st != 409 || e.Code != wire.CodeConflict {
		t.Errorf("create other/nightly again: %d %+v, want 409 (a name the key covers)", st, e)
	}
	var got wire.Schedule
	if st := f.call(t, "GET", "/v1/schedules/"+url.PathEscape("other/nightly"), other, "", &got); st != 200 || got.Options.Target != "other" {
		t.Errorf("GET other/nightly: %d %+v", st, got)
	}
	var list wire.SchedulesResponse
	if st := f.call(t, "GET", "/v1/schedules", other, "", &list); st != 200 || len(list.Schedules) != 1 || list.Schedules[0].Name != "other/nightly" {
		t.Errorf("the key's listing: %d %+v, want other/nightly only", st, list)
	}
	// A namespace holds its target's schedules only, whoever writes.
	if st, e := f.do(t, "PUT", "/v1/schedules/"+url.PathEscape("other/nightly"), f.keys["admin"],
		[]byte(`{"options":{"target":"q","every_ms":60000}}`)); st != 400 || e.Code != wire.CodeInvalid {
		t.Errorf("re-target other/nightly to q: %d %+v, want 400", st, e)
	}
	// A key over every queue has nothing outside its scope: plain names.
	if st, e := create(f.keys["admin"], "free", "other"); st != 201 {
		t.Errorf("admin over every queue creates free: %d %+v", st, e)
	}
	for name, target := range map[string]string{"s": "q", "q/nightly": "q", "other/nightly": "other", "free": "other"} {
		if s, err := f.tb.Store.GetSchedule(ctx, name); err != nil || s.Options.Target != target {
			t.Errorf("%s: %+v, %v; want it with target %s", name, s, err, target)
		}
	}
	if _, err := f.tb.Store.GetSchedule(ctx, "q/free"); !errors.Is(err, mqlite.ErrScheduleNotFound) {
		t.Errorf("q/free: %v, want it never created", err)
	}
}
